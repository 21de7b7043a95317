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


def test_block_arrays_are_reused_only_once_nothing_holds_them():
  """A completed unroll's arrays go back to the store for later unrolls
  (no fresh pages per unroll) only after every Unroll, view and row made
  from them is gone: a held unroll never changes."""
  store = UnrollStore(num_envs=4, length=3, overlap=1)
  ids = slice(0, 4)
  held, expected = [], []
  for t in range(40):
    out = store.append(ids, _step(t, np.arange(4)))
    if out is None:
      continue
    if len(held) < 3:  # keep the first three (and a view of one)
      held.append(out)
      expected.append(out.observation.copy())
    elif len(held) == 3:
      held.append(out.reward[1:])  # a view keeps its base alive too
      expected.append(out.reward[1:].copy())
  for kept, want in zip(held, expected):
    got = kept if isinstance(kept, np.ndarray) else kept.observation
    np.testing.assert_array_equal(got, want)
  # Unrolls dropped at once were recycled: 19 unrolls, 4 of them held.
  assert store.arrays_reused >= 10


def test_append_each_gives_one_unroll_per_block_with_the_same_rows():
  """Two actors' blocks completing in one call: `append_each` hands out each
  block's unroll as it is, `append` the same rows concatenated."""
  each, joined = UnrollStore(8, 3, 1), UnrollStore(8, 3, 1)
  for t in range(7):
    # Two blocks ([0, 4) and [4, 8)) appended separately first, then merged.
    for ids in [slice(0, 4), slice(4, 8)] if t == 0 else [slice(0, 8)]:
      n = ids.stop - ids.start
      step = _step(t, np.arange(ids.start, ids.stop))
      units = each.append_each(ids, step)
      whole = joined.append(ids, step)
      if whole is None:
        assert units == []
        continue
      assert [u.env_ids.tolist() for u in units] == [[0, 1, 2, 3], [4, 5, 6, 7]]
      for field in ("observation", "reward", "action", "policy_version"):
        np.testing.assert_array_equal(
          np.concatenate([getattr(u, field) for u in units]),
          getattr(whole, field),
        )
      np.testing.assert_array_equal(
        np.concatenate([u.core_state[0] for u in units]), whole.core_state[0]
      )
      assert n == 8
