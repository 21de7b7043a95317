r"""Fingerprints of seeded agent setups: a refactor meant to leave what the
agents compute alone must leave every hash unchanged.

  .venv/bin/python benchmarks/agent_fingerprint.py [--only SETUP ...]

Compare two trees by running the same script in each (copy it into the
older one) and diffing the lines:

  git worktree add /tmp/before HEAD && cp benchmarks/agent_fingerprint.py \
      /tmp/before/benchmarks/
  (cd /tmp/before && python benchmarks/agent_fingerprint.py) > before.json
  python benchmarks/agent_fingerprint.py > after.json

Each setup (SETUPS: an env/agent pair with its gin file, small sizes and a
few bindings) runs in a fresh process with Python's `random` and NumPy
seeded (Keras draws initialiser seeds from Python's `random`) and
PYTHONHASHSEED fixed. The agent is built by the learner's own code path,
seed_rl.learner_main's `_build` (the pair's gin file then the bindings,
LearnerConfig and TensorFlow's threads, tf.random.set_seed, the env's
probed specs, create_agent under the configured devices). It then acts on a
seeded sequence of act inputs: training rows whose steps, with the agent's
own outputs, make the unrolls given to add_unrolls (consecutive unrolls
overlap by unroll_overlap steps, episode ends drawn at random), train_step
runs a few times after each unroll, and evaluation rows act after each
round. Last, the learner's Checkpointer writes a checkpoint.

Prints one JSON line: setup -> SHA-256 over four parts, each also given:
`acts` (actions, values, extras and core states of every act call),
`metrics` (every train_step's metrics, those in seconds excluded: they are
wall-clock), `checkpoint_keys` (the checkpoint's variable names) and
`weights` (every checkpoint value: weights, optimizer slots, counters,
random generator states). A setup that fails or hangs shows under `errors`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

SEED = 0
# Training envs of the learner (one actor), hence rows per act call and
# unrolls per add_unrolls call; queue agents train on batches of this size.
ROWS = 4
ROUNDS = 3
TIMEOUT_S = 900
_LINE_PREFIX = "FINGERPRINT "

_COMMON = (
  "LearnerConfig.tf_intra_op_threads = 1",
  "LearnerConfig.tf_inter_op_threads = 1",
  "mlp_torso.hidden_sizes = (16, 16)",
)
_VTRACE = ("VtraceConfig.batch_size = 4", "VtraceConfig.unroll_length = 5")
_PPO = (
  "PPOConfig.batch_size = 4",
  "PPOConfig.unroll_length = 8",
  "PPOConfig.num_epochs = 2",
  "PPOConfig.num_minibatches = 2",
  "PPOConfig.seed = 0",
)
_A2C = (
  "A2CConfig.batch_size = 4",
  "A2CConfig.unroll_length = 5",
  "A2CConfig.seed = 0",
)
_ACER = (
  "ACERConfig.batch_size = 4",
  "ACERConfig.unroll_length = 5",
  "ACERConfig.replay_capacity = 32",
  "ACERConfig.min_replay_size = 4",
  "ACERConfig.replay_ratio = 1.0",
  "ACERConfig.replay_draw = 'fixed'",
  "ACERConfig.seed = 0",
)
_DQN = (
  "DQNConfig.batch_size = 16",
  "DQNConfig.unroll_length = 8",
  "DQNConfig.replay_capacity = 1000",
  "DQNConfig.min_replay_size = 16",
  "DQNConfig.samples_per_insert = 1e4",
  "DQNConfig.rate_limiter_error_buffer = 1e9",
  "DQNConfig.target_update_period = 2",
  "DQNConfig.epsilon_decay_steps = 4",
  "DQNConfig.seed = 0",
)
_R2D2 = (
  "R2D2Config.batch_size = 4",
  "R2D2Config.unroll_length = 10",
  "R2D2Config.burn_in = 2",
  "R2D2Config.lstm_units = 8",
  "R2D2Config.head_hidden = (8,)",
  "R2D2Config.replay_capacity = 64",
  "R2D2Config.min_replay_size = 4",
  "R2D2Config.samples_per_insert = 1e4",
  "R2D2Config.rate_limiter_error_buffer = 1e9",
  "R2D2Config.target_update_period = 2",
  "R2D2Config.seed = 0",
)


def _off_policy(config: str) -> Tuple[str, ...]:
  return tuple(
    f"{config}.{binding}"
    for binding in (
      "batch_size = 16",
      "unroll_length = 4",
      "replay_capacity = 1000",
      "min_replay_size = 16",
      "random_steps = 16",
      "samples_per_insert = 1e4",
      "rate_limiter_error_buffer = 1e9",
      "seed = 0",
    )
  )


# name -> (env, agent, gin bindings after the pair's gin file, train_step
# calls after each add_unrolls). Queue agents train once per batch of
# ROWS unrolls (ACER then once more from replay); replay agents sample.
SETUPS: Dict[str, Tuple[str, str, Tuple[str, ...], int]] = {
  "classic-vtrace": ("classic", "vtrace", _VTRACE, 1),
  "classic-vtrace-lstm-soft_asymmetric": (
    "classic",
    "vtrace",
    _VTRACE
    + (
      "VtraceConfig.use_lstm = True",
      "VtraceConfig.lstm_units = 8",
      "VtraceConfig.reward_clipping = 'soft_asymmetric'",
    ),
    1,
  ),
  "classic-ppo": ("classic", "ppo", _PPO, 1),
  "classic-ppo-abs_one-normalized": (
    "classic",
    "ppo",
    _PPO
    + (
      "PPOConfig.reward_clipping = 'abs_one'",
      "PPOConfig.normalize_observations = True",
      "PPOConfig.scale_rewards = True",
    ),
    1,
  ),
  "classic-a2c": ("classic", "a2c", _A2C, 1),
  "classic-a2c-abs_one": (
    "classic",
    "a2c",
    _A2C + ("A2CConfig.reward_clipping = 'abs_one'",),
    1,
  ),
  "classic-acer": ("classic", "acer", _ACER, 2),
  "classic-acer-abs_one": (
    "classic",
    "acer",
    _ACER + ("ACERConfig.reward_clipping = 'abs_one'",),
    2,
  ),
  "classic-dqn": ("classic", "dqn", _DQN, 2),
  "classic-dqn-abs_one": (
    "classic",
    "dqn",
    _DQN + ("DQNConfig.reward_clipping = 'abs_one'",),
    2,
  ),
  "classic-r2d2": ("classic", "r2d2", _R2D2, 2),
  "classic-sac": ("classic", "sac", _off_policy("SACConfig"), 2),
  "classic-td3": ("classic", "td3", _off_policy("TD3Config"), 2),
  "classic-ddpg": ("classic", "ddpg", _off_policy("TD3Config"), 2),
}


# ---------------------------------------------------------------- worker


class _Hash:
  """SHA-256 over tagged arrays and values, exact to the bit."""

  def __init__(self):
    self._h = hashlib.sha256()

  def text(self, value: str) -> None:
    self._h.update(value.encode() + b"\0")

  def array(self, tag: str, value: Any) -> None:
    array = np.asarray(value)
    self.text(f"{tag}:{array.dtype.str}:{array.shape}")
    if array.dtype == object:
      self.text(repr(array.tolist()))
    else:
      self._h.update(np.ascontiguousarray(array).tobytes())

  def hexdigest(self) -> str:
    return self._h.hexdigest()


def _random(spec, shape, rng) -> np.ndarray:
  if np.issubdtype(spec.dtype, np.integer) and spec.is_discrete:
    return rng.integers(0, spec.num_values, shape).astype(spec.dtype)
  if np.issubdtype(spec.dtype, np.integer):
    return rng.integers(0, 256, shape).astype(spec.dtype)
  return rng.standard_normal(shape).astype(spec.dtype)


def _hash_outputs(h: _Hash, tag: str, out) -> None:
  h.array(f"{tag}/action", out.action)
  h.array(f"{tag}/value", out.value)
  for name in sorted(out.extras):
    h.array(f"{tag}/extras/{name}", out.extras[name])
  for i, state in enumerate(out.core_state):
    h.array(f"{tag}/core_state/{i}", state)


class _Rollout:
  """Seeded act inputs for ROWS training envs, and the unrolls their steps
  make (Unroll layout: step t's reward and episode-end flags describe the
  transition into step t)."""

  def __init__(self, agent, observation_spec, action_spec, acts: _Hash):
    self.agent, self.acts = agent, acts
    self.obs_spec, self.act_spec = observation_spec, action_spec
    self.rng = np.random.default_rng(SEED)
    self.core = agent.initial_core_state(ROWS)
    self.prev_action = np.zeros((ROWS,) + action_spec.shape, action_spec.dtype)
    self.first = True
    self.steps: List[Dict[str, Any]] = []
    self.calls = 0

  def _step(self) -> Dict[str, Any]:
    from seed_rl.common.agent_api import ActInputs

    rng = self.rng
    if self.first:
      terminated = np.zeros(ROWS, bool)
      truncated = np.zeros(ROWS, bool)
      reward = np.zeros(ROWS, np.float32)
      done = np.ones(ROWS, bool)
      self.first = False
    else:
      u = rng.random(ROWS)
      terminated, truncated = u < 0.08, (u >= 0.08) & (u < 0.14)
      # Rewards beyond [-1, 1] so that reward clipping matters.
      reward = (3.0 * rng.standard_normal(ROWS)).astype(np.float32)
      done = terminated | truncated
    bootstrap = np.where(truncated, rng.standard_normal(ROWS), 0.0)
    observation = _random(self.obs_spec, (ROWS,) + self.obs_spec.shape, rng)
    mask = done.reshape((ROWS,) + (1,) * len(self.act_spec.shape))
    prev_action = np.where(mask, 0, self.prev_action).astype(
      self.act_spec.dtype
    )
    version = int(self.agent.step_counter.numpy())
    out = self.agent.act(
      ActInputs(
        env_ids=np.arange(ROWS, dtype=np.int32),
        observation=observation,
        prev_action=prev_action,
        reward=reward,
        done=done,
        core_state=self.core,
        eval_mask=np.zeros(ROWS, bool),
      )
    )
    _hash_outputs(self.acts, f"train/{self.calls}", out)
    self.calls += 1
    step = {
      "observation": observation,
      "reward": reward,
      "terminated": terminated,
      "truncated": truncated,
      "bootstrap_value": bootstrap.astype(np.float32),
      "prev_action": prev_action,
      "action": np.asarray(out.action),
      "value": np.asarray(out.value, np.float32),
      "extras": dict(out.extras),
      "core_state": self.core,
      "policy_version": np.full(ROWS, version, np.int64),
    }
    self.prev_action = np.asarray(out.action)
    self.core = out.core_state
    return step

  def next_unroll(self):
    """The next unroll [ROWS, T+1, ...], overlapping the previous one by
    the agent's unroll_overlap steps."""
    from seed_rl.common.agent_api import Unroll

    t1 = self.agent.unroll_length + 1
    overlap = int(getattr(self.agent, "unroll_overlap", 1))
    steps = self.steps[len(self.steps) - overlap :] if self.steps else []
    while len(steps) < t1:
      steps.append(self._step())
    self.steps = steps
    stack = lambda name: np.stack([s[name] for s in steps], axis=1)
    return Unroll(
      env_ids=np.arange(ROWS, dtype=np.int32),
      observation=stack("observation"),
      reward=stack("reward"),
      terminated=stack("terminated"),
      truncated=stack("truncated"),
      bootstrap_value=stack("bootstrap_value"),
      prev_action=stack("prev_action"),
      action=stack("action"),
      value=stack("value"),
      extras={
        name: np.stack([s["extras"][name] for s in steps], axis=1)
        for name in steps[0]["extras"]
      },
      core_state=tuple(steps[0]["core_state"]),
      policy_version=stack("policy_version"),
    )

  def evaluate(self, tag: str) -> None:
    """One act call on evaluation rows (ids after the training envs)."""
    from seed_rl.common.agent_api import ActInputs

    spec = self.act_spec
    out = self.agent.act(
      ActInputs(
        env_ids=np.arange(ROWS, 2 * ROWS, dtype=np.int32),
        observation=_random(
          self.obs_spec, (ROWS,) + self.obs_spec.shape, self.rng
        ),
        prev_action=np.zeros((ROWS,) + spec.shape, spec.dtype),
        reward=np.zeros(ROWS, np.float32),
        done=np.ones(ROWS, bool),
        core_state=self.agent.initial_core_state(ROWS),
        eval_mask=np.ones(ROWS, bool),
      )
    )
    _hash_outputs(self.acts, tag, out)


