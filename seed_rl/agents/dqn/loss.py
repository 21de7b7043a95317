"""DQN's loss: the importance-weighted TD error of n-step transitions.

Shapes: B transitions, A actions. With targets y (targets.py, no gradient)
and the online Q of the taken actions, delta = y - Q(s, a):

  per transition  l = 0.5 delta^2, or with `huber_delta` d the Huber loss
                  l = 0.5 min(|delta|, d)^2 + d (|delta| - min(|delta|, d))
                  (quadratic inside [-d, d], linear outside: the Nature DQN's
                  clipping of the error's gradient to [-d, d]);
  batch           L = mean_b w_b l_b, with w the prioritized-replay
                  importance weights (Schaul et al. 2016; all 1 when uniform).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import tensorflow as tf


def dqn_loss(
  q: tf.Tensor,
  action: tf.Tensor,
  target: tf.Tensor,
  weights: tf.Tensor,
  huber_delta: Optional[float] = None,
) -> Tuple[tf.Tensor, tf.Tensor, Dict[str, tf.Tensor]]:
  """The TD loss of a batch of transitions.

  Args:
    q: [B, A] online Q(s, .) (carries the gradient).
    action: int32 [B] the actions taken.
    target: [B] targets y (no gradient).
    weights: [B] importance weights.
    huber_delta: None for the squared error, else the Huber threshold d.

  Returns:
    loss: scalar.
    td_error: [B] delta = y - Q(s, a) (for priorities).
    metrics: 'loss/td' and 'loss/total' (the loss), 'q/mean',
      'q/target_mean', 'q/td_error' (mean |delta|),
      'replay/importance_weight_mean'.
  """
  num_actions = q.shape[-1]
  q_taken = tf.reduce_sum(
    q * tf.one_hot(action, num_actions, dtype=q.dtype), axis=-1
  )
  td_error = target - q_taken
  abs_td = tf.abs(td_error)
  if huber_delta is not None:
    quadratic = tf.minimum(abs_td, huber_delta)
    per_item = 0.5 * quadratic**2 + huber_delta * (abs_td - quadratic)
  else:
    per_item = 0.5 * td_error**2
  loss = tf.reduce_mean(weights * per_item)
  metrics = {
    "loss/td": loss,
    "loss/total": loss,
    "q/mean": tf.reduce_mean(q_taken),
    "q/target_mean": tf.reduce_mean(target),
    "q/td_error": tf.reduce_mean(abs_td),
    "replay/importance_weight_mean": tf.reduce_mean(weights),
  }
  return loss, td_error, metrics
