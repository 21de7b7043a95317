"""Runs against a published learning curve at matched agent steps, as JSON.

    python benchmarks/compare_reference.py --reference cleanrl:seaquest \\
        --at 1e6,2e6,3e6,4e6 --minutes 60 RUN [RUN ...]
    python benchmarks/compare_reference.py \\
        --reference "CleanRL ppo_atari:2e6=870,4e6=880,6e6=880,8e6=1160" \\
        --game seaquest --minutes 60 RUN [RUN ...]

Each RUN is one seed: a logdir (its event files' `episode/return_last100`)
or a console log (learn.py's or seed_rl.train's stdout, for runs older than
that scalar). The metric is the mean return of the last 100 training
episodes, the console's `return(last100)`. Printed:

- `at_agent_steps`: for every --at milestone, each run's return there
  (linear between logged points; null past the run's end), their mean over
  the runs that reached it (`n`), the reference there (linear between its
  points; null outside them, never extrapolated) and mean / reference;
- `at_minutes` (with --minutes): each run's return after that many minutes
  of its own (or at its end, `reached: false`), next to the reference at the
  agent steps that run had made by then: the issue-style "after 60 minutes"
  comparison, where every run is judged at its own step count;
- `runs`: each run's last point;
- with an Atari game (`--game`, or the game of a `cleanrl:GAME`
  reference), the human-normalised score (seed_rl.atari.scores) of each
  mean and of the reference beside them (`hns_*`).

Published curves (CleanRL's Open RL Benchmark) are means over seeds, so the
fair comparison is the mean over our seeds, not the best one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional

import numpy as np

# Reading event files imports TensorFlow: keep most of its start-up lines
# off stderr (the few it writes before absl's logging starts ignore this).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from plot_curves import parse_reference, read_curve  # noqa: E402
from references import Reference  # noqa: E402

from seed_rl.atari.scores import (  # noqa: E402
  human_normalized,
  reference_scores,
)
from seed_rl.common.metrics import parse_progress_line  # noqa: E402

TAG = "episode/return_last100"


def read_run(path: str) -> Dict[str, Any]:
  """{'steps', 'value', 'minutes'}: [N] each, in logging order, and
  'source', from a logdir or a console log; ValueError naming what is
  missing."""
  if os.path.isdir(path):
    steps, value, minutes = read_curve(path, TAG)
    source = "event files"
    if steps.size == 0:
      raise ValueError(
        f"{path}: no {TAG} in its event files (learners write it since "
        "2026-11-27); pass the run's console log instead"
      )
    clock_steps, elapsed, _ = read_curve(path, "perf/elapsed_s")
    if clock_steps.size:
      # The learner's own clock; event wall times otherwise, which start
      # at the first logged point, not at the learner's start.
      total = continuous_clock(elapsed)
      minutes = np.interp(steps, clock_steps, total) / 60.0
  elif os.path.isfile(path):
    rows = []
    with open(path, errors="replace") as f:
      for line in f:
        row = parse_progress_line(line)
        if row is not None:
          rows.append(row)
    if not rows:
      raise ValueError(
        f"{path}: no learner progress line with a return(last100) in it"
      )
    elapsed = np.array([r["elapsed_s"] for r in rows])
    if np.any(np.diff(elapsed) < 0):
      raise ValueError(
        f"{path}: the learner's clock goes back (several runs in one log?); "
        "give each run its own file"
      )
    steps = np.array([r["env_steps"] for r in rows])
    value = np.array([r["return_last100"] for r in rows])
    minutes = elapsed / 60.0
    source = "console log"
  else:
    raise ValueError(f"{path}: neither a logdir nor a console log file")
  return {"steps": steps, "value": value, "minutes": minutes, "source": source}


def continuous_clock(elapsed: np.ndarray) -> np.ndarray:
  """[N] seconds of a clock that starts again from 0 in each process of a
  resumed run, made to run on: each restart adds the time before it."""
  out = np.asarray(elapsed, dtype=np.float64).copy()
  offset = 0.0
  for i in range(1, out.size):
    if elapsed[i] < elapsed[i - 1]:
      offset += float(elapsed[i - 1])
    out[i] = elapsed[i] + offset
  return out


def interp_within(x: float, xs: np.ndarray, ys: np.ndarray) -> Optional[float]:
  """ys at x, linear between points; None outside [xs[0], xs[-1]]."""
  if xs.size == 0 or x < xs[0] or x > xs[-1]:
    return None
  return float(np.interp(x, xs, ys))


def _ratio(ours: Optional[float], ref: Optional[float]) -> Optional[float]:
  # A ratio means nothing against a reference at or below 0 (Pong's -21..21);
  # the difference is printed beside it.
  if ours is None or ref is None or ref <= 0:
    return None
  return round(ours / ref, 3)


def _diff(ours: Optional[float], ref: Optional[float]) -> Optional[float]:
  if ours is None or ref is None:
    return None
  return round(ours - ref, 2)


def _hns(game: Optional[str], score: Optional[float]) -> Optional[float]:
  if game is None or score is None:
    return None
  return round(human_normalized(game, score), 4)


def compare(
  runs: Dict[str, Dict[str, Any]],
  reference: Reference,
  at: List[float],
  minutes: Optional[float],
  game: Optional[str] = None,
) -> dict:
  """The JSON described at the top; with an Atari `game`, human-normalised
  scores (`hns_*`) of the means and of the reference beside the returns."""
  name, ref_x, ref_y, _ = reference
  out: dict = {
    "metric": "return_last100",
    "game": game,
    "reference": {
      "name": name,
      "points": {f"{x:g}": y for x, y in zip(ref_x.tolist(), ref_y.tolist())},
    },
    "runs": [],
    "at_agent_steps": [],
  }
  for path, r in runs.items():
    out["runs"].append(
      {
        "run": path,
        "source": r["source"],
        "agent_steps": int(r["steps"][-1]),
        "minutes": round(float(r["minutes"][-1]), 1),
        "return_last100": round(float(r["value"][-1]), 2),
        "best_return_last100": round(float(r["value"].max()), 2),
      }
    )
  for x in at:
    values = [interp_within(x, r["steps"], r["value"]) for r in runs.values()]
    reached = [v for v in values if v is not None]
    mean = float(np.mean(reached)) if reached else None
    ref = interp_within(x, ref_x, ref_y)
    out["at_agent_steps"].append(
      {
        "agent_steps": x,
        "returns": [None if v is None else round(v, 2) for v in values],
        "n": len(reached),
        "mean": None if mean is None else round(mean, 2),
        "min": round(min(reached), 2) if reached else None,
        "max": round(max(reached), 2) if reached else None,
        "reference": None if ref is None else round(ref, 2),
        "ratio": _ratio(mean, ref),
        "difference": _diff(mean, ref),
        "hns_mean": _hns(game, mean),
        "hns_reference": _hns(game, ref),
      }
    )
  if minutes is not None:
    rows = []
    differences: List[float] = []
    ratios: List[float] = []
    for path, r in runs.items():
      # The last logged point at or before `minutes` of the run's own clock.
      i = int(np.searchsorted(r["minutes"], minutes, side="right")) - 1
      i = max(i, 0)
      steps, value = float(r["steps"][i]), float(r["value"][i])
      ref = interp_within(steps, ref_x, ref_y)
      ratio, difference = _ratio(value, ref), _diff(value, ref)
      ratios += [] if ratio is None else [ratio]
      differences += [] if difference is None else [difference]
      rows.append(
        {
          "run": path,
          "reached": bool(r["minutes"][-1] >= minutes),
          "minutes": round(float(r["minutes"][i]), 1),
          "agent_steps": int(steps),
          "return_last100": round(value, 2),
          "reference": None if ref is None else round(ref, 2),
          "ratio": ratio,
          "difference": difference,
          "hns": _hns(game, value),
          "hns_reference": _hns(game, ref),
        }
      )
    out["at_minutes"] = {
      "minutes": minutes,
      "runs": rows,
      "at_or_above_reference": sum(d >= 0 for d in differences),
      "mean_ratio": round(float(np.mean(ratios)), 3) if ratios else None,
    }
  return out


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawTextHelpFormatter
  )
  p.add_argument(
    "runs", nargs="+", help="logdirs or console logs, one per seed"
  )
  p.add_argument(
    "--reference",
    required=True,
    help='the published curve, "NAME:X=Y,X=Y,..." (agent steps = return), '
    'or "cleanrl:GAME" for CleanRL\'s PPO curve on an Atari game '
    "(references.py)",
  )
  p.add_argument(
    "--game",
    default=None,
    help="the Atari game, for human-normalised scores (default: the "
    "cleanrl:GAME reference's game; none for other references)",
  )
  p.add_argument(
    "--at",
    default=None,
    help="comma-separated agent steps to compare at (default: the "
    "reference's own points)",
  )
  p.add_argument(
    "--minutes",
    type=float,
    default=None,
    help="also judge each run after this many minutes of its own clock",
  )
  return p


def main(argv=None) -> int:
  p = _parser()
  args = p.parse_args(argv)
  try:
    reference = parse_reference(args.reference)
    game = args.game or reference.game
    if game is not None:
      reference_scores(game)  # an unknown game fails here, by name
  except ValueError as e:
    p.error(str(e))
  try:
    at = (
      [float(x) for x in args.at.split(",")]
      if args.at
      else sorted(reference[1].tolist())
    )
  except ValueError:
    p.error(f"--at {args.at!r}: expected comma-separated numbers, e.g. 1e6,2e6")
  runs = {}
  for path in args.runs:
    try:
      runs[path] = read_run(path)
    except ValueError as e:
      p.error(str(e))
  print(json.dumps(compare(runs, reference, at, args.minutes, game), indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
