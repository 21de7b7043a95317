"""Atari evaluation suites: every game of a suite with one configuration.

    python benchmarks/atari_suite.py run --suite atari5 --config 2core \\
        --minutes 60 --seed 0 --root /work/logs/suite
    python benchmarks/atari_suite.py report --suite atari5 --config 2core \\
        --root /work/logs/suite [--minutes 60]
    python benchmarks/atari_suite.py plot --suite atari5 \\
        --config 2core,accelerator --root /work/logs/suite --out FILE.png

`run` trains the suite's games one after another (benchmarks/learn.py, each
alone for --minutes; a logdir that already has a result.json is kept), then
scores each final checkpoint with `seed_rl.evaluate --protocol noop30`,
greedy and sampled, into `<logdir>/eval_noop30.json`. Logdirs are
`ROOT/<config>/<game>-s<seed>` (`--binding B --label L`: a configuration
with bindings on top, in `ROOT/<L>/`); every seed found there is one run. `report`
(also printed after `run`) prints one JSON line per game, then a summary:

- `agent_steps`, `return_last100`: each run after --minutes of its own clock
  (the mean return of its last 100 training episodes, whole games), or
  with --agent_steps N at N agent steps (`run --agent_steps N` stops each
  game there: runs side by side share the cores, so an hour alone is
  fixed as its agent steps before the runs start);
- `cleanrl`: CleanRL ppo_atari's return at that run's agent steps
  (benchmarks/references.py, sources there), `ratio` = ours / CleanRL's
  (null where CleanRL's is <= 0), and `hns_ratio`, the same on the
  human-normalised scale (defined for every game, Double Dunk's negative
  scores included: how much of CleanRL's progress over random play);
- `hns`: human-normalised score (seed_rl.atari.scores);
- `cleanrl_emulator`: the emulator CleanRL's curve ran on (the runs here:
  ale-py 0.12.1), and `emulator_effect` where the same agent was seen to
  learn differently on the two (references.EMULATOR_EFFECTS);
- `noop30`: the final checkpoint's greedy and sampled scores (10 episodes,
  one env each, played side by side);
- `policy_lag`: the median of the learner's `perf/policy_lag` (updates
  between acting and training on a step) over the same minutes: where
  the learner binds (a slow CPU, a large torso) it grows, and with it the
  return per agent step can change, so runs are compared at like lags;
- summary: the medians over games of the seed means, games at or above
  CleanRL, and for Atari-5 the 57-game median HNS its regression predicts
  from the five games (`atari5_median`) and what it predicts from
  CleanRL's curves at the same agent steps (`atari5_median_cleanrl`): the
  regression was fit on final scores and reads high early on (0.35 from
  CleanRL's curves at 1M agent steps, where CleanRL's true 57-game median
  is 0.15), so compare the two, not either with a published median.

`plot` draws one panel per game: each configuration's seeds (their mean
and min-max band of the mean return of the last 100 episodes) against
agent steps, and CleanRL's curve up to the runs' last step.

Configurations: `2core` is the pair's gin file alone (what
`./run_local.sh atari vtrace` runs on a small machine); `accelerator` adds
seed_rl/atari/gin/vtrace_accelerator.gin (what the `cluster` profile runs)
and is measured as a learner that keeps up with its actors would train it
(a GPU trains each round as it arrives): one actor of 32 envs (a round),
synchronous. On 2 cores that learner binds, and asynchronously its policy
would lag rounds behind, which no GPU user sees. `cleanrl` adds
seed_rl/atari/gin/vtrace_cleanrl.gin (CleanRL ppo_atari's update, the
accelerator overlay until 2026-12-08: every `accelerator` figure before
that date ran it), measured the same way with CleanRL's 8 envs. `nips` adds
seed_rl/atari/gin/vtrace_nips.gin, the 2-core default until 2026-11-30
(every `2core` figure before that date ran it).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
from typing import Any, Dict, List, Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from compare_reference import compare, read_run  # noqa: E402
from plot_curves import read_curve, reference_to  # noqa: E402
from references import CLEANRL_EMULATOR, EMULATOR_EFFECTS  # noqa: E402
from references import Reference, atari5_median, named  # noqa: E402

SUITES: Dict[str, List[str]] = {
  # Aitchison, Sweetser and Hutter, ICML 2023 (arXiv 2210.02019): never
  # tuned on here.
  "atari5": [
    "battle_zone",
    "double_dunk",
    "name_this_game",
    "phoenix",
    "qbert",
  ],
  # The games every Atari setting was chosen on.
  "dev": ["pong", "space_invaders", "seaquest", "beam_rider"],
  # Beyond Atari-5, games no setting was measured on before they ran
  # here: a check that the defaults hold on games nobody named.
  "heldout": ["breakout"],
}
CONFIGS: Dict[str, List[str]] = {
  "2core": [],
  "accelerator": ["seed_rl/atari/gin/vtrace_accelerator.gin"],
  "cleanrl": ["seed_rl/atari/gin/vtrace_cleanrl.gin"],
  "nips": ["seed_rl/atari/gin/vtrace_nips.gin"],
}
# learn.py flags and gin bindings of each configuration's runs.
RUN_FLAGS: Dict[str, List[str]] = {
  "accelerator": ["--num_actors", "1", "--envs_per_actor", "32"],
  "cleanrl": ["--num_actors", "1", "--envs_per_actor", "8"],
}
RUN_BINDINGS: Dict[str, List[str]] = {
  "accelerator": ["LearnerConfig.synchronous = True"],
  "cleanrl": ["LearnerConfig.synchronous = True"],
}
EVAL_FILE = "eval_noop30.json"


def logdir(root: str, config: str, game: str, seed: int) -> str:
  return os.path.join(root, config, f"{game}-s{seed}")


def run_game(args, game: str) -> None:
  """Trains `game` for --minutes (unless done), then scores it noop30."""
  out = logdir(args.root, args.label or args.config, game, args.seed)
  if not os.path.exists(os.path.join(out, "result.json")):
    cmd = train_command(args, game, out)
    print(f"[suite] {' '.join(cmd)}", file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=sys.stderr)
  if not os.path.exists(os.path.join(out, EVAL_FILE)):
    scores = {m: evaluate(out, m, args.episodes) for m in ("greedy", "sample")}
    with open(os.path.join(out, EVAL_FILE), "w") as f:
      json.dump(scores, f)


def train_command(args, game: str, out: str) -> List[str]:
  """learn.py's command line for `game` under --config, into `out`."""
  cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "learn.py")]
  cmd += ["atari", args.agent, "--max_minutes", f"{args.minutes:g}"]
  cmd += ["--seed", str(args.seed), "--logdir", out]
  if args.agent_steps:
    cmd += ["--max_env_steps", f"{args.agent_steps:.0f}"]
  cmd += RUN_FLAGS.get(args.config, [])
  for path in CONFIGS[args.config]:
    cmd += ["--gin_config", os.path.join(ROOT, path)]
  cmd += [f"atari.create_environment.game = '{game}'"]
  return cmd + RUN_BINDINGS.get(args.config, []) + args.binding


