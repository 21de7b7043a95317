r"""Env steps/s of the actor-side batched envs with random actions.

  .venv/bin/python benchmarks/env_throughput.py --seconds 3

Prints one JSON line: env steps per second (K envs x batched steps / time)
for CartPole inline vs subprocess (K=16, 32) and Pong on ALE's vector env
(K=4, 8, 16; ALE num_threads 1, 2 and K). Random actions are drawn ahead of
time so only env stepping is timed. No learner, no gRPC.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

from seed_rl.actors.batched_env import BatchedEnv
from seed_rl.atari import env as atari_env
from seed_rl.classic import env as classic_env


def _random_actions(
  env: BatchedEnv, count: int, rng: np.random.Generator
) -> np.ndarray:
  spec = env.action_spec
  shape = (count, env.num_envs) + spec.shape
  if spec.is_discrete:
    return rng.integers(0, spec.num_values, shape).astype(spec.dtype)
  if spec.minimum is None or spec.maximum is None:
    raise ValueError(f"{spec.name}: random actions need a bounded spec")
  return rng.uniform(spec.minimum, spec.maximum, shape).astype(spec.dtype)


def measure(env: BatchedEnv, seconds: float, seed: int = 0) -> float:
  """Env steps/s over about `seconds` of stepping (after a short warm-up)."""
  rng = np.random.default_rng(seed)
  env.reset()
  actions = _random_actions(env, 256, rng)
  for a in actions[:16]:
    env.step(a)
  steps = 0
  start = time.perf_counter()
  deadline = start + seconds
  while time.perf_counter() < deadline:
    for a in actions:
      env.step(a)
    steps += len(actions)
  return steps * env.num_envs / (time.perf_counter() - start)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    "--seconds",
    type=float,
    default=3.0,
    help="timed stepping per configuration",
  )
  args = parser.parse_args()
  result = {
    "benchmark": "env_throughput",
    "unit": "env_steps_per_s",
    "seconds": args.seconds,
    "cpus": os.cpu_count(),
    "python": platform.python_version(),
  }
  for num_envs in (16, 32):
    for parallel in ("inline", "subprocess"):
      with classic_env.create_environment(
        num_envs, 0, env_id="CartPole-v1", parallel=parallel
      ) as env:
        result[f"cartpole_{parallel}_k{num_envs}"] = round(
          measure(env, args.seconds)
        )
  for num_envs in (4, 8, 16):
    for threads in sorted({1, 2, num_envs}):
      with atari_env.create_environment(
        num_envs, 0, game="pong", num_threads=threads
      ) as env:
        result[f"pong_k{num_envs}_threads{threads}"] = round(
          measure(env, args.seconds)
        )
  print(json.dumps(result))


if __name__ == "__main__":
  main()
