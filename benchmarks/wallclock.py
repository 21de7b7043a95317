"""Per wall clock on one machine: this project's run against a peer's.

    python benchmarks/wallclock.py --minutes 20 \\
        --pair pong /work/logs/wallclock/2core/pong-s0 /work/logs/peers/sb3/pong-s0 \\
        --pair space_invaders OURS_LOGDIR PEER_LOGDIR

Each pair is one game run twice on the same machine, each run alone for
at least --minutes of its own clock: `OURS_LOGDIR` a learner logdir
(benchmarks/learn.py, atari_suite.py), `PEER_LOGDIR` one of
benchmarks/peer_sb3.py. Prints one JSON line per pair: for each side the
agent steps reached at --minutes, agent steps/s, and the mean return of the
last 100 games at that minute (with its human-normalised score), then
`ours_ahead` (ours > peer's) and the ratio of agent steps.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from typing import Any, Dict, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compare_reference import read_run  # noqa: E402

from seed_rl.atari import scores  # noqa: E402

TAG = "episode/return_last100"


def _scalars(logdir: str, tag: str) -> Tuple[np.ndarray, np.ndarray]:
  """(steps [N], values [N]) of a scalar the peer's SummaryWriter wrote."""
  from tensorboard.backend.event_processing import event_accumulator

  steps, values = [], []
  for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents*"))):
    acc = event_accumulator.EventAccumulator(path)
    acc.Reload()
    if tag in acc.Tags().get("scalars", []):
      for event in acc.Scalars(tag):
        steps.append(event.step)
        values.append(event.value)
  order = np.argsort(steps, kind="stable")
  return np.asarray(steps)[order], np.asarray(values)[order]


def _at(steps, values, minutes, window) -> Dict[str, Any]:
  """Agent steps and the last logged return at `window` minutes."""
  if minutes.size == 0 or minutes[-1] < window * 0.98:
    raise ValueError(
      f"the run logged up to {minutes[-1] if minutes.size else 0:.1f} "
      f"minutes, short of --minutes {window:g}"
    )
  upto = minutes <= window
  step = float(np.interp(window, minutes, steps))
  return {
    "agent_steps": int(step),
    "agent_steps_per_s": round(step / (60.0 * window), 1),
    "return_last100": float(values[upto][-1]),
  }


def ours_at(logdir: str, window: float) -> Dict[str, Any]:
  run = read_run(logdir)
  return _at(run["steps"], run["value"], run["minutes"], window)


def peer_at(logdir: str, window: float) -> Dict[str, Any]:
  steps, returns = _scalars(logdir, TAG)
  clock_steps, elapsed = _scalars(logdir, "perf/elapsed_s")
  if steps.size == 0 or clock_steps.size == 0:
    raise ValueError(f"{logdir}: no {TAG} or perf/elapsed_s scalars")
  minutes = np.interp(steps, clock_steps, elapsed) / 60.0
  # The clock's last point is the run's end: count steps up to it.
  all_steps = np.concatenate([steps, clock_steps[-1:]])
  all_minutes = np.concatenate([minutes, elapsed[-1:] / 60.0])
  all_values = np.concatenate([returns, returns[-1:]])
  return _at(all_steps, all_values, all_minutes, window)


def compare(game: str, ours: str, peer: str, window: float) -> Dict[str, Any]:
  out: Dict[str, Any] = {"game": game, "minutes": window}
  for side, path, read in (("ours", ours, ours_at), ("peer", peer, peer_at)):
    row = read(path, window)
    row["hns"] = round(scores.human_normalized(game, row["return_last100"]), 3)
    row["logdir"] = path
    out[side] = row
  out["ours_ahead"] = (
    out["ours"]["return_last100"] > out["peer"]["return_last100"]
  )
  out["agent_steps_ratio"] = round(
    out["ours"]["agent_steps"] / max(1, out["peer"]["agent_steps"]), 2
  )
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--minutes", type=float, required=True)
  parser.add_argument(
    "--pair",
    nargs=3,
    action="append",
    required=True,
    metavar=("GAME", "OURS_LOGDIR", "PEER_LOGDIR"),
  )
  args = parser.parse_args(argv)
  for game, ours, peer in args.pair:
    try:
      print(json.dumps(compare(game, ours, peer, args.minutes)), flush=True)
    except ValueError as e:
      print(json.dumps({"game": game, "error": str(e)}), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
