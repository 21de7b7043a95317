"""Learning curves from TensorBoard event files: return vs. env steps.

    python benchmarks/plot_curves.py --title HalfCheetah-v5 --out docs/x.png \
        LOGDIR [LOGDIR ...]
    python benchmarks/plot_curves.py --title Pong --out docs/pong.png \
        --labels "V-trace,PPO" --x both LOGDIR_A LOGDIR_B

Each logdir is one seed; the plot shows every seed's `episode/return`
against `perf/env_steps` (both logged at the same learner step) and their
mean. With --labels, each logdir is its own labelled line (no mean); --x
both adds a panel against wall-clock minutes. Needs the `bench` extra
(matplotlib).
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

  steps_by_step, returns_by_step, wall_by_step = {}, {}, {}
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
          wall_by_step[event.step] = event.wall_time
  common = sorted(set(steps_by_step) & set(returns_by_step))
  wall = np.array([wall_by_step[s] for s in common])
  return (
    np.array([steps_by_step[s] for s in common]),
    np.array([returns_by_step[s] for s in common]),
    (wall - wall.min()) / 60.0 if wall.size else wall,
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
  p.add_argument(
    "--labels",
    default=None,
    help="comma-separated, one per logdir: labelled lines",
  )
  p.add_argument(
    "--x", choices=("env_steps", "minutes", "both"), default="env_steps"
  )
  args = p.parse_args(argv)
  labels = args.labels.split(",") if args.labels else None
  if labels is not None and len(labels) != len(args.logdirs):
    p.error(f"--labels has {len(labels)} names for {len(args.logdirs)} logdirs")
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  panels = ["env_steps", "minutes"] if args.x == "both" else [args.x]
  fig, axes = plt.subplots(
    1, len(panels), figsize=(7 * len(panels), 4.2), dpi=110, squeeze=False
  )
  runs = [(i, read_curve(d)) for i, d in enumerate(args.logdirs)]
  for panel, ax in zip(panels, axes[0]):
    curves = []
    for i, (steps, y, minutes) in runs:
      x = steps if panel == "env_steps" else minutes
      if x.size == 0:
        print(f"no curve in {args.logdirs[i]}", file=sys.stderr)
        continue
      if labels:
        ax.plot(x, y, lw=1.5, label=labels[i])
      else:
        ax.plot(x, y, alpha=0.35, lw=1, label=f"seed {i}")
      curves.append((x, y))
    if curves and not labels:
      grid = np.linspace(0, min(c[0].max() for c in curves), 200)
      mean = np.mean([np.interp(grid, x, y) for x, y in curves], axis=0)
      ax.plot(grid, mean, color="black", lw=2, label="mean")
    ax.set_xlabel(
      "agent steps"
      if panel == "env_steps"
      else "wall-clock minutes since the first log line"
    )
    ax.set_ylabel("episode return (training episodes)")
    ax.set_title(args.title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  fig.savefig(args.out)
  print(args.out)
  return 0


if __name__ == "__main__":
  sys.exit(main())