def _hash_metrics(h: _Hash, step: int, metrics) -> None:
  h.text(f"step {step}: {len(metrics)} metrics")
  for name in sorted(metrics):
    if name.endswith("_s") or name.endswith("_ms"):
      continue  # wall-clock
    h.text(f"{name}={float(metrics[name])!r}")


def _hash_checkpoint(agent, keys: _Hash, weights: _Hash) -> int:
  import tempfile

  import tensorflow as tf

  from seed_rl.common.checkpoints import Checkpointer

  with tempfile.TemporaryDirectory() as tmp:
    checkpointer = Checkpointer(
      os.path.join(tmp, "checkpoints"), agent.checkpoint_objects()
    )
    path = checkpointer.save(env_steps=0)
    if path is None:
      raise RuntimeError("the checkpoint could not be written")
    names = sorted(name for name, _ in tf.train.list_variables(path))
    for name in names:
      keys.text(name)
      if name != "_CHECKPOINTABLE_OBJECT_GRAPH":
        weights.array(name, tf.train.load_variable(path, name))
  return len(names)


def _worker(name: str) -> Dict[str, Any]:
  import random

  env, agent_name, bindings, trains_per_round = SETUPS[name]
  random.seed(SEED)
  np.random.seed(SEED)
  import seed_rl
  from seed_rl import learner_main

  if not os.path.abspath(seed_rl.__file__).startswith(ROOT + os.sep):
    raise RuntimeError(f"seed_rl comes from {seed_rl.__file__}, not {ROOT}")
  argv = [
    "--env",
    env,
    "--agent",
    agent_name,
    "--num_actors",
    "1",
    "--envs_per_actor",
    str(ROWS),
    "--seed",
    str(SEED),
  ]
  for binding in _COMMON + bindings:
    argv += ["--gin_bindings", binding]
  # The learner's own build: gin, LearnerConfig, TF threads and seed, the
  # env's specs, create_agent under the configured devices.
  run = learner_main._build(learner_main.build_parser().parse_args(argv))
  agent = run.agent
  acts, metrics = _Hash(), _Hash()
  keys, weights = _Hash(), _Hash()
  rollout = _Rollout(agent, agent.observation_spec, agent.action_spec, acts)
  trained = 0
  for r in range(ROUNDS):
    agent.add_unrolls(rollout.next_unroll())
    for _ in range(trains_per_round):
      result = agent.train_step()
      _hash_metrics(metrics, trained, result)
      trained += 1
    rollout.evaluate(f"eval/{r}")
  num_keys = _hash_checkpoint(agent, keys, weights)
  agent.stop()
  return {
    "acts": acts.hexdigest(),
    "metrics": metrics.hexdigest(),
    "checkpoint_keys": keys.hexdigest(),
    "weights": weights.hexdigest(),
    "act_calls": rollout.calls + ROUNDS,
    "train_steps": int(agent.step_counter.numpy()),
    "checkpoint_variables": num_keys,
  }


