"""Q-learning pieces shared by the value-based agents (DQN, R2D2)."""

from __future__ import annotations

import tensorflow as tf


def double_q_values(
  q_online: tf.Tensor, q_target: tf.Tensor, double_q: bool = True
) -> tf.Tensor:
  """Q_target(s, argmax_a Q_online(s, a)) (van Hasselt et al. 2016), or
  max_a Q_target(s, a) when not `double_q`: [..., A] x2 -> [...]."""
  if not double_q:
    return tf.reduce_max(q_target, axis=-1)
  greedy = tf.argmax(q_online, axis=-1, output_type=tf.int32)
  num_actions = tf.shape(q_target)[-1]
  return tf.reduce_sum(
    tf.one_hot(greedy, num_actions, dtype=q_target.dtype) * q_target, axis=-1
  )
