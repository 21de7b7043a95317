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

import tensorflow as tf

from seed_rl.common.specs import ArraySpec


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
  steps = tf.shape(starts)[0]
  frame_rank = frames.shape.rank - 2
  not_start = tf.logical_not(starts)
  channels = []
  # valid: no episode start in the steps (t - age, t], age = k-1-c.
  valid = tf.ones_like(not_start)
  for age in range(depth):
    c = depth - 1 - age
    frame = frames[c : c + steps]
    if age:
      shifted = tf.concat(
        [tf.ones_like(not_start[: age - 1]), not_start[: steps - age + 1]],
        axis=0,
      )
      valid = tf.logical_and(valid, shifted)
      mask = tf.reshape(
        tf.cast(valid, frame.dtype),
        tf.concat([tf.shape(valid), [1] * frame_rank], 0),
      )
      frame = frame * mask
    channels.append(frame)
  return tf.stack(channels[::-1], axis=-1)


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
