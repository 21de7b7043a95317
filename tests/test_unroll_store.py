"""Unroll assembly: lengths, overlap, resets."""

import numpy as np
import pytest

from seed_rl.common.unroll_store import UnrollStore


def _step(t, env_ids):
  return {
    "t": np.full(len(env_ids), t, np.int64),
    "env": np.asarray(env_ids, np.int64),
    "obs": np.stack([np.full(3, t * 10 + e, np.float32) for e in env_ids]),
  }


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
    np.testing.assert_array_equal(out["env_ids"], [0, 2])
    np.testing.assert_array_equal(out["t"][0], np.arange(3 * k, 3 * k + 4))
    np.testing.assert_array_equal(out["env"][:, 0], [0, 2])
    assert out["obs"].shape == (2, 4, 3)
    assert out["obs"][1, 2, 0] == (3 * k + 2) * 10 + 2


def test_overlap_larger_than_one():
  store = UnrollStore(num_envs=1, length=5, overlap=3)
  ids = np.array([0])
  starts = []
  for t in range(12):
    out = store.append(ids, _step(t, ids))
    if out is not None:
      starts.append(out["t"][0].tolist())
  assert starts == [
    [0, 1, 2, 3, 4],
    [2, 3, 4, 5, 6],
    [4, 5, 6, 7, 8],
    [6, 7, 8, 9, 10],
  ]


def test_envs_out_of_step_and_reset():
  store = UnrollStore(num_envs=2, length=3, overlap=1)
  assert store.append(np.array([0]), _step(0, [0])) is None
  assert store.append(np.array([0, 1]), _step(1, [0, 1])) is None
  out = store.append(np.array([0, 1]), _step(2, [0, 1]))
  np.testing.assert_array_equal(out["env_ids"], [0])  # env 1 has 2 steps
  store.reset(np.array([1]))  # e.g. its actor restarted
  assert store.append(np.array([1]), _step(3, [1])) is None
  assert store.append(np.array([1]), _step(4, [1])) is None
  out = store.append(np.array([1]), _step(5, [1]))
  np.testing.assert_array_equal(out["t"][0], [3, 4, 5])  # nothing stale


def test_emitted_rows_are_not_aliased_by_later_writes():
  store = UnrollStore(num_envs=1, length=2, overlap=1)
  ids = np.array([0])
  store.append(ids, _step(0, ids))
  out = store.append(ids, _step(1, ids))
  store.append(ids, _step(2, ids))
  np.testing.assert_array_equal(out["t"][0], [0, 1])


@pytest.mark.parametrize("length,overlap", [(1, 0), (4, 0), (4, 4)])
def test_bad_geometry_is_refused(length, overlap):
  with pytest.raises(ValueError):
    UnrollStore(num_envs=1, length=length, overlap=overlap)
