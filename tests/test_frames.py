"""FrameBlockStore (DQN's frames stored once); compress/decompress are
tested with R2D2 in test_r2d2.py."""

import numpy as np
import pytest

from seed_rl.common import frames as frames_lib


def _stacked_unrolls(rng, batch, steps, depth=4, size=3):
  """Unrolls as the runtime stacks them: [B, T+1, H, W, k] uint8 with zeros
  in the slots older than each episode's first step, and their done flags."""
  done = rng.random((batch, steps)) < 0.15
  stream = rng.integers(1, 255, (batch, steps + depth - 1, size, size))
  # Episode starts inside the k-1 steps before step 0 are invisible in done;
  # keep those slots nonzero so the layout is the runtime's.
  obs = np.zeros((batch, steps, size, size, depth), np.uint8)
  for b in range(batch):
    start = -depth  # no episode start seen yet
    for t in range(steps):
      if done[b, t]:
        start = t
      for c in range(depth):
        age = depth - 1 - c
        if t - age >= start:
          obs[b, t, ..., c] = stream[b, t + c]
  return obs, done


def test_block_store_rebuilds_every_stack():
  rng = np.random.default_rng(1)
  store = frames_lib.FrameBlockStore(4, steps=9, frame_shape=(12, 12), depth=4)
  obs, done = _stacked_unrolls(rng, 3, 9, size=12)
  ids = store.insert(obs, done)
  assert ids.tolist() == [0, 1, 2]
  b, t = np.meshgrid(np.arange(3), np.arange(9), indexing="ij")
  rebuilt = store.stacks(ids[b.ravel()], t.ravel())
  np.testing.assert_array_equal(rebuilt, obs.reshape((27, 12, 12, 4)))
  # About one frame per step (plus the k-1 of step 0 per block), for 4
  # blocks where 3 are used: under half of the stacks' bytes.
  assert store.nbytes < obs.nbytes / 2


def test_block_store_refuses_overwritten_blocks():
  rng = np.random.default_rng(2)
  store = frames_lib.FrameBlockStore(2, steps=5, frame_shape=(3, 3), depth=4)
  for _ in range(2):
    obs, done = _stacked_unrolls(rng, 2, 5)
    ids = store.insert(obs, done)
  assert ids.tolist() == [2, 3] and store.oldest_alive() == 2
  np.testing.assert_array_equal(
    store.stacks(np.array([3]), np.array([4]))[0], obs[1, 4]
  )
  with pytest.raises(ValueError, match="not all alive"):
    store.stacks(np.array([1]), np.array([0]))
  with pytest.raises(ValueError, match="expected"):
    store.insert(obs[:, :4], done[:, :4])


def test_blocks_for_keeps_fifo_items_alive():
  # 10 items per block, FIFO of 95 items: after any number of inserts the
  # live items span at most 11 blocks, and one more is being written.
  assert frames_lib.FrameBlockStore.blocks_for(95, 10) == 12