def evaluate(path: str, mode: str, episodes: int) -> dict:
  """seed_rl.evaluate's JSON line for the run's final checkpoint."""
  cmd = [sys.executable, "-m", "seed_rl.evaluate", "--logdir", path]
  cmd += ["--protocol", "noop30", "--episodes", str(episodes), f"--{mode}"]
  # One env per episode, stepped in one batch: a policy that stalls plays
  # every game to the 27,000-step cap, and one env at a time takes 15 min.
  cmd += ["--num_envs", str(episodes)]
  done = subprocess.run(
    cmd, check=True, capture_output=True, text=True, cwd=ROOT
  )
  return json.loads(done.stdout.strip().splitlines()[-1])


def _round(x: Optional[float], digits: int = 3) -> Optional[float]:
  return None if x is None else round(float(x), digits)


def cleanrl_curve(game: str) -> Reference:
  """CleanRL's PPO curve on `game` (references.py)."""
  curve = named(f"cleanrl:{game}")
  assert curve is not None
  return curve


def run_row(
  path: str, game: str, minutes: float, agent_steps: Optional[float] = None
) -> dict:
  """One run after `minutes` of its own clock, or at `agent_steps` when
  given, against CleanRL there (compare_reference's rows, keys named for
  CleanRL)."""
  curve = read_run(path)
  if agent_steps is None:
    at = compare({path: curve}, cleanrl_curve(game), [], minutes, game)
    r = at["at_minutes"]["runs"][0]
  else:
    at = compare({path: curve}, cleanrl_curve(game), [agent_steps], None, game)
    a = at["at_agent_steps"][0]
    r = {
      "minutes": None,
      "reached": a["n"] == 1,
      "agent_steps": int(agent_steps),
      "return_last100": a["mean"],
      "reference": a["reference"],
      "ratio": a["ratio"],
      "hns": a["hns_mean"],
      "hns_reference": a["hns_reference"],
    }
    if r["reached"]:
      minutes_there = np.interp(agent_steps, curve["steps"], curve["minutes"])
      r["minutes"] = round(float(minutes_there), 1)
  hns, hns_ref = r["hns"], r["hns_reference"]
  row: Dict[str, Any] = {
    "run": path,
    "minutes": r["minutes"],
    "reached": r["reached"],
    "agent_steps": r["agent_steps"],
    "return_last100": r["return_last100"],
    "cleanrl": r["reference"],
    "ratio": r["ratio"],
    "hns": hns,
    "hns_cleanrl": hns_ref,
    "hns_ratio": _round(hns / hns_ref)
    if hns is not None and hns_ref and hns_ref > 0
    else None,
    "policy_lag": policy_lag(path, r["agent_steps"]),
  }
  eval_path = os.path.join(path, EVAL_FILE)
  if os.path.exists(eval_path):
    with open(eval_path) as f:
      scores = json.load(f)
    row["noop30"] = {
      mode: {
        "mean_return": _round(s["mean_return"], 1),
        "std_return": _round(s["std_return"], 1),
        "episodes": s["episodes"],
        "hns": _round(s.get("human_normalized_score"), 4),
      }
      for mode, s in scores.items()
    }
  return row


