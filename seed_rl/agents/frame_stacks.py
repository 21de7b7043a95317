"""Frame stacks rebuilt inside the training step (TensorFlow).

With frame stacking, the learner hands agents that train on frames
(`Agent.trains_on_frames`) unrolls holding each frame once
(`Unroll.frame_stack`): [k-1 + T+1, B, H, W] time-major, the k-1 frames
before step 0 (zero where older than an episode start) and then each step's
newest frame. Stacking them here, on the training device, means a GPU
learner is handed and copies frames, not stacks: a k-fold saving.

Step t's stack [H, W, k] holds, in channel c, the frame of step t - (k-1-c),
zero where an episode started after that frame and at or before step t: the
same stacks the learner built for inference (common/env_state.py), and the
same as common/frames.py's NumPy `stack_frames`.
"""

from __future__ import annotations

import sys
from typing import List

import tensorflow as tf

from seed_rl.common.specs import ArraySpec

# tf.bitcast lays a uint32's bytes out in memory order.
_LITTLE_ENDIAN = sys.byteorder == "little"


def stack_frames(frames: tf.Tensor, starts: tf.Tensor, depth: int) -> tf.Tensor:
  """Rebuilds time-major stacks.

  Args:
    frames: [k-1 + T+1, B, *frame_shape].
    starts: bool [T+1, B]: step t starts an episode (terminated or
      truncated set at t). Step 0's flag changes nothing (its history is
      already zero where stale), so callers may pass False there.
    depth: k.

  Returns:
    [T+1, B, *frame_shape, k], channel k-1 the newest frame.
  """
  valid = _valid_by_age(starts, depth)
  if frames.dtype == tf.uint8 and depth <= 4 and _LITTLE_ENDIAN:
    return _stack_bytes(frames, starts, valid)
  steps = tf.shape(starts)[0]
  channels = [
    frames[c : c + steps] * _expand(valid[depth - 1 - c], frames)
    for c in range(depth - 1)
  ]
  channels.append(frames[depth - 1 : depth - 1 + steps])  # newest: valid
  return tf.stack(channels, axis=-1)


def _valid_by_age(starts: tf.Tensor, depth: int) -> List[tf.Tensor]:
  """valid[age] (age 1..k-1; [0] is None), bool [T+1, B]: no episode starts
  in the steps (t - age, t], so the frame of step t - age belongs to step
  t's episode."""
  steps = tf.shape(starts)[0]
  not_start = tf.logical_not(starts)
  valid: List[tf.Tensor] = [None]
  run = tf.ones_like(not_start)
  for age in range(1, depth):
    # not_start shifted down by age-1 steps; the first age-1 rows have no
    # start inside the unroll to look at (older frames are already zero).
    shifted = tf.concat(
      [tf.ones_like(not_start[: age - 1]), not_start[: steps - age + 1]],
      axis=0,
    )
    run = tf.logical_and(run, shifted)
    valid.append(run)
  return valid


def _expand(valid: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
  """valid [T+1, B] as a 0/1 factor of x's dtype broadcasting over x's
  frame axes."""
  rank = x.shape.rank - 2
  return tf.reshape(
    tf.cast(valid, x.dtype), tf.concat([tf.shape(valid), [1] * rank], 0)
  )


def _stack_bytes(
  frames: tf.Tensor, starts: tf.Tensor, valid: List[tf.Tensor]
) -> tf.Tensor:
  """stack_frames for uint8 frames: channel c goes into byte c of a
  uint32 word per pixel, and a bitcast splits the words into the channel
  axis (the packing common/env_state.py uses for inference). tf.stack on
  the last axis copies one byte at a time; these are whole-array integer
  ops (a [21, 32, 84, 84, 4] batch on a 2-core machine: ~52 ms stacked,
  ~14 ms as words)."""
  depth = len(valid)
  steps = tf.shape(starts)[0]
  wide = tf.cast(frames, tf.uint32)
  word = wide[:steps]
  for c in range(1, depth):
    shift = tf.constant(8 * c, tf.uint32)
    word = tf.bitwise.bitwise_or(
      word, tf.bitwise.left_shift(wide[c : c + steps], shift)
    )

  def masked():
    # Byte c kept where channel c's frame is of step t's episode; the
    # newest (byte k-1) always.
    keep = tf.fill(
      tf.shape(starts), tf.constant(0xFF << 8 * (depth - 1), tf.uint32)
    )
    for c in range(depth - 1):
      byte = tf.constant(0xFF << (8 * c), tf.uint32)
      keep = tf.bitwise.bitwise_or(
        keep, tf.where(valid[depth - 1 - c], byte, tf.zeros_like(byte))
      )
    return tf.bitwise.bitwise_and(word, _expand(keep, word))

  # Most batches hold no episode start after step 0: skip the masking pass.
  word = tf.cond(tf.reduce_any(starts[1:]), masked, lambda: word)
  stacks = tf.bitcast(word, tf.uint8)
  # For k < 4, bytes k..3 are zero; the slice drops them.
  return stacks if depth == 4 else stacks[..., :depth]


def frames_spec(observation_spec: ArraySpec, steps, batch) -> tf.TensorSpec:
  """TensorSpec of what a training step takes as the observations of
  `steps` steps (T+1; None when it varies) of `batch` envs, time-major:
  stacks [T+1, B, *shape], or, when the learner stacks frames
  (`observation_spec.frame_stack` k > 1), frames [k-1 + T+1, B,
  *frame_shape]."""
  k = observation_spec.frame_stack
  if k == 1:
    return tf.TensorSpec(
      (steps, batch) + observation_spec.shape, observation_spec.dtype
    )
  return tf.TensorSpec(
    (None if steps is None else k - 1 + steps, batch)
    + observation_spec.shape[:-1],
    observation_spec.dtype,
  )


def observations(
  observation_spec: ArraySpec,
  observation: tf.Tensor,
  terminated: tf.Tensor,
  truncated: tf.Tensor,
) -> tf.Tensor:
  """What the network sees, stacks [T+1, B, *shape]: `observation` as the
  training step took it (`frames_spec`), stacked when it holds frames.

  Args:
    observation_spec: the agent's (stacked) observation spec.
    observation: per `frames_spec`.
    terminated, truncated: bool [T, B], the flags of the transitions into
      steps 1..T (step 0's are not needed).
  """
  k = observation_spec.frame_stack
  if k == 1:
    return observation
  starts = tf.logical_or(terminated, truncated)
  starts = tf.concat([tf.zeros_like(starts[:1]), starts], axis=0)
  return stack_frames(observation, starts, k)
