"""R2D2's sequence loss: burn-in, n-step double-Q TD errors, priorities.

Both networks start from the recurrent state stored with the sequence and
replay the first `burn_in` steps to refresh it (the "stored state + burn-in"
strategy of Kapturowski et al. 2019, Sec. 3). The online state after burn-in
passes through tf.stop_gradient and no loss term touches a burn-in step, so
no gradient reaches the burn-in inputs, the stored state, or the parameters
through the burn-in computation.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Tuple

import tensorflow as tf

from seed_rl.agents.r2d2 import targets as targets_lib
from seed_rl.agents import q_learning
from seed_rl.agents.r2d2.networks import R2D2Network, State


class Sequences(NamedTuple):
  """A time-major training batch of sequences of T + 1 steps.

  observation: [T+1, B, *obs]; prev_action, action: int [T+1, B];
  reward, bootstrap_value: float32 [T+1, B]; terminated, truncated: bool
  [T+1, B]; core_state: (h, c) float32 [B, units] before step 0.
  """

  observation: tf.Tensor
  prev_action: tf.Tensor
  action: tf.Tensor
  reward: tf.Tensor
  terminated: tf.Tensor
  truncated: tf.Tensor
  bootstrap_value: tf.Tensor
  core_state: State


def _slice(
  seq: Sequences, start: int, stop=None
) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
  """(observation, prev_action, reward, done)[start:stop]: `unroll`'s inputs."""
  done = tf.logical_or(seq.terminated, seq.truncated)
  return (
    seq.observation[start:stop],
    seq.prev_action[start:stop],
    seq.reward[start:stop],
    done[start:stop],
  )


def r2d2_loss(
  online: R2D2Network,
  target: R2D2Network,
  seq: Sequences,
  importance_weights: tf.Tensor,
  *,
  burn_in: int,
  n_step: int,
  discount: float,
  eta: float,
  rescaling_epsilon: float,
) -> Tuple[tf.Tensor, tf.Tensor, Dict[str, tf.Tensor]]:
  """The importance-weighted n-step double-Q loss of a batch of sequences.

  Kept in one piece: burn-in, unroll, targets, TD errors and priorities are
  one pass over the sequence, read top to bottom.

  Learning steps are t in [burn_in, T - n_step]; each sequence's loss is
  0.5 * sum_t delta_t^2 over them (SEED RL's r2d2 learner sums over time),
  weighted by its importance weight and averaged over the batch.

  Args:
    online, target: the online and target networks.
    seq: the batch, time-major.
    importance_weights: float32 [B] prioritized-replay corrections.
    burn_in, n_step, discount, eta, rescaling_epsilon: see R2D2Config.

  Returns:
    loss: scalar to minimize (gradients flow to the online network only).
    priorities: float32 [B] eta * max|delta| + (1 - eta) * mean|delta|.
    metrics: scalars 'q/mean' (mean Q of the taken actions),
      'q/target_mean' and 'q/td_error' (mean |TD error|).
  """
  online_state = target_state = seq.core_state
  if burn_in > 0:
    prefix = _slice(seq, 0, burn_in)
    _, online_state = online.unroll(*prefix, online_state)
    online_state = tf.nest.map_structure(tf.stop_gradient, online_state)
    _, target_state = target.unroll(*prefix, target_state)
  suffix = _slice(seq, burn_in)
  # Both [L + n, B, A] with L learning steps followed by n bootstrap steps.
  q_online, _ = online.unroll(*suffix, online_state)
  q_target, _ = target.unroll(*suffix, target_state)
  next_value = q_learning.double_q_values(
    tf.stop_gradient(q_online), tf.stop_gradient(q_target)
  )
  y = tf.stop_gradient(
    targets_lib.n_step_targets(
      seq.reward[burn_in:],
      seq.terminated[burn_in:],
      seq.truncated[burn_in:],
      seq.bootstrap_value[burn_in:],
      next_value,
      discount,
      n_step,
      rescaling_epsilon,
    )
  )
  num_learning = tf.shape(y)[0]
  actions = tf.cast(seq.action[burn_in:], tf.int32)[:num_learning]
  q_taken = tf.gather(q_online[:num_learning], actions, axis=-1, batch_dims=2)
  td = y - q_taken  # [L, B]
  priorities = targets_lib.sequence_priorities(tf.abs(td), eta)
  per_sequence = 0.5 * tf.reduce_sum(tf.square(td), axis=0)
  loss = tf.reduce_mean(importance_weights * per_sequence)
  metrics = {
    "q/mean": tf.reduce_mean(q_taken),
    "q/target_mean": tf.reduce_mean(y),
    "q/td_error": tf.reduce_mean(tf.abs(td)),
  }
  return loss, priorities, metrics
