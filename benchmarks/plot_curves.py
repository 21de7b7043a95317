"""Learning curves from TensorBoard event files: return vs. env steps.

    python benchmarks/plot_curves.py --title HalfCheetah-v5 --out docs/x.png \
        LOGDIR [LOGDIR ...]

Each logdir is one seed; the plot shows every seed's `episode/return`
against `perf/env_steps` (both logged at the same learner step) and their
mean. Needs the `bench` extra (matplotlib).
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

import numpy as np


def read_curve(logdir: str):
  """Returns (env_steps [N], returns [N]) from a run's event files."""
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top

  steps_by_step, returns_by_step = {}, {}
  for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents*"))):
    acc = event_accumulator.EventAccumulator(
      path, size_guidance={event_accumulator.TENSORS: 0}
    )
    acc.Reload()
    for tag, table in (
      ("perf/env_steps", steps_by_step),
      ("episode/return", returns_by_step),
    ):
      if tag in acc.Tags().get("tensors", []):
        for event in acc.Tensors(tag):
          table[event.step] = float(
            np.asarray(tf_make_ndarray(event.tensor_proto))
          )
  common = sorted(set(steps_by_step) & set(returns_by_step))
  return (
    np.array([steps_by_step[s] for s in common]),
    np.array([returns_by_step[s] for s in common]),
  )


def tf_make_ndarray(proto):
  from tensorboard.util import tensor_util  # pylint: disable=g-import-not-at-top

  return tensor_util.make_ndarray(proto)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawTextHelpFormatter
  )
  p.add_argument("logdirs", nargs="+")
  p.add_argument("--title", required=True)
  p.add_argument("--out", required=True)
  args = p.parse_args(argv)
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
  grid = None
  curves = []
  for i, logdir in enumerate(args.logdirs):
    x, y = read_curve(logdir)
    if x.size == 0:
      print(f"no curve in {logdir}", file=sys.stderr)
      continue
    ax.plot(x, y, alpha=0.35, lw=1, label=f"seed {i}")
    curves.append((x, y))
  if curves:
    grid = np.linspace(0, min(c[0].max() for c in curves), 200)
    mean = np.mean([np.interp(grid, x, y) for x, y in curves], axis=0)
    ax.plot(grid, mean, color="black", lw=2, label="mean")
  ax.set_xlabel("environment steps")
  ax.set_ylabel("episode return (training episodes)")
  ax.set_title(args.title)
  ax.grid(alpha=0.3)
  ax.legend(loc="lower right")
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  fig.savefig(args.out)
  print(args.out)
  return 0


if __name__ == "__main__":
  sys.exit(main())
