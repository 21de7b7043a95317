r"""The same frame stacks reach the agents as from another tree's learner.

  .venv/bin/python benchmarks/stack_replay.py [--before TREE] [--steps 60]

Feeds one scripted sequence of Atari-shaped steps (84x84 uint8 frames,
stacks of 4) to the learner runtime of this tree and, with `--before`, of
another checkout (a worktree of an older commit: the code that kept 4-frame
stacks on the live path, say), each in a process of its own importing that
tree's `seed_rl`. The sequence has episode ends by termination, by
truncation (with the final observation), by a lost life under
`terminal_on_life_loss`, two actor restarts, an evaluation env, and steps
where two actors' batches are merged into one inference call; it is run
twice, with on-policy unrolls (overlap 1) and with R2D2's overlapping
sequences (overlap 3).

A recording agent (the tree's benchmarks/null_agent, its actions a function
of the stacks it is shown) keeps, per inference call, the act inputs
(observation stacks, env ids, previous actions, rewards, episode starts,
evaluation rows) and, per unroll handed to `add_unrolls`, what a training
step sees: the observation stacks (rebuilt by agents/frame_stacks.py, as
V-trace, PPO and R2D2 rebuild them, where the tree hands over frames) and
every per-step field. Prints one JSON line: per configuration the counts
and a SHA-256 of each record stream, per tree, and `same`: every hash equal
(exit status 1 where not).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import json
import os
import subprocess
import sys
from typing import Dict, List

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_TRAIN = 4
NUM_ACTIONS = 6
FRAME = (84, 84)
DEPTH = 4
# (name, unroll_length, unroll_overlap): V-trace / PPO style unrolls, and
# R2D2's sequences that repeat burn-in + 1 steps of the previous one.
CONFIGS = (("onpolicy_T4", 4, 1), ("sequence_T6_overlap3", 6, 3))
# The child's result line (the learner logs to stdout too).
_PREFIX = "STACK_REPLAY "


# ------------------------------------------------------------- the script --
def script(steps: int, seed: int = 7) -> List[List[List[dict]]]:
  """Per step, the learner's inference calls, each a list of per-actor
  dicts of StepBatch fields (plain NumPy, so every tree builds its own
  StepBatch from them)."""
  rng = np.random.default_rng(seed)
  n = NUM_TRAIN + 1
  run_ids = np.arange(11, 11 + n, dtype=np.int64)
  calls = []
  for t in range(steps):
    if t == 13:
      run_ids[1] = 99  # env 1's actor restarted
    if t == 31:
      run_ids[[2, 3]] = (101, 102)  # another actor, both its envs
    u = rng.random(n)
    step = {
      "run_ids": run_ids.copy(),
      "terminated": (u < 0.08) & (t > 0),
      "truncated": (u >= 0.08) & (u < 0.13) & (t > 0),
      "life_lost": (u >= 0.13) & (u < 0.2) & (t > 0),
      "frames": rng.integers(1, 256, (n,) + FRAME, np.uint8),
      "reward": rng.integers(-2, 3, n).astype(np.float32),
    }
    step["final"] = rng.integers(
      1, 256, (int(step["truncated"].sum()),) + FRAME, np.uint8
    )
    # Usually one actor of all training envs; every third step two actors
    # merged into one call; the eval env alone.
    groups = [[0, 1], [2, 3]] if t % 3 == 2 else [[0, 1, 2, 3]]
    calls.append([[_rows(g, step) for g in groups], [_rows([4], step)]])
  return calls


def _rows(ids: List[int], step: dict) -> dict:
  rows = np.asarray(ids)
  truncated = step["truncated"]
  final_rows = np.cumsum(truncated)[rows][truncated[rows]] - 1
  return dict(
    env_ids=rows.astype(np.int32),
    run_ids=step["run_ids"][rows],
    reward=step["reward"][rows],
    terminated=step["terminated"][rows],
    truncated=truncated[rows],
    observation=step["frames"][rows],
    final_observation=step["final"][final_rows],
    episode_return=np.zeros(0, np.float32),
    episode_length=np.zeros(0, np.int32),
    life_lost=step["life_lost"][rows],
  )


# ---------------------------------------------------------------- a tree --
class _Digest:
  def __init__(self):
    self.sha = hashlib.sha256()
    self.count = 0

  def add(self, *arrays) -> None:
    self.count += 1
    for a in arrays:
      a = np.ascontiguousarray(a)
      self.sha.update(f"{a.dtype}{a.shape}".encode())
      self.sha.update(a.tobytes())


def _unroll_stacks(unroll, spec_stacked) -> np.ndarray:
  """[B, T+1, 84, 84, 4]: what the training step sees."""
  if getattr(unroll, "frame_stack", 1) == 1:
    return unroll.observation
  import tensorflow as tf

  from seed_rl.agents import frame_stacks

  time_major = lambda x: tf.constant(np.swapaxes(x, 0, 1))
  stacks = frame_stacks.observations(
    spec_stacked,
    time_major(unroll.observation),
    time_major(unroll.terminated)[1:],
    time_major(unroll.truncated)[1:],
  )
  return np.swapaxes(stacks.numpy(), 0, 1)


def _recorder_class(null_agent, act_outputs, stacked):
  """The tree's NullAgent, recording what it is handed (`acts`, `unrolls`,
  `handed_as`) and acting as a function of the stacks it is shown, so that
  a stack built differently also changes what later steps record."""

  class Recorder(null_agent):
    def __init__(self, *args, unroll_overlap: int, **kwargs):
      super().__init__(*args, **kwargs)
      self.unroll_overlap = unroll_overlap
      self.acts, self.unrolls = _Digest(), _Digest()
      self.handed_as = {"frames": 0, "stacks": 0}

    def act(self, inputs):
      obs = inputs.observation
      self.acts.add(
        obs,
        inputs.env_ids,
        inputs.prev_action,
        inputs.reward,
        inputs.done,
        inputs.eval_mask,
      )
      flat = obs.reshape(obs.shape[0], -1).astype(np.int64)
      action = (flat.sum(1) + inputs.env_ids) % NUM_ACTIONS
      value = flat[:, ::97].mean(1) / 255.0
      return act_outputs(
        action=action.astype(np.int32),
        value=value.astype(np.float32),
        extras={},
        core_state=(),
      )

    def add_unrolls(self, unroll):
      k = getattr(unroll, "frame_stack", 1)
      self.handed_as["frames" if k > 1 else "stacks"] += unroll.batch_size
      stacks = _unroll_stacks(unroll, stacked)
      for b in range(unroll.batch_size):
        self.unrolls.add(
          unroll.env_ids[b],
          stacks[b],
          unroll.reward[b],
          unroll.terminated[b],
          unroll.truncated[b],
          unroll.bootstrap_value[b],
          unroll.prev_action[b],
          unroll.action[b],
          unroll.value[b],
        )

  return Recorder


def run_tree(steps: int) -> Dict[str, dict]:
  """In a process whose sys.path starts with the tree: every config's
  record counts and hashes."""
  # By name: mypy maps benchmarks/ as top-level modules.
  null_agent = importlib.import_module("benchmarks.null_agent.agent")
  from seed_rl.common.agent_api import ActOutputs
  from seed_rl.common.learner import Learner, LearnerConfig
  from seed_rl.common.specs import ArraySpec, StepBatch

  wire = ArraySpec(FRAME, "uint8", "frame")
  # Trees from before unrolls of frames have no ArraySpec.frame_stack.
  stacked = ArraySpec(FRAME + (DEPTH,), "uint8", "frames")
  if "frame_stack" in ArraySpec.__dataclass_fields__:
    stacked = dataclasses.replace(stacked, frame_stack=DEPTH)
  action_spec = ArraySpec((), "int32", "action", num_values=NUM_ACTIONS)
  recorder = _recorder_class(null_agent.NullAgent, ActOutputs, stacked)
  calls = script(steps)
  out = {}
  for name, length, overlap in CONFIGS:
    agent = recorder(
      stacked,
      action_spec,
      NUM_TRAIN + 1,
      unroll_length=length,
      unroll_overlap=overlap,
    )
    learner = Learner(
      agent,
      wire,
      action_spec,
      NUM_TRAIN,
      1,
      LearnerConfig(frame_stack=DEPTH, terminal_on_life_loss=True),
    )
    try:
      for step_calls in calls:
        for call in step_calls:
          learner._infer([StepBatch(**rows) for rows in call])
    finally:
      learner.shutdown()
    out[name] = {
      "act_calls": agent.acts.count,
      "acts_sha256": agent.acts.sha.hexdigest(),
      "unrolls": agent.unrolls.count,
      "unrolls_sha256": agent.unrolls.sha.hexdigest(),
      # How the tree handed its unrolls over (not compared).
      "handed_as": agent.handed_as,
    }
  return out


# ---------------------------------------------------------------- driver --
def _child(tree: str, steps: int) -> dict:
  env = dict(os.environ, PYTHONPATH=tree, TF_CPP_MIN_LOG_LEVEL="3")
  proc = subprocess.run(
    [sys.executable, os.path.abspath(__file__), "--child", tree]
    + ["--steps", str(steps)],
    cwd=tree,
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  if proc.returncode != 0:
    raise SystemExit(f"stack_replay: the run in {tree} failed:\n{proc.stderr}")
  commit = subprocess.run(
    ["git", "-C", tree, "log", "-1", "--format=%h"],
    capture_output=True,
    text=True,
  ).stdout.strip()
  line = [s for s in proc.stdout.splitlines() if s.startswith(_PREFIX)][-1]
  return {"tree": tree, "commit": commit, **json.loads(line[len(_PREFIX) :])}


def main() -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--before", help="another checkout to compare with")
  p.add_argument("--steps", type=int, default=60)
  p.add_argument("--child", help=argparse.SUPPRESS)
  args = p.parse_args()
  if args.child:
    sys.path.insert(0, args.child)
    print(_PREFIX + json.dumps({"configs": run_tree(args.steps)}))
    return 0
  after = _child(ROOT, args.steps)
  result = {"benchmark": "stack_replay", "steps": args.steps, "after": after}
  if args.before:
    before = _child(os.path.abspath(args.before), args.steps)
    result["before"] = before
    digests = lambda r: {
      name: {k: v for k, v in c.items() if k != "handed_as"}
      for name, c in r["configs"].items()
    }
    result["same"] = digests(before) == digests(after)
  print(json.dumps(result))
  return 0 if result.get("same", True) else 1


if __name__ == "__main__":
  sys.exit(main())
