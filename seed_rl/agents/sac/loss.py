"""Soft Actor-Critic objectives (Haarnoja et al. 2018, arXiv 1812.05905).

Shapes: B transitions, A action dimensions. Actions a live in [-1, 1]^A
(the agent maps them to the action Box); u is the Gaussian sample before the
squash, a = tanh(u).

  policy:   u = mean(s) + std(s) * eps, eps ~ N(0, I);  a = tanh(u)
            log pi(a|s) = sum_i [log N(u_i; mean_i, std_i)
                                 - log(1 - tanh(u_i)^2)]      (appendix C)
            with log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)),
            finite where tanh(u) rounds to +-1.
  critic:   y = R + d * (min_j Q'_j(s', a') - alpha log pi(a'|s')),
            a' ~ pi(.|s'), Q'_j the target critics               (eq. 2-3)
            J_Q = sum_j mean 1/2 (Q_j(s, a) - y)^2                  (eq. 5)
            R is the (n-step) return and d = gamma^n, or 0 where the episode
            ended; a truncated episode's bootstrap is already in R.
  actor:    J_pi = mean(alpha log pi(a|s) - min_j Q_j(s, a)), a ~ pi(.|s)
            reparameterised (eq. 7, 11; the min as in the authors' code)
  alpha:    J(alpha) = mean(-log alpha * (log pi(a|s) + target_entropy))
            (eq. 18, written on log alpha as the authors' softlearning and
            SB3 do: alpha stays positive and the step is scale-free).
"""

from __future__ import annotations

import math
from typing import Tuple

import tensorflow as tf

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def log_one_minus_tanh_squared(u: tf.Tensor) -> tf.Tensor:
  """log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), elementwise."""
  return 2.0 * (math.log(2.0) - u - tf.nn.softplus(-2.0 * u))


def squashed_log_prob(
  mean: tf.Tensor, log_std: tf.Tensor, u: tf.Tensor
) -> tf.Tensor:
  """log pi(tanh(u) | s) [B] of the pre-squash sample u [B, A].

  The Gaussian density of u, minus the log |det| of a = tanh(u)
  (change of variables), summed over action dimensions.
  """
  z = (u - mean) * tf.exp(-log_std)
  gaussian = -0.5 * tf.square(z) - log_std - _HALF_LOG_2PI
  return tf.reduce_sum(gaussian - log_one_minus_tanh_squared(u), axis=-1)


def sample_action(
  mean: tf.Tensor, log_std: tf.Tensor, noise: tf.Tensor
) -> Tuple[tf.Tensor, tf.Tensor]:
  """Reparameterised sample: noise [B, A] ~ N(0, I) -> a [B, A], log pi [B].

  Differentiable in mean and log_std (the actor loss needs that).
  """
  u = mean + tf.exp(log_std) * noise
  return tf.tanh(u), squashed_log_prob(mean, log_std, u)


def soft_q_target(
  returns: tf.Tensor,
  discount: tf.Tensor,
  next_q1: tf.Tensor,
  next_q2: tf.Tensor,
  next_log_prob: tf.Tensor,
  alpha: tf.Tensor,
) -> tf.Tensor:
  """y [B] = R + d * (min(Q'_1, Q'_2)(s', a') - alpha log pi(a'|s')).

  Args:
    returns: [B] R, the (n-step) return, with any truncation bootstrap in it.
    discount: [B] d = gamma^n, or 0 where the episode ended (terminated or
      truncated) within the n steps.
    next_q1, next_q2: [B] target critics at (s', a'), a' ~ pi(.|s').
    next_log_prob: [B] log pi(a'|s').
    alpha: the temperature (scalar).
  """
  soft_value = tf.minimum(next_q1, next_q2) - alpha * next_log_prob
  return tf.stop_gradient(returns + discount * soft_value)


def critic_loss(q1: tf.Tensor, q2: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
  """Scalar sum over both critics of mean 1/2 (Q_j(s, a) - y)^2; q's [B]."""
  target = tf.stop_gradient(target)
  return 0.5 * tf.reduce_mean(tf.square(q1 - target)) + 0.5 * tf.reduce_mean(
    tf.square(q2 - target)
  )


def policy_loss(
  q1: tf.Tensor, q2: tf.Tensor, log_prob: tf.Tensor, alpha: tf.Tensor
) -> tf.Tensor:
  """Scalar mean(alpha log pi(a|s) - min(Q_1, Q_2)(s, a)), a ~ pi(.|s);
  q's and log_prob [B]. alpha is a constant here."""
  alpha = tf.stop_gradient(alpha)
  return tf.reduce_mean(alpha * log_prob - tf.minimum(q1, q2))


def temperature_loss(
  log_alpha: tf.Tensor, log_prob: tf.Tensor, target_entropy: float
) -> tf.Tensor:
  """Scalar mean(-log alpha * (log pi(a|s) + target_entropy)); log_prob [B].

  Its gradient in log alpha is entropy - target_entropy (estimated as
  -log pi): alpha falls while the policy is more random than the target and
  rises once it is less.
  """
  log_prob = tf.stop_gradient(log_prob)
  return -tf.reduce_mean(log_alpha * (log_prob + target_entropy))