def policy_lag(path: str, agent_steps: Optional[float]) -> Optional[float]:
  """The median `perf/policy_lag` of a run up to `agent_steps` (None when
  it logged none, or no step count is known)."""
  steps, lag, _ = read_curve(path, "perf/policy_lag")
  if agent_steps is None or not steps.size:
    return None
  kept = lag[steps <= agent_steps]
  return _round(np.median(kept), 1) if kept.size else None


def _mean(rows: List[dict], key: str) -> Optional[float]:
  values = [r[key] for r in rows if r.get(key) is not None]
  return _round(np.mean(values)) if values else None


def report(
  root: str,
  config: str,
  suite: str,
  minutes: float,
  agent_steps: Optional[float] = None,
) -> List[dict]:
  """One dict per game with runs, then the summary (the last dict): each
  run read after `minutes`, or at `agent_steps` when given."""
  lines: List[Dict[str, Any]] = []
  hns_by_game: Dict[str, float] = {}
  cleanrl_by_game: Dict[str, float] = {}
  for game in SUITES[suite]:
    rows = []
    for path in _seed_dirs(root, config, game):
      try:
        rows.append(run_row(path, game, minutes, agent_steps))
      except ValueError as e:  # a run that logged nothing yet
        print(f"[suite] {path}: {e}", file=sys.stderr)
    line: Dict[str, Any] = {"game": game, "config": config}
    line.update(seeds=len(rows), runs=rows)
    line["cleanrl_emulator"] = CLEANRL_EMULATOR[game]
    if game in EMULATOR_EFFECTS:
      line["emulator_effect"] = EMULATOR_EFFECTS[game]
    keys = ("agent_steps", "return_last100", "ratio", "hns", "hns_cleanrl")
    for key in keys + ("hns_ratio",):
      line[f"mean_{key}"] = _mean(rows, key)
    if line["mean_hns"] is not None:  # a run read there
      hns_by_game[game] = line["mean_hns"]
      if line["mean_hns_cleanrl"] is not None:
        cleanrl_by_game[game] = line["mean_hns_cleanrl"]
    lines.append(line)
  played = [line for line in lines if line["mean_return_last100"] is not None]

  def median(key):
    values = [line[key] for line in played if line[key] is not None]
    return _round(np.median(values)) if values else None

  summary: Dict[str, Any] = {
    "summary": suite,
    "config": config,
    "minutes": None if agent_steps else minutes,
    "agent_steps": agent_steps,
    "games": len(played),
    "of": len(SUITES[suite]),
    "median_ratio": median("mean_ratio"),
    "median_hns_ratio": median("mean_hns_ratio"),
    "at_or_above_cleanrl": sum(
      (line["mean_hns_ratio"] or 0) >= 1 for line in played
    ),
    "median_hns": median("mean_hns"),
    # Games where the same agent learned differently on CleanRL's emulator:
    # their ratio measures the emulators as much as the agent.
    "emulator_effects": [g for g in SUITES[suite] if g in EMULATOR_EFFECTS],
  }
  if suite == "atari5" and len(hns_by_game) == len(SUITES[suite]):
    summary["atari5_median"] = _round(atari5_median(hns_by_game), 4)
    if len(cleanrl_by_game) == len(SUITES[suite]):
      # CleanRL's curves through the same regression at the same steps:
      # the like-for-like figure (early on the regression reads high).
      summary["atari5_median_cleanrl"] = _round(
        atari5_median(cleanrl_by_game), 4
      )
  return lines + [summary]


