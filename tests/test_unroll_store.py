"""Unroll assembly: lengths, overlap, resets, typed steps in, Unrolls out."""

import numpy as np
import pytest

from seed_rl.common import agent_api
from seed_rl.common.specs import ArraySpec
from seed_rl.common.unroll_store import StepRecord, UnrollStore

OBS = ArraySpec((3,), "float32")
ACTION = ArraySpec((), "int32", num_values=8)


def _step(t, env_ids):
  """Step t of `env_ids`: every field says t or the env, so rows can be
  traced; the core state before step t is t."""
  n, env = len(env_ids), np.asarray(env_ids)
  return StepRecord(
    observation=np.stack([np.full(3, t * 10 + e, np.float32) for e in env]),
    reward=np.full(n, t, np.float32),
    terminated=env % 2 == 0,
    truncated=np.zeros(n, bool),
    bootstrap_value=np.full(n, -t, np.float32),
    prev_action=env.astype(np.int32),
    action=(env + 1).astype(np.int32),
    value=np.full(n, 2 * t, np.float32),
    policy_version=np.full(n, t, np.int64),
    core_state=(np.full((n, 2), t, np.float32),),
    extras={"logits": np.full((n, 4), t, np.float32), "t": np.full(n, t)},
  )


def test_unrolls_overlap_by_one_step():
  store = UnrollStore(num_envs=3, length=4, overlap=1)
  ids = np.array([0, 2])
  emitted = []
  for t in range(10):
    out = store.append(ids, _step(t, ids))
    if out is not None:
      emitted.append(out)
  # steps 0-3, 3-6, 6-9 for each env
  assert len(emitted) == 3
  for k, out in enumerate(emitted):
    assert isinstance(out, agent_api.Unroll)
    np.testing.assert_array_equal(out.env_ids, [0, 2])
    assert out.env_ids.dtype == np.int32
    steps = np.arange(3 * k, 3 * k + 4)
    np.testing.assert_array_equal(out.policy_version[0], steps)
    np.testing.assert_array_equal(out.extras["t"][1], steps)
    np.testing.assert_array_equal(out.reward[0], steps)
    np.testing.assert_array_equal(out.value[1], 2 * steps)
    np.testing.assert_array_equal(out.bootstrap_value[1], -steps)
    np.testing.assert_array_equal(out.prev_action[:, 0], [0, 2])
    np.testing.assert_array_equal(out.action[:, 3], [1, 3])
    np.testing.assert_array_equal(out.terminated[:, 0], [True, True])
    assert out.observation.shape == (2, 4, 3)
    assert out.observation[1, 2, 0] == (3 * k + 2) * 10 + 2
    # The state before the unroll's step 0, [C, 2].
    np.testing.assert_array_equal(out.core_state[0], np.full((2, 2), 3 * k))
    agent_api.check_unroll(
      out,
      3,
      OBS,
      ACTION,
      required_extras={"logits": (4,), "t": ()},
      core_state_shapes=[(2,)],
    )


def test_overlap_larger_than_one():
  store = UnrollStore(num_envs=1, length=5, overlap=3)
  ids = np.array([0])
  starts, states = [], []
  for t in range(12):
    out = store.append(ids, _step(t, ids))
    if out is not None:
      starts.append(out.policy_version[0].tolist())
      states.append(out.core_state[0][0, 0])
  assert starts == [
    [0, 1, 2, 3, 4],
    [2, 3, 4, 5, 6],
    [4, 5, 6, 7, 8],
    [6, 7, 8, 9, 10],
  ]
  assert states == [0, 2, 4, 6]


def test_envs_out_of_step_and_reset():
  store = UnrollStore(num_envs=2, length=3, overlap=1)
  assert store.append(np.array([0]), _step(0, [0])) is None
  assert store.append(np.array([0, 1]), _step(1, [0, 1])) is None
  out = store.append(np.array([0, 1]), _step(2, [0, 1]))
  np.testing.assert_array_equal(out.env_ids, [0])  # env 1 has 2 steps
  assert store.reset(np.array([1])) == 1  # e.g. its actor restarted
  assert store.reset(np.array([1])) == 0  # nothing left to discard
  assert store.append(np.array([1]), _step(3, [1])) is None
  assert store.append(np.array([1]), _step(4, [1])) is None
  out = store.append(np.array([1]), _step(5, [1]))
  np.testing.assert_array_equal(out.policy_version[0], [3, 4, 5])  # no stale


def test_emitted_rows_are_not_aliased_by_later_writes():
  store = UnrollStore(num_envs=1, length=2, overlap=1)
  ids = np.array([0])
  store.append(ids, _step(0, ids))
  out = store.append(ids, _step(1, ids))
  store.append(ids, _step(2, ids))
  np.testing.assert_array_equal(out.policy_version[0], [0, 1])
  np.testing.assert_array_equal(out.extras["logits"][0, :, 0], [0, 1])


def test_step_rows_select_envs_in_every_field():
  step = _step(7, [0, 1, 2]).rows(np.array([True, False, True]))
  np.testing.assert_array_equal(step.prev_action, [0, 2])
  assert step.core_state[0].shape == (2, 2)
  assert step.extras["logits"].shape == (2, 4)
  assert step.observation.shape == (2, 3)


def test_feed_forward_steps_without_extras():
  store = UnrollStore(num_envs=1, length=2, overlap=1)
  ids = np.array([0])
  step = _step(0, ids)._replace(core_state=(), extras={})
  store.append(ids, step)
  out = store.append(ids, step)
  assert out.core_state == () and out.extras == {}


def test_a_step_of_another_structure_is_refused():
  store = UnrollStore(num_envs=1, length=3, overlap=1)
  ids = np.array([0])
  store.append(ids, _step(0, ids))
  with pytest.raises(ValueError, match="structure changed"):
    store.append(ids, _step(1, ids)._replace(extras={}))
  with pytest.raises(ValueError, match="structure changed"):
    store.append(ids, _step(1, ids)._replace(core_state=()))


@pytest.mark.parametrize("length,overlap", [(1, 0), (4, 0), (4, 4)])
def test_bad_geometry_is_refused(length, overlap):
  with pytest.raises(ValueError):
    UnrollStore(num_envs=1, length=length, overlap=overlap)
