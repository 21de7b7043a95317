"""Unrolls of frames (UnrollStore with frame_depth k) rebuild exactly the
stacks the learner's per-env history built, step by step: episode starts,
restarts, overlapping unrolls, envs appended in subsets and unrolls shorter
than the stack included."""

import dataclasses

import numpy as np
import pytest

from seed_rl.common import frames as frames_lib
from seed_rl.common.agent_api import Unroll
from seed_rl.common.env_state import EnvStateTable
from seed_rl.common.specs import ArraySpec
from seed_rl.common.unroll_store import StepRecord, UnrollStore

FRAME = (3, 5)


def _step(observation, starts):
  n = len(starts)
  zeros = np.zeros(n, np.float32)
  return StepRecord(
    observation=observation,
    reward=zeros,
    terminated=starts,
    truncated=np.zeros(n, bool),
    bootstrap_value=zeros,
    prev_action=np.zeros(n, np.int32),
    action=np.zeros(n, np.int32),
    value=zeros,
    policy_version=np.zeros(n, np.int64),
    core_state=(),
    extras={},
  )


@pytest.mark.parametrize(
  "length,overlap,k,dtype",
  [
    (5, 1, 4, "uint8"),
    (9, 3, 4, "uint8"),
    (2, 1, 4, "uint8"),
    (4, 1, 2, "float32"),
    (6, 2, 3, "uint8"),
  ],
)
def test_frames_rebuild_the_stacks_the_history_built(length, overlap, k, dtype):
  num_envs = 6
  spec = ArraySpec(FRAME, dtype)
  action = ArraySpec((), "int32", num_values=2)
  history = EnvStateTable(num_envs, spec, action, lambda n: (), frame_stack=k)
  stacks = UnrollStore(num_envs, length, overlap)
  frames = UnrollStore(num_envs, length, overlap, frame_depth=k)
  rng = np.random.default_rng(length * 10 + k)
  got_stacks, got_frames = [], []
  for t in range(60):
    # Lockstep steps of all envs, and steps of subsets (another block
    # layout, the per-row write path).
    if t % 7 in (3, 4):
      ids = np.array([1, 2, 4]) if t % 7 == 3 else np.array([0, 3, 5])
    else:
      ids = np.arange(num_envs)
    if t == 23:  # a restart: partial unrolls dropped, state reset
      stacks.reset(np.array([2, 3]))
      frames.reset(np.array([2, 3]))
      history.reset(np.array([2, 3]))
    starts = rng.random(len(ids)) < 0.15
    starts[ids == 5] = t % 4 == 0  # back-to-back starts for env 5
    history.reset(ids[starts])
    new = (rng.random((len(ids),) + FRAME) * 255).astype(dtype)
    stacked = history.stacked(ids, new)
    got_stacks += stacks.append_each(ids, _step(stacked, starts))
    got_frames += frames.append_each(ids, _step(new, starts))
  assert len(got_stacks) == len(got_frames) > 10
  for a, b in zip(got_stacks, got_frames):
    assert b.frame_stack == k and a.frame_stack == 1
    np.testing.assert_array_equal(a.env_ids, b.env_ids)
    assert b.observation.shape == (len(b.env_ids), k - 1 + length) + FRAME
    rebuilt = frames_lib.stacked_unroll(b)
    assert rebuilt.frame_stack == 1
    np.testing.assert_array_equal(rebuilt.observation, a.observation)
    # Each frame once: k - 1 + length frames instead of k * length.
    assert b.observation.nbytes * k * length == a.observation.nbytes * (
      k - 1 + length
    )


def test_frame_store_checks_its_depth():
  with pytest.raises(ValueError, match="frame_depth must be >= 1"):
    UnrollStore(2, 3, frame_depth=0)


def _one_unroll(observation):
  """One unroll of T+1 = observation.shape[1] steps, zeros but for
  `observation`."""
  t1 = observation.shape[1]
  zeros = lambda dtype: np.zeros((1, t1), dtype)
  return Unroll(
    env_ids=np.zeros(1, np.int32),
    observation=observation,
    reward=zeros(np.float32),
    terminated=zeros(bool),
    truncated=zeros(bool),
    bootstrap_value=zeros(np.float32),
    prev_action=zeros(np.int32),
    action=zeros(np.int32),
    value=zeros(np.float32),
    extras={},
    core_state=(),
    policy_version=zeros(np.int64),
  )


def test_stacked_unroll_leaves_stacks_alone():
  unroll = _one_unroll(np.ones((1, 2, 3, 4), np.uint8))
  assert frames_lib.stacked_unroll(unroll) is unroll


def test_an_agent_on_frames_refuses_stacks_by_name():
  from seed_rl.common.agent_api import check_unroll

  unroll = _one_unroll(np.zeros((1, 3, 6, 5, 4), np.uint8))
  spec = ArraySpec((6, 5, 4), "uint8", frame_stack=4)
  action = ArraySpec((), "int32", num_values=2)
  check_unroll(unroll, 2, spec, action)  # stacks, for an agent on stacks
  with pytest.raises(ValueError, match="trains on unrolls of frames"):
    check_unroll(unroll, 2, spec, action, trains_on_frames=True)
  frames = dataclasses.replace(
    unroll, observation=np.zeros((1, 6, 6, 5), np.uint8), frame_stack=4
  )
  check_unroll(frames, 2, spec, action, trains_on_frames=True)
  with pytest.raises(ValueError, match="must be built with the same"):
    check_unroll(frames, 2, spec.replace(frame_stack=1), action)
