"""Learning curves from TensorBoard event files: return vs. env steps.

    python benchmarks/plot_curves.py --title HalfCheetah-v5 --out docs/x.png \
        LOGDIR [LOGDIR ...]
    python benchmarks/plot_curves.py --title Pong --out docs/pong.png \
        --labels "V-trace,PPO" --x both LOGDIR_A LOGDIR_B

Without --labels each logdir is one seed of one setting: the plot shows
every seed's `episode/return` against `perf/env_steps` (both logged at the
same learner step), their mean and their min-max band. With --labels, one
name per logdir: logdirs that share a name are one group (its mean and
min-max band), a name used once is a plain line, e.g.
--labels "PPO,PPO,PPO,V-trace,V-trace,V-trace". --x both adds a panel
against wall-clock minutes. --reference "NAME:X=Y,X=Y,..." (repeatable)
marks a published curve's points on the agent-steps panel, e.g. CleanRL's
PPO at matched agent steps:
--reference "CleanRL PPO:2e6=530,4e6=660,5e6=760", or a curve of
references.py by name: --reference cleanrl:space_invaders. --tag episode/return_last100
draws the smoother mean of the last 100 episodes instead. Needs the `bench`
extra (matplotlib).
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from typing import Dict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from references import Reference, named  # noqa: E402


def read_curve(logdir: str, tag: str = "episode/return"):
  """Returns (env_steps [N], values of `tag` [N], minutes since the first
  point [N]) from a run's event files."""
  from seed_rl.common import tf_startup

  tf_startup.import_tensorflow()  # tensorboard loads it; keep its lines off
  from tensorboard.backend.event_processing import event_accumulator

  steps_by_step: Dict[int, float] = {}
  returns_by_step: Dict[int, float] = {}
  wall_by_step: Dict[int, float] = {}
  for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents*"))):
    acc = event_accumulator.EventAccumulator(
      path, size_guidance={event_accumulator.TENSORS: 0}
    )
    acc.Reload()
    for name, table in (
      ("perf/env_steps", steps_by_step),
      (tag, returns_by_step),
    ):
      if name in acc.Tags().get("tensors", []):
        for event in acc.Tensors(name):
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
  from tensorboard.util import tensor_util

  return tensor_util.make_ndarray(proto)


def parse_reference(text: str) -> Reference:
  """ "NAME:X=Y,X=Y" -> (NAME, xs [N], ys [N], game None), or a built-in
  curve by name ("cleanrl:GAME", references.py); a clear error otherwise."""
  built_in = named(text)
  if built_in is not None:
    return built_in
  name, sep, points = text.rpartition(":")
  if not sep or not name:
    raise ValueError(f"--reference {text!r}: expected NAME:X=Y,X=Y,...")
  xs, ys = [], []
  for point in points.split(","):
    x, eq, y = point.partition("=")
    try:
      if not eq:
        raise ValueError(point)
      xs.append(float(x))
      ys.append(float(y))
    except ValueError:
      raise ValueError(
        f"--reference {text!r}: point {point!r} is not X=Y (numbers)"
      ) from None
  order = np.argsort(xs)  # given in any order; drawn and read ascending
  return Reference(name, np.array(xs)[order], np.array(ys)[order], None)


def reference_to(last: float, xs: np.ndarray, ys: np.ndarray):
  """The points of a reference (xs ascending) up to the first at or past
  `last`, the runs' last agent step: the rest would only stretch the axis
  (CleanRL's curves run to 10M agent steps)."""
  n = int(np.searchsorted(xs, last, side="left")) + 1
  return xs[:n], ys[:n]


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawTextHelpFormatter
  )
  p.add_argument("logdirs", nargs="+")
  p.add_argument("--title", required=True)
  p.add_argument("--out", required=True)
  p.add_argument(
    "--labels",
    default=None,
    help="comma-separated, one per logdir: labelled lines; logdirs with the "
    "same label are one group, drawn as its mean and min-max band",
  )
  p.add_argument(
    "--x", choices=("env_steps", "minutes", "both"), default="env_steps"
  )
  p.add_argument(
    "--tag",
    default="episode/return",
    help="the scalar to draw: episode/return (episodes ended in each "
    "logging interval) or episode/return_last100 (the console's smoother "
    "mean of the last 100, logged since 2026-11-27)",
  )
  p.add_argument(
    "--reference",
    action="append",
    default=[],
    help='a published curve, "NAME:X=Y,X=Y,..." (agent steps = return) '
    'or "cleanrl:GAME" (references.py), drawn as markers on the '
    "agent-steps panel; repeatable",
  )
  return p


def _draw_groups(ax, panel, groups, runs, labels, args) -> None:
  """Each group's runs against `panel`'s x: the mean and min-max band of a
  group of several (or the seeds and their mean without labels)."""
  for name, members in groups.items():
    curves = []
    for i in members:
      steps, y, minutes = runs[i][1]
      x = steps if panel == "env_steps" else minutes
      if x.size == 0:
        print(f"no {args.tag} curve in {args.logdirs[i]}", file=sys.stderr)
        continue
      curves.append((x, y))
      if not labels:
        ax.plot(x, y, alpha=0.35, lw=1, label=f"seed {i}")
    if not curves:
      continue
    if len(curves) == 1 and labels:
      ax.plot(*curves[0], lw=1.5, label=name)
      continue
    grid = np.linspace(0, min(c[0].max() for c in curves), 200)
    ys = np.array([np.interp(grid, x, y) for x, y in curves])
    line = ax.plot(
      grid,
      ys.mean(axis=0),
      lw=2,
      color="black" if not labels else None,
      label=f"{name} (mean of {len(curves)})" if labels else name,
    )[0]
    ax.fill_between(
      grid, ys.min(axis=0), ys.max(axis=0), color=line.get_color(), alpha=0.2
    )


def main(argv=None) -> int:
  p = _parser()
  args = p.parse_args(argv)
  try:
    references = [parse_reference(r) for r in args.reference]
  except ValueError as e:
    p.error(str(e))
  labels = args.labels.split(",") if args.labels else None
  if labels is not None and len(labels) != len(args.logdirs):
    p.error(f"--labels has {len(labels)} names for {len(args.logdirs)} logdirs")
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  panels = ["env_steps", "minutes"] if args.x == "both" else [args.x]
  fig, axes = plt.subplots(
    1, len(panels), figsize=(7 * len(panels), 4.2), dpi=110, squeeze=False
  )
  runs = [(i, read_curve(d, args.tag)) for i, d in enumerate(args.logdirs)]
  if not any(curve[0].size for _, curve in runs):
    p.error(f"no logdir has {args.tag} with perf/env_steps in its event files")
  # Logdirs sharing a label form a group (seeds of one setting): its mean
  # and min-max band over a common x grid; a group of one is its own line.
  # Without labels every logdir is a seed of one group.
  names = labels or ["mean"] * len(args.logdirs)
  groups = {
    name: [i for i, n in enumerate(names) if n == name] for name in names
  }
  for panel, ax in zip(panels, axes[0]):
    _draw_groups(ax, panel, groups, runs, labels, args)
    if panel == "env_steps":
      last = max(curve[0].max() for _, curve in runs if curve[0].size)
      for ref_name, xs, ys, _ in references:
        ax.plot(*reference_to(last, xs, ys), "o--", lw=1, ms=4, label=ref_name)
    ax.set_xlabel(
      "agent steps"
      if panel == "env_steps"
      else "wall-clock minutes since the first log line"
    )
    ax.set_ylabel(
      "mean return of the last 100 training episodes"
      if args.tag == "episode/return_last100"
      else "episode return (training episodes)"
    )
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
