"""n-step double-Q targets, honouring termination vs truncation.

Unroll convention (seed_rl.common.agent_api.Unroll, time-major here): step t
holds observation o_t, the action a_t taken on it, and the reward r_t and
episode-end flags of the transition INTO step t. So the n-step transition
starting at step t collects r_{t+1}, ..., r_{t+n} and bootstraps from
o_{t+n}, unless the episode ends at some step t+j, j <= n:
  terminated[t+j]: the return stops there, no bootstrap;
  truncated[t+j]: the return stops there and bootstraps from the ended
    episode's final observation. That observation is not in the unroll
    (o_{t+j} is already the next episode's first), so we use
    bootstrap_value[t+j], the behaviour network's max_a Q of it recorded at
    acting time, in return units. It is slightly stale (behaviour weights,
    online rather than target network), an accepted approximation since
    truncations are rare; the alternative, bootstrapping from o_{t+j}, would
    be wrong (another episode).

Two forms:
  `nstep_transitions` (NumPy, used when filling replay): per start step the
    discounted return (with any truncation bootstrap folded in), the discount
    gamma^n applied to the network bootstrap (0 when the episode ended), and
    the step index of the bootstrap observation.
  `transition_targets` (TF) turns those into double-Q targets on a batch;
  `n_step_double_q_targets` (TF) does both on [T+1, B] tensors.

With value rescaling (Pohlen et al. 2018) the networks predict h(Q), so
target = h(R + gamma^n h^-1(Q_target(s', argmax_a Q_online(s', a)))).
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import tensorflow as tf

from seed_rl.common import value_rescaling


def _check_time_major(name: str, array, shape) -> None:
  if tuple(array.shape) != tuple(shape):
    raise ValueError(
      f"{name}: shape {list(array.shape)}, expected "
      f"{list(shape)} (time-major [T+1, B])"
    )


def nstep_transitions(
  reward: np.ndarray,
  terminated: np.ndarray,
  truncated: np.ndarray,
  bootstrap_value: np.ndarray,
  discount: float,
  n_step: int,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """n-step returns for start steps 0..S-1, S = T+1-n_step.

  Args:
    reward, terminated, truncated, bootstrap_value: [T+1, B] per the Unroll
      convention (time-major).
    discount: gamma in [0, 1].
    n_step: n >= 1; needs T+1 > n.

  Returns:
    returns: float32 [S, B] sum_{k<m} gamma^k r_{t+k+1}, plus
      gamma^m bootstrap_value[t+m] if the episode was truncated at t+m.
    bootstrap_discount: float32 [S, B] gamma^n when the network should
      bootstrap from the observation at `bootstrap_index`, else 0.
    bootstrap_index: int64 [S, B] step whose observation to bootstrap from
      (t+n, or the step where the episode ended; unused when the discount
      is 0).
  """
  if n_step < 1:
    raise ValueError(f"n_step must be >= 1, got {n_step}")
  if not 0.0 <= discount <= 1.0:
    raise ValueError(f"discount must lie in [0, 1], got {discount}")
  reward = np.asarray(reward, np.float64)
  if reward.ndim != 2:
    raise ValueError(f"reward: expected [T+1, B], got {list(reward.shape)}")
  for name, array in (
    ("terminated", terminated),
    ("truncated", truncated),
    ("bootstrap_value", bootstrap_value),
  ):
    _check_time_major(name, np.asarray(array), reward.shape)
  steps, batch = reward.shape
  num_starts = steps - n_step
  if num_starts < 1:
    raise ValueError(
      f"an unroll of {steps} steps holds no {n_step}-step "
      "transition; unroll_length must be >= n_step"
    )
  terminated = np.asarray(terminated, bool)
  truncated = np.asarray(truncated, bool)
  bootstrap_value = np.asarray(bootstrap_value, np.float64)
  returns = np.zeros((num_starts, batch))
  alive = np.ones((num_starts, batch), bool)
  index = np.zeros((num_starts, batch), np.int64)
  starts = np.arange(num_starts)[:, None]
  for j in range(1, n_step + 1):
    step = slice(j, j + num_starts)
    scale = discount ** (j - 1)
    returns += np.where(alive, scale * reward[step], 0.0)
    ended_here = alive & (terminated[step] | truncated[step])
    returns += np.where(
      alive & truncated[step], discount * scale * bootstrap_value[step], 0.0
    )
    index = np.where(ended_here, starts + j, index)
    alive &= ~ended_here
  index = np.where(alive, starts + n_step, index)
  bootstrap_discount = np.where(alive, discount**n_step, 0.0)
  return (
    returns.astype(np.float32),
    bootstrap_discount.astype(np.float32),
    index,
  )


def double_q_bootstrap(
  online_q_next: tf.Tensor, target_q_next: tf.Tensor, double_q: bool = True
) -> tf.Tensor:
  """Q_target(s', argmax_a Q_online(s', a)) (van Hasselt et al. 2016), or
  max_a Q_target(s', a) when not double. [..., A] -> [...]."""
  if not double_q:
    return tf.reduce_max(target_q_next, axis=-1)
  greedy = tf.argmax(online_q_next, axis=-1, output_type=tf.int32)
  num_actions = tf.shape(target_q_next)[-1]
  return tf.reduce_sum(
    tf.one_hot(greedy, num_actions, dtype=target_q_next.dtype) * target_q_next,
    axis=-1,
  )


def transition_targets(
  returns: tf.Tensor,
  bootstrap_discount: tf.Tensor,
  online_q_next: tf.Tensor,
  target_q_next: tf.Tensor,
  double_q: bool = True,
  rescale: bool = False,
  eps: float = value_rescaling.DEFAULT_EPSILON,
) -> tf.Tensor:
  """Targets [...] for transitions [...] with next-state Q values [..., A].

  Q values are in the network's space (h(Q) when `rescale`); returns are raw.
  """
  bootstrap = double_q_bootstrap(online_q_next, target_q_next, double_q)
  if rescale:
    bootstrap = value_rescaling.h_inv(bootstrap, eps)
  target = returns + bootstrap_discount * bootstrap
  if rescale:
    target = value_rescaling.h(target, eps)
  return tf.stop_gradient(target)


def n_step_double_q_targets(
  reward: tf.Tensor,
  terminated: tf.Tensor,
  truncated: tf.Tensor,
  bootstrap_value: tf.Tensor,
  online_q: tf.Tensor,
  target_q: tf.Tensor,
  discount: float,
  n_step: int,
  double_q: bool = True,
  rescale: bool = False,
  eps: float = value_rescaling.DEFAULT_EPSILON,
) -> tf.Tensor:
  """Targets [S, B], S = T+1-n, for steps 0..S-1 of time-major unrolls.

  Args:
    reward, terminated, truncated, bootstrap_value: [T+1, B] (Unroll
      convention; bootstrap_value in return units).
    online_q, target_q: [T+1, B, A] Q of every step's observation by the
      online and target networks (h(Q) when `rescale`).
  """
  if n_step < 1:
    raise ValueError(f"n_step must be >= 1, got {n_step}")
  steps = reward.shape[0]
  num_starts = steps - n_step
  if num_starts < 1:
    raise ValueError(
      f"an unroll of {steps} steps holds no {n_step}-step "
      "transition; unroll_length must be >= n_step"
    )
  reward = tf.cast(reward, tf.float32)
  ended = tf.logical_or(terminated, truncated)
  truncated_f = tf.cast(truncated, tf.float32)
  bootstrap_value = tf.cast(bootstrap_value, tf.float32)
  step_bootstrap = double_q_bootstrap(online_q, target_q, double_q)  # [T+1, B]
  if rescale:
    step_bootstrap = value_rescaling.h_inv(step_bootstrap, eps)
  alive = tf.ones_like(reward[:num_starts])
  returns = tf.zeros_like(reward[:num_starts])
  for j in range(1, n_step + 1):
    window = slice(j, j + num_starts)
    scale = discount ** (j - 1)
    returns += alive * scale * reward[window]
    returns += (
      alive * truncated_f[window] * discount * scale * (bootstrap_value[window])
    )
    alive *= 1.0 - tf.cast(ended[window], tf.float32)
  target = returns + alive * discount**n_step * step_bootstrap[n_step:]
  if rescale:
    target = value_rescaling.h(target, eps)
  return tf.stop_gradient(target)