def plot(root: str, configs: List[str], suite: str, out: str) -> None:
  """One panel per game of the suite: every configuration, and CleanRL."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  games = SUITES[suite]
  fig, axes = plt.subplots(
    1, len(games), figsize=(4.2 * len(games), 3.6), dpi=110, squeeze=False
  )
  for game, ax in zip(games, axes[0]):
    last = 0.0
    for config in configs:
      runs = [read_run(p) for p in _seed_dirs(root, config, game)]
      if not runs:
        continue
      last = max([last] + [float(r["steps"][-1]) for r in runs])
      grid = np.linspace(0, min(r["steps"][-1] for r in runs), 200)
      ys = np.array([np.interp(grid, r["steps"], r["value"]) for r in runs])
      line = ax.plot(
        grid, ys.mean(axis=0), lw=2, label=f"{config} (seeds: {len(runs)})"
      )
      ax.fill_between(
        grid,
        ys.min(axis=0),
        ys.max(axis=0),
        color=line[0].get_color(),
        alpha=0.2,
      )
    curve = cleanrl_curve(game)
    xs, ys = reference_to(last or 10e6, curve.xs, curve.ys)
    ax.plot(xs, ys, "o--", lw=1, ms=4, color="gray", label="CleanRL PPO")
    ax.set_title(game)
    ax.set_xlabel("agent steps")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=7)
  axes[0][0].set_ylabel("mean return of the last 100 episodes")
  fig.tight_layout()
  fig.savefig(out)
  print(out)


def _seed_dirs(root: str, config: str, game: str) -> List[str]:
  pattern = os.path.join(root, config, f"{game}-s*")
  return sorted(p for p in glob.glob(pattern) if re.search(r"-s\d+$", p))


def main(argv=None) -> int:
  p = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawTextHelpFormatter
  )
  p.add_argument("command", choices=("run", "report", "plot"))
  p.add_argument("--suite", choices=tuple(SUITES), default="atari5")
  p.add_argument(
    "--config",
    default="2core",
    help=f"one of {', '.join(CONFIGS)} (plot: several, comma-separated)",
  )
  p.add_argument("--out", default=None, help="plot: the PNG to write")
  p.add_argument("--root", required=True, help="ROOT/<config>/<game>-s<seed>")
  p.add_argument("--minutes", type=float, default=60.0)
  p.add_argument(
    "--agent_steps",
    type=float,
    default=None,
    help="run: stop each game at this many agent steps (or --minutes);\n"
    "report: read each run there instead of after --minutes",
  )
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--agent", default="vtrace")
  p.add_argument("--episodes", type=int, default=10, help="noop30 episodes")
  p.add_argument(
    "--games", default=None, help="comma-separated subset of the suite (run)"
  )
  p.add_argument(
    "--binding",
    action="append",
    default=[],
    help="run: a gin binding on top of --config (repeatable); give --label",
  )
  p.add_argument(
    "--label",
    default=None,
    help="the folder under --root instead of the config's name (run, report)",
  )
  args = p.parse_args(argv)
  configs = args.config.split(",")
  # plot also takes the --label folders of earlier runs.
  known = set(CONFIGS) | (
    set(os.listdir(args.root)) if args.command == "plot" else set()
  )
  unknown = sorted(set(configs) - known)
  if unknown or (len(configs) > 1 and args.command != "plot"):
    p.error(
      f"--config {args.config!r}: one of {', '.join(CONFIGS)} (plot: several,"
      " or --label folders under --root)"
    )
  if args.agent_steps is not None and args.agent_steps <= 0:
    p.error(f"--agent_steps {args.agent_steps:g}: a positive step count")
  if args.binding and not args.label:
    p.error("--binding needs --label: runs with other settings go elsewhere")
  if args.command == "plot":
    if not args.out:
      p.error("plot needs --out FILE.png")
    plot(args.root, configs, args.suite, args.out)
    return 0
  if args.command == "run":
    games = args.games.split(",") if args.games else SUITES[args.suite]
    unknown = sorted(set(games) - set(SUITES[args.suite]))
    if unknown:
      p.error(f"--games {unknown}: not in {args.suite}: {SUITES[args.suite]}")
    for game in games:
      run_game(args, game)
  label = args.label or args.config
  lines = report(args.root, label, args.suite, args.minutes, args.agent_steps)
  for line in lines:
    print(json.dumps(line))
  return 0


if __name__ == "__main__":
  sys.exit(main())
