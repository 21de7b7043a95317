r"""CPU cost of the learner's two compiled functions, in isolation.

  .venv/bin/python benchmarks/learner_step.py atari vtrace [--seconds 5] \
      [--act_batch 32] [gin bindings ...]

Builds the agent exactly as the learner does (the pair's gin file, then the
bindings given), feeds it random unrolls and observations, and prints one
JSON line: training frames per wall second and per CPU second (frames =
(T+1) x batch per step, the forward pass's size), and inference observations
per wall / CPU second at `--act_batch`. CPU seconds are the process's, so
they include TensorFlow's thread pools. No gRPC, no environments.
Example, float32 vs bfloat16 torso in one go:

  for d in float32 bfloat16; do .venv/bin/python benchmarks/learner_step.py \
      atari vtrace "atari_torso.compute_dtype = '$d'"; done
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np


def _random(spec, shape, rng):
  if np.issubdtype(spec.dtype, np.integer) and spec.is_discrete:
    return rng.integers(0, spec.num_values, shape).astype(spec.dtype)
  if np.issubdtype(spec.dtype, np.integer):
    return rng.integers(0, 256, shape).astype(spec.dtype)
  return rng.standard_normal(shape).astype(spec.dtype)


def _timed(fn, seconds: float):
  """Calls fn until `seconds` pass; returns (calls, wall s, process CPU s)."""
  fn()
  fn()  # tracing and warm-up
  calls, wall, cpu = 0, time.perf_counter(), time.process_time()
  while time.perf_counter() - wall < seconds:
    fn()
    calls += 1
  return calls, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("env")
  parser.add_argument("agent")
  parser.add_argument("bindings", nargs="*", help="extra gin bindings")
  parser.add_argument("--seconds", type=float, default=5.0)
  parser.add_argument("--act_batch", type=int, default=32)
  args = parser.parse_args()

  from seed_rl import gin_utils, profiles, registry
  from seed_rl.common import learner as learner_lib
  from seed_rl.common.agent_api import ActInputs, Unroll
  from seed_rl.common.env_state import stacked_observation_spec

  registry.check_pair(args.env, args.agent)
  env_module = registry.env_module(args.env)
  agent_module = registry.agent_module(args.agent)
  for name in registry.learner_gin_modules(args.env):
    importlib.import_module(name)
  # As the learner of a run on this machine parses it (profile first).
  gin_utils.parse(
    profiles.gin_files(profiles.AUTO, args.env)
    + [registry.gin_file(args.env, args.agent)],
    args.bindings,
  )
  config = learner_lib.LearnerConfig()
  learner_lib.configure_tf_threads(config)
  probe = env_module.create_environment(num_envs=1, seed=0)
  obs_spec = stacked_observation_spec(
    probe.observation_spec, config.frame_stack
  )
  act_spec = probe.action_spec
  probe.close()
  agent = agent_module.create_agent(obs_spec, act_spec, 64)
  rng = np.random.default_rng(0)

  # One batch of random unrolls, re-queued before every step.
  b = int(getattr(agent.config, "batch_size", 8))
  t1 = agent.unroll_length + 1
  num_params = act_spec.num_values if act_spec.is_discrete else 2
  core = agent.initial_core_state(b)
  # Unrolls as the runtime hands them: frames for an agent that trains on
  # them (frame stacking), else stacks.
  k = obs_spec.frame_stack if agent.trains_on_frames else 1
  unroll = Unroll(
    env_ids=np.arange(b, dtype=np.int32),
    observation=_random(
      obs_spec, (b, k - 1 + t1) + obs_spec.shape[: -1 if k > 1 else None], rng
    ),
    frame_stack=k,
    reward=rng.standard_normal((b, t1)).astype(np.float32),
    terminated=np.zeros((b, t1), bool),
    truncated=np.zeros((b, t1), bool),
    bootstrap_value=np.zeros((b, t1), np.float32),
    prev_action=_random(act_spec, (b, t1) + act_spec.shape, rng),
    action=_random(act_spec, (b, t1) + act_spec.shape, rng),
    value=np.zeros((b, t1), np.float32),
    # What the built-in agents' act() stores (each agent checks only its own).
    extras={
      "logits": np.zeros((b, t1, num_params), np.float32),
      "q_action": np.zeros((b, t1), np.float32),
    },
    core_state=core,
    policy_version=np.zeros((b, t1), np.int64),
  )

  def train():
    agent.add_unrolls(unroll)
    agent.train_step()

  n = args.act_batch
  act_inputs = ActInputs(
    env_ids=np.arange(n, dtype=np.int32),
    observation=_random(obs_spec, (n,) + obs_spec.shape, rng),
    prev_action=_random(act_spec, (n,) + act_spec.shape, rng),
    reward=np.zeros(n, np.float32),
    done=np.zeros(n, bool),
    core_state=agent.initial_core_state(n),
    eval_mask=np.zeros(n, bool),
  )

  calls, wall, cpu = _timed(train, args.seconds)
  frames = calls * t1 * b
  calls_a, wall_a, cpu_a = _timed(lambda: agent.act(act_inputs), args.seconds)
  agent.stop()
  print(
    json.dumps(
      {
        "benchmark": "learner_step",
        "env": args.env,
        "agent": args.agent,
        "bindings": args.bindings,
        "train_batch": f"{t1} x {b}",
        "train_steps_per_s": round(calls / wall, 2),
        "train_frames_per_s": round(frames / wall),
        "train_frames_per_cpu_s": round(frames / cpu),
        "act_batch": n,
        "act_obs_per_s": round(calls_a * n / wall_a),
        "act_obs_per_cpu_s": round(calls_a * n / cpu_a),
      }
    )
  )


if __name__ == "__main__":
  main()
