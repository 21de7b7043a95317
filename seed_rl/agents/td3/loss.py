"""TD3 objectives (Fujimoto et al. 2018, arXiv 1802.09477); DDPG as the
special case without twin critics and target smoothing.

Shapes: B transitions, A action dimensions. Actions a live in [-1, 1]^A
(the agent maps them to the action Box), so noise scales are in units of
half the action range.

  exploration (acting): a = clip(mu(s) + sigma * eps, -1, 1), eps ~ N(0, I)
  target smoothing (eq. 14-15):
      a' = clip(mu'(s') + clip(sigma~ * eps, -c, c), -1, 1)
  clipped double Q (eq. 10):
      y = R + d * min(Q'_1(s', a'), Q'_2(s', a'))
      (DDPG: y = R + d * Q'_1(s', mu'(s')))
      R is the (n-step) return and d = gamma^n, or 0 where the episode
      ended; a truncated episode's bootstrap is already in R.
  critics:  J_Q = sum_j mean (Q_j(s, a) - y)^2   (the authors' code: MSE)
  actor:    J_mu = -mean Q_1(s, mu(s))  (deterministic policy gradient),
            every `policy_delay` critic updates, with the targets' Polyak
            averaging (section 5.2).
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf


def exploration_action(
  action: tf.Tensor, noise: tf.Tensor, exploration_noise: float
) -> tf.Tensor:
  """clip(mu(s) + exploration_noise * noise, -1, 1) [B, A]; noise ~ N(0, I)."""
  return tf.clip_by_value(action + exploration_noise * noise, -1.0, 1.0)


def smoothed_target_action(
  next_action: tf.Tensor,
  noise: tf.Tensor,
  policy_noise: float,
  noise_clip: float,
) -> tf.Tensor:
  """Target policy smoothing: a' [B, A] from mu'(s') [B, A].

  a' = clip(mu'(s') + clip(policy_noise * noise, -noise_clip, noise_clip),
  -1, 1) with noise [B, A] ~ N(0, I); policy_noise = 0 returns mu'(s').
  """
  if policy_noise == 0:
    return next_action
  smoothing = tf.clip_by_value(policy_noise * noise, -noise_clip, noise_clip)
  return tf.clip_by_value(next_action + smoothing, -1.0, 1.0)


def td3_target(
  returns: tf.Tensor,
  discount: tf.Tensor,
  next_q1: tf.Tensor,
  next_q2: Optional[tf.Tensor] = None,
) -> tf.Tensor:
  """y [B] = R + d * min(Q'_1, Q'_2)(s', a'), or R + d * Q'_1 without twins.

  Args:
    returns: [B] R, the (n-step) return, with any truncation bootstrap in it.
    discount: [B] d = gamma^n, or 0 where the episode ended.
    next_q1, next_q2: [B] target critics at (s', a'); next_q2 None for a
      single critic.
  """
  next_q = next_q1 if next_q2 is None else tf.minimum(next_q1, next_q2)
  return tf.stop_gradient(returns + discount * next_q)


def critic_loss(
  q1: tf.Tensor, target: tf.Tensor, q2: Optional[tf.Tensor] = None
) -> tf.Tensor:
  """Scalar sum over the critics of mean (Q_j(s, a) - y)^2; q's [B]."""
  target = tf.stop_gradient(target)
  loss = tf.reduce_mean(tf.square(q1 - target))
  if q2 is not None:
    loss += tf.reduce_mean(tf.square(q2 - target))
  return loss


def actor_loss(q1: tf.Tensor) -> tf.Tensor:
  """Scalar -mean Q_1(s, mu(s)); q1 [B] (the gradient flows through the
  action into the actor)."""
  return -tf.reduce_mean(q1)
