"""Merged observations reuse one buffer, but never one somebody holds."""

import numpy as np

from seed_rl.common.batches import MergeBuffer


def _parts(value, n=3):
  return tuple(np.full((2, 4), value + i, np.uint8) for i in range(n))


def test_buffer_is_reused_when_free():
  merge = MergeBuffer()
  first = merge.concatenate(_parts(1))
  address = first.__array_interface__["data"][0]
  del first
  second = merge.concatenate(_parts(5))
  # The same memory, no new allocation.
  assert second.__array_interface__["data"][0] == address
  np.testing.assert_array_equal(second, np.concatenate(_parts(5)))


def test_held_merge_is_never_overwritten():
  merge = MergeBuffer()
  held = merge.concatenate(_parts(1))
  view = held[1:]  # a view held elsewhere keeps the buffer too
  del held
  again = merge.concatenate(_parts(9))
  np.testing.assert_array_equal(view, np.concatenate(_parts(1))[1:])
  np.testing.assert_array_equal(again, np.concatenate(_parts(9)))


def test_grows_and_follows_shape_and_dtype():
  merge = MergeBuffer()
  small = merge.concatenate(_parts(1, n=1))
  del small
  big = merge.concatenate(_parts(2, n=5))
  assert big.shape == (10, 4)
  floats = merge.concatenate(
    tuple(np.ones((3, 2), np.float32) for _ in range(2))
  )
  assert floats.dtype == np.float32 and floats.shape == (6, 2)
