"""The training step's frame stacks (TensorFlow) against stacks built step
by step from each env's history, as the learner builds them for acting."""

import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents import frame_stacks
from seed_rl.common import frames as frames_lib
from seed_rl.common.specs import ArraySpec


def _reference(history, frames, starts, k):
  """Stacks [T+1, B, *frame, k] by pushing one frame per step onto each
  env's last k frames, emptied at every episode start.

  history: [k-1, B, *frame] the frames before step 0 as the stack holds
  them (zeros where stale); frames [T+1, B, *frame]; starts bool [T+1, B].
  """
  steps, batch = starts.shape
  out = np.zeros(frames.shape + (k,), frames.dtype)
  for b in range(batch):
    stack = [np.zeros_like(frames[0, b])] + [
      history[i, b] for i in range(k - 1)
    ]
    for t in range(steps):
      if starts[t, b]:
        stack = [np.zeros_like(frames[t, b])] * k
      stack = stack[1:] + [frames[t, b]]
      out[t, b] = np.stack(stack, axis=-1)
  return out


def _data(rng, steps, batch, k, frame, dtype, starts_p):
  history = (rng.random((k - 1, batch) + frame) * 250 + 1).astype(dtype)
  frames = (rng.random((steps, batch) + frame) * 250 + 1).astype(dtype)
  starts = rng.random((steps, batch)) < starts_p
  # The history is zero where an episode started at step 0.
  history[:, starts[0]] = 0
  # Some stale history: an env whose episode began one step before step 0.
  if k > 2:
    history[: k - 2, 0] = 0
  return history, frames, starts


@pytest.mark.parametrize(
  "steps,k,frame,dtype,starts_p",
  [
    (6, 4, (5, 3), "uint8", 0.2),
    (21, 4, (84, 84), "uint8", 0.1),
    (3, 4, (2, 2), "uint8", 0.5),  # fewer steps than the stack
    (5, 2, (3,), "float32", 0.3),
    (8, 3, (4, 4), "uint8", 0.0),
    (4, 4, (2, 3), "uint8", 1.0),  # every step starts an episode
    # uint8 stacks of up to 4 are built as uint32 words; these cover k < 4
    # with starts (masked words), and k = 5 (the per-channel path).
    (7, 3, (4, 4), "uint8", 0.3),
    (5, 2, (3,), "uint8", 0.4),
    (9, 5, (3, 2), "uint8", 0.2),
  ],
)
def test_stack_frames_matches_step_by_step_stacking(
  steps, k, frame, dtype, starts_p
):
  rng = np.random.default_rng(steps + k)
  history, frames, starts = _data(rng, steps, 3, k, frame, dtype, starts_p)
  want = _reference(history, frames, starts, k)
  extended = np.concatenate([history, frames], axis=0)
  got = frame_stacks.stack_frames(
    tf.constant(extended), tf.constant(starts), k
  ).numpy()
  np.testing.assert_array_equal(got, want)
  # The NumPy rebuild (replay, agents on stacks) agrees, batch-major.
  numpy = frames_lib.stack_frames(
    np.swapaxes(extended, 0, 1), np.swapaxes(starts, 0, 1), k
  )
  np.testing.assert_array_equal(np.swapaxes(numpy, 0, 1), want)


def test_a_start_at_step_0_only_needs_no_masks():
  """Words skip the masking pass when no episode starts after step 0; step
  0's start is already in the (zeroed) history."""
  rng = np.random.default_rng(3)
  history, frames, starts = _data(rng, 6, 3, 4, (5, 4), "uint8", 0.0)
  starts[0, 1] = True
  history[:, 1] = 0
  want = _reference(history, frames, starts, 4)
  extended = np.concatenate([history, frames], axis=0)
  got = frame_stacks.stack_frames(
    tf.constant(extended), tf.constant(starts), 4
  ).numpy()
  np.testing.assert_array_equal(got, want)


def test_observations_in_a_compiled_step_with_unknown_sizes():
  """As PPO's update traces it: [None, None] steps and batch; flags of
  steps 1..T only."""
  spec = ArraySpec((6, 5, 4), "uint8", frame_stack=4)
  signature = [
    frame_stacks.frames_spec(spec, None, None),
    tf.TensorSpec([None, None], tf.bool),
    tf.TensorSpec([None, None], tf.bool),
  ]
  assert signature[0].shape.as_list() == [None, None, 6, 5]
  fn = tf.function(
    lambda o, te, tr: frame_stacks.observations(spec, o, te, tr),
    input_signature=signature,
  )
  rng = np.random.default_rng(0)
  history, frames, starts = _data(rng, 7, 2, 4, (6, 5), "uint8", 0.3)
  starts[0] = False
  terminated = starts[1:] & (rng.random(starts[1:].shape) < 0.5)
  truncated = starts[1:] & ~terminated
  got = fn(np.concatenate([history, frames]), terminated, truncated).numpy()
  np.testing.assert_array_equal(got, _reference(history, frames, starts, 4))


def test_frames_spec_without_frame_stacking_is_the_stack_spec():
  spec = ArraySpec((4,), "float32")
  assert frame_stacks.frames_spec(spec, 6, 2).shape.as_list() == [6, 2, 4]
  x = tf.zeros([6, 2, 4])
  assert frame_stacks.observations(spec, x, None, None) is x
  stacked = ArraySpec((84, 84, 4), "uint8", frame_stack=4)
  assert frame_stacks.frames_spec(stacked, 21, 8).shape.as_list() == [
    24,
    8,
    84,
    84,
  ]
