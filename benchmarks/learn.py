"""Learning benchmark: one training run through the real launcher.

    python benchmarks/learn.py ENV AGENT [--target R] [--max_minutes M]
        [--seed S | --seeds 0,1,2] [--num_actors N] [--envs_per_actor K]
        [--gin_config FILE ...] [gin bindings...]

Starts `python -m seed_rl.train` (learner + actor processes) in a fresh
logdir, stops at the target (mean return of the last 100 episodes) or the
time limit, and prints one JSON line: env, agent, seed, solved, wall_s (from
launch until solved, else until the end), env_steps, final_return.
With --seeds, the seeds run one after another (one line each), then a
summary line: how many solved, median/min/max of wall_s and final_return.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from seed_rl.train import DEFAULTS, die_with_parent

DEFAULT_TARGETS = {
  ("classic", "vtrace"): 475.0,
  ("classic", "ppo"): 475.0,
  ("classic", "dqn"): 475.0,
  ("classic", "r2d2"): 475.0,
  ("classic", "a2c"): 475.0,
  ("classic", "acer"): 475.0,
  # Pendulum-v1 (the classic domain's sac/td3/ddpg gin files): the usual
  # 'solved' threshold, a mean return of -200.
  ("classic", "sac"): -200.0,
  ("classic", "td3"): -200.0,
  ("classic", "ddpg"): -200.0,
}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawTextHelpFormatter
  )
  p.add_argument("env")
  p.add_argument("agent")
  p.add_argument(
    "bindings",
    nargs="*",
    help="gin bindings, e.g. 'VtraceConfig.learning_rate = 1e-3'",
  )
  p.add_argument("--target", type=float, default=None)
  p.add_argument("--max_minutes", type=float, default=10.0)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument(
    "--seeds",
    default=None,
    help="comma-separated seeds run one after another (e.g. 0,1,2): one "
    "JSON line each, then a summary line",
  )
  p.add_argument(
    "--gin_config",
    action="append",
    default=[],
    help="extra gin file parsed after the pair's own (repeatable), e.g. "
    "seed_rl/atari/gin/vtrace_a2c.gin",
  )
  p.add_argument("--num_actors", type=int, default=None)
  p.add_argument("--envs_per_actor", type=int, default=None)
  p.add_argument("--max_env_steps", type=int, default=None)
  p.add_argument(
    "--logdir",
    default=None,
    help="default: a fresh temp dir; with --seeds, run i writes to "
    "LOGDIR-<seed i>",
  )
  p.add_argument(
    "--quiet", action="store_true", help="hide the training's own output"
  )
  # Bindings may come after the flags (as in the README's examples).
  args = p.parse_intermixed_args(argv)
  if args.seeds:
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    prefix, results = args.logdir, []
    for seed in seeds:
      args.logdir = f"{prefix}-{seed}" if prefix else None
      results.append(_run(args, seed))
    print(json.dumps(_summary(results)), flush=True)
    return 0 if all(r["exit_code"] == 0 for r in results) else 1
  return 0 if _run(args, args.seed)["exit_code"] == 0 else 1


def _summary(results):
  walls = sorted(r["wall_s"] for r in results)
  finals = sorted(
    r["final_return"] for r in results if r["final_return"] is not None
  )
  pick = lambda xs: (
    {"median": xs[len(xs) // 2], "min": xs[0], "max": xs[-1]} if xs else None
  )
  return {
    "summary": True,
    "env": results[0]["env"],
    "agent": results[0]["agent"],
    "seeds": [r["seed"] for r in results],
    "solved": sum(r["solved"] for r in results),
    "wall_s": pick(walls),
    "final_return": pick(finals),
  }


def _run(args, seed: int) -> dict:
  args.seed = seed
  target = args.target
  if target is None:
    target = DEFAULT_TARGETS.get((args.env, args.agent))
  logdir = args.logdir or tempfile.mkdtemp(
    prefix=f"learn-{args.env}-{args.agent}-{args.seed}-"
  )
  cmd = [sys.executable, "-m", "seed_rl.train", args.env, args.agent]
  if args.num_actors is not None or args.envs_per_actor is not None:
    cmd += [
      str(args.num_actors or DEFAULTS["num_actors"]),
      str(args.envs_per_actor or DEFAULTS["envs_per_actor"]),
    ]
  cmd += [
    "--seed",
    str(args.seed),
    "--logdir",
    logdir,
    "--max_seconds",
    str(args.max_minutes * 60),
  ]
  if target is not None:
    cmd += ["--target_return", str(target)]
  if args.max_env_steps:
    cmd += ["--max_env_steps", str(args.max_env_steps)]
  for f in args.gin_config:
    cmd += ["--gin_config", f]
  for b in args.bindings:
    cmd += ["--gin_bindings", b]
  start = time.monotonic()
  solved_wall = None
  # The launcher dies with this script, and its processes with it.
  proc = subprocess.Popen(
    cmd,
    cwd=ROOT,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
    preexec_fn=die_with_parent,
  )
  assert proc.stdout is not None  # stdout=PIPE
  for line in proc.stdout:
    if line.startswith("SOLVED") and solved_wall is None:
      solved_wall = time.monotonic() - start
    if not args.quiet:
      sys.stderr.write(line)
  code = proc.wait()
  wall = time.monotonic() - start
  result = {}
  path = os.path.join(logdir, "result.json")
  if os.path.exists(path):
    with open(path) as f:
      result = json.load(f)
  out = {
    "env": args.env,
    "agent": args.agent,
    "seed": args.seed,
    "target": target,
    "solved": bool(result.get("solved")),
    "wall_s": round(solved_wall if solved_wall is not None else wall, 1),
    "env_steps": result.get("env_steps"),
    "final_return": result.get("final_return"),
    "learner_steps": result.get("learner_steps"),
    "exit_code": code,
    "logdir": logdir,
    "bindings": args.bindings,
    **({"gin_config": args.gin_config} if args.gin_config else {}),
  }
  print(json.dumps(out), flush=True)
  return out


if __name__ == "__main__":
  sys.exit(main())