# ---------------------------------------------------------------- driver


def _run_setup(name: str) -> Dict[str, Any]:
  env = dict(os.environ, PYTHONHASHSEED=str(SEED), TF_CPP_MIN_LOG_LEVEL="3")
  proc = subprocess.run(
    [sys.executable, os.path.abspath(__file__), "--worker", name],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=TIMEOUT_S,
    check=False,
  )
  lines = [
    line[len(_LINE_PREFIX) :]
    for line in proc.stdout.splitlines()
    if line.startswith(_LINE_PREFIX)
  ]
  if proc.returncode != 0 or not lines:
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
    raise RuntimeError(f"exit {proc.returncode}: " + "\n".join(tail))
  return json.loads(lines[-1])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--only", nargs="*", choices=sorted(SETUPS), default=None)
  parser.add_argument(
    "--worker", choices=sorted(SETUPS), help=argparse.SUPPRESS
  )
  args = parser.parse_args()
  if args.worker:
    print(_LINE_PREFIX + json.dumps(_worker(args.worker)), flush=True)
    return
  fingerprints, parts, errors = {}, {}, {}
  for name in args.only or SETUPS:
    start = time.monotonic()
    try:
      result = _run_setup(name)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
      errors[name] = str(e)
      print(f"[fingerprint] {name}: FAILED {e}", file=sys.stderr, flush=True)
      continue
    digest = hashlib.sha256(
      "\0".join(
        result[k] for k in ("acts", "metrics", "checkpoint_keys", "weights")
      ).encode()
    ).hexdigest()
    fingerprints[name] = digest
    parts[name] = result
    print(
      f"[fingerprint] {name}: {digest[:16]} ({result['act_calls']} act "
      f"calls, {result['train_steps']} learner steps, "
      f"{result['checkpoint_variables']} checkpoint variables, "
      f"{time.monotonic() - start:.1f} s)",
      file=sys.stderr,
      flush=True,
    )
  print(
    json.dumps(
      {
        "benchmark": "agent_fingerprint",
        "fingerprints": fingerprints,
        "parts": parts,
        "errors": errors,
      },
      sort_keys=True,
    )
  )


if __name__ == "__main__":
  main()
