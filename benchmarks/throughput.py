"""System throughput: env steps/s with training on vs. the same actors alone.

    python benchmarks/throughput.py [--seconds 60] [--only SETUP ...]

Setups: cartpole (V-trace), pong (V-trace with the paper's 32 x 20 batch,
3 x 48 envs: the throughput figure), pong_default (what `./run_local.sh
atari vtrace` trains with, 2 x 16), pong_r2d2 (R2D2):
pong and pong_r2d2 side by side show what replay-based training costs.

For each setup it runs, one after the other on this machine:
  1. random: the same number of actor processes with the same batched envs,
     stepping with uniformly random actions, no learner, no gRPC;
  2. system: `python -m seed_rl.train` (learner with training on + actors).
It prints one JSON line per setup with both rates, their ratio, and where
the cores' time went: per actor, stepping envs vs waiting for the learner
(which includes gRPC); in the learner, CPU cores used by the inference thread
(of which `act`, the batched forward pass), the training thread and the rest
of the process (gRPC threads, TensorFlow's thread pools). Rates are measured
over the second half of each run, so start-up and tf.function tracing are
excluded.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SETUPS: Dict[str, Dict[str, Any]] = {
  "cartpole": {"env": "classic", "agent": "vtrace", "actors": 2, "k": 16},
  # Throughput-oriented Pong: the paper's batch of 32 unrolls of 20 (fewer,
  # larger updates than the learning default of atari/gin/vtrace.gin), on
  # the Atari default until 2026-11-30 (its overlay), as every figure of
  # this setup in RESULTS.md.
  "pong": {
    "env": "atari",
    "agent": "vtrace",
    "actors": 3,
    "k": 48,
    "gin_config": ("seed_rl/atari/gin/vtrace_nips.gin",),
    "bindings": (
      "VtraceConfig.unroll_length = 20",
      "VtraceConfig.batch_size = 32",
      "LearnerConfig.inference_batch_size = 32",
      # The Nature CNN, as every earlier figure of this setup in RESULTS.md
      # (the learning default switched to the smaller 'nips' torso).
      "atari_torso.kind = 'nature'",
      # IMPALA's update, one pass per batch, as every earlier figure of
      # this setup (the learning default since 2026-11-26 reuses each
      # round for 2 epochs under PPO's clipped surrogate).
      "VtraceConfig.policy_loss = 'pg'",
      "VtraceConfig.normalize_advantages = False",
      "VtraceConfig.num_epochs = 1",
      "VtraceConfig.num_minibatches = 1",
      "VtraceConfig.optimizer = 'rmsprop'",
      "VtraceConfig.learning_rate = 7e-4",
    ),
  },
  # What ./run_local.sh atari vtrace trains with (since 2026-11-30: the
  # Nature CNN, 32 x 32 rounds, 2 epochs of 4 minibatches of single steps;
  # 2026-11-26 to 2026-11-30: atari/gin/vtrace_nips.gin; earlier: 16 x 5).
  "pong_default": {"env": "atari", "agent": "vtrace", "actors": 2, "k": 16},
  "pong_r2d2": {"env": "atari", "agent": "r2d2", "actors": 2, "k": 16},
}


def _random_actor(
  env: str,
  agent: str,
  gin_config: Tuple[str, ...],
  k: int,
  seed: int,
  seconds: float,
  queue,
) -> None:
  import gin
  import numpy as np
  from seed_rl import profiles, registry

  module = registry.env_module(env)
  # As the actors of a run on this machine parse it (machine profile first).
  gin.parse_config_files_and_bindings(
    profiles.gin_files(profiles.AUTO, env)
    + [registry.gin_file(env, agent)]
    + [os.path.join(ROOT, f) for f in gin_config],
    [],
    skip_unknown=True,
  )
  batched = module.create_environment(num_envs=k, seed=seed)
  spec = batched.action_spec
  rng = np.random.default_rng(seed)
  batched.reset()

  def actions():
    if spec.is_discrete:
      return rng.integers(0, spec.num_values, size=k).astype(spec.dtype)
    return rng.uniform(
      spec.minimum, spec.maximum, size=(k,) + spec.shape
    ).astype(spec.dtype)

  for _ in range(20):  # warm-up
    batched.step(actions())
  steps, start = 0, time.monotonic()
  while time.monotonic() - start < seconds:
    batched.step(actions())
    steps += k
  elapsed = time.monotonic() - start
  batched.close()
  queue.put((steps, elapsed, time.process_time()))


def random_policy_rate(setup, seconds: float) -> float:
  ctx = mp.get_context("forkserver")
  queue = ctx.Queue()
  procs = [
    ctx.Process(
      target=_random_actor,
      args=(
        setup["env"],
        setup["agent"],
        tuple(setup.get("gin_config", ())),
        setup["k"],
        i,
        seconds,
        queue,
      ),
    )
    for i in range(setup["actors"])
  ]
  for p in procs:
    p.start()
  results = [queue.get(timeout=seconds + 120) for _ in procs]
  for p in procs:
    p.join()
  return sum(s / e for s, e, _ in results)


def system_rate(setup, seconds: float, bindings=()):
  logdir = tempfile.mkdtemp(prefix="throughput-")
  stats_dir = os.path.join(logdir, "actors")
  cmd = [
    sys.executable,
    "-m",
    "seed_rl.train",
    setup["env"],
    setup["agent"],
    str(setup["actors"]),
    str(setup["k"]),
    "--logdir",
    logdir,
    "--max_seconds",
    str(seconds),
    "--actor_stats_dir",
    stats_dir,
    # The learner's CPU seconds per thread role and steady-state rates
    # (result.json's 'cpu_s' and 'steady_state').
    "--profile",
    "--gin_bindings",
    "LearnerConfig.stop_at_target = False",
  ]
  for path in setup.get("gin_config", ()):
    cmd += ["--gin_config", os.path.join(ROOT, path)]
  for b in bindings:
    cmd += ["--gin_bindings", b]
  proc = subprocess.Popen(
    cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
  )
  # Each actor rewrites its stats file every 5 s; keep every version so the
  # actors' figures can be taken over the learner's steady-state window.
  history: Dict[str, List[dict]] = {}
  while proc.poll() is None:
    time.sleep(1.0)
    for name in os.listdir(stats_dir) if os.path.isdir(stats_dir) else ():
      if name.endswith(".json"):
        try:
          with open(os.path.join(stats_dir, name)) as f:
            stats = json.load(f)
        except (OSError, ValueError):
          continue
        versions = history.setdefault(name, [])
        if not versions or versions[-1]["seconds"] != stats["seconds"]:
          versions.append(stats)
  if proc.returncode:
    raise subprocess.CalledProcessError(proc.returncode, cmd)
  with open(os.path.join(logdir, "result.json")) as f:
    result = json.load(f)
  window = result.get("steady_state", {}).get("window_s") or 0.0
  return result, [_window_delta(v, window) for _, v in sorted(history.items())]


def _window_delta(versions, window_s: float):
  """An actor's stats over (about) its last `window_s` seconds."""
  last = versions[-1]
  first = min(
    versions, key=lambda v: abs(last["seconds"] - v["seconds"] - window_s)
  )
  if first is last:  # a single snapshot: fall back to the whole run
    return last
  return {k: last[k] - first[k] for k in last}


def _parse_args(argv) -> argparse.Namespace:
  p = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawTextHelpFormatter
  )
  p.add_argument(
    "--seconds",
    type=float,
    default=60.0,
    help="length of each system run (random runs: a third)",
  )
  p.add_argument(
    "--only",
    choices=sorted(SETUPS),
    action="append",
    default=None,
    help="run only these setups (repeatable)",
  )
  p.add_argument("--actors", type=int, default=None)
  p.add_argument("--envs_per_actor", type=int, default=None)
  p.add_argument(
    "--gin_bindings",
    action="append",
    default=[],
    help="extra learner bindings for the system runs",
  )
  p.add_argument(
    "--skip_random",
    action="store_true",
    help="skip the random-policy runs (ratio omitted)",
  )
  return p.parse_args(argv)


def main(argv=None) -> int:
  args = _parse_args(argv)
  for name, setup in SETUPS.items():
    if args.only and name not in args.only:
      continue
    setup = dict(setup)
    setup["actors"] = args.actors or setup["actors"]
    setup["k"] = args.envs_per_actor or setup["k"]
    random_rate = (
      float("nan")
      if args.skip_random
      else random_policy_rate(setup, max(10.0, args.seconds / 3))
    )
    result, actors = system_rate(
      setup,
      args.seconds,
      tuple(setup.get("bindings", ())) + tuple(args.gin_bindings),
    )
    steady = result.get("steady_state", {})
    system = steady.get("env_steps_per_s", 0.0)
    out = {
      "setup": name,
      "env": setup["env"],
      "agent": setup["agent"],
      "actors": setup["actors"],
      "envs_per_actor": setup["k"],
      "cpus": os.cpu_count(),
      "random_policy_env_steps_per_s": round(random_rate, 1),
      "system_env_steps_per_s": system,
      "ratio_system_to_random": round(system / max(random_rate, 1e-9), 3),
      "learner_steps_per_s": steady.get("learner_steps_per_s"),
      "learner_cores": _learner_cores(steady),
      **_actor_figures(actors),
      "window_s": steady.get("window_s"),
      "gin_bindings": args.gin_bindings,
    }
    print(json.dumps(out), flush=True)
  return 0


def _learner_cores(steady):
  """CPU cores per learner thread role over the steady-state window."""
  return {
    "process": steady.get("cores/process"),
    "inference_thread": steady.get("cores/inference"),
    "of_which_act": steady.get("cores/act"),
    "training_thread": steady.get("cores/training"),
    "grpc_and_tf_pools": (
      round(
        steady["cores/process"]
        - steady["cores/inference"]
        - steady["cores/training"],
        3,
      )
      if "cores/process" in steady
      else None
    ),
  }


def _actor_figures(actors):
  """Where the actors' time went and the cores they used (their stats over
  about the learner's window)."""
  busy = max(sum(a["env_s"] + a["learner_wait_s"] for a in actors), 1e-9)
  return {
    "actor_time_share": {
      "env": round(sum(a["env_s"] for a in actors) / busy, 3),
      "waiting_for_learner_incl_grpc": round(
        sum(a["learner_wait_s"] for a in actors) / busy, 3
      ),
    },
    # CPU seconds per wall second of all actor processes.
    "actor_cores": round(
      sum(a["cpu_s"] / max(a["seconds"], 1e-9) for a in actors), 3
    ),
  }


if __name__ == "__main__":
  sys.exit(main())
