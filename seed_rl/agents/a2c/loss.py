"""A2C loss: n-step (or GAE) advantages, policy gradient, value regression,
entropy bonus (Mnih et al. 2016, arXiv 1602.01783, Algorithm S3, in the
synchronous batched form of OpenAI Baselines' A2C; for-ai/rl's VPG and
drlbox's A3C loss are the same three terms).

Shapes are time-major: T transitions per unroll, B unrolls. Index t is the
transition x_t -a_t-> x_{t+1}; its reward and episode-end flags are the
Unroll's fields at step t+1 (they describe the transition INTO a step), so
the caller passes reward[1:], terminated[1:], truncated[1:] and
bootstrap_value[1:].

  Returns.  R_t = r_t + gamma R_{t+1}, cut at episode ends:
              R_t = r_t                        if the episode terminated at
                                               x_{t+1} (nothing follows);
              R_t = r_t + gamma V_boot         if it was truncated there (a
                                               time limit: V_boot is the
                                               behaviour value of the ended
                                               episode's final observation);
              R_{T-1} = r_{T-1} + gamma V(x_T) at the unroll end.
            That is A3C's forward view: step t gets the (T-t)-step return
            to the unroll end. With gae_lambda < 1 the returns are GAE's
            lambda-returns instead; lambda = 1 gives exactly the n-step
            returns above. Both come from agents/gae.py's backward recursion
            A_t = delta_t + lambda gamma_t mask_t A_{t+1}, R_t = A_t + V(x_t).
  Policy.   L_pi = -mean_t,b log pi(a_t|x_t) A_t, A_t = R_t - V(x_t)
            (no gradient through A_t: it is the baseline-subtracted return).
  Value.    L_V = value_cost * 0.5 * mean_t,b (V(x_t) - R_t)^2
            (no gradient through R_t).
  Entropy.  L_H = -entropy_cost * mean_t,b H[pi(.|x_t)].
  Total.    L = L_pi + L_V + L_H.

No importance weights: A2C is on-policy. Actors act a learner step or two
behind the weights being trained (perf/policy_lag), a staleness A3C's
asynchronous workers have too and ignore; A2CConfig.queue_capacity keeps it
small, and the vtrace agent corrects for it when it is not.
"""

from __future__ import annotations

from typing import Dict, Tuple

import tensorflow as tf

from seed_rl.agents import learning
from seed_rl.agents import multi_device
from seed_rl.agents import gae as gae_lib
from seed_rl.agents import distributions


def a2c_loss(  # noqa: PLR0913 (tensors and weights by keyword, as the equations)
  distribution: distributions.ActionDistribution,
  policy_params: tf.Tensor,
  values: tf.Tensor,
  raw_action: tf.Tensor,
  rewards: tf.Tensor,
  terminated: tf.Tensor,
  truncated: tf.Tensor,
  bootstrap_value: tf.Tensor,
  discount: float,
  gae_lambda: float = 1.0,
  entropy_cost: float = 0.01,
  value_cost: float = 0.5,
  normalize_advantages: bool = False,
) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
  """The A2C loss over a time-major batch of unrolls.

  Kept in one piece: returns, the three terms and their metrics read top to
  bottom as the module docstring's equations.

  Args:
    distribution: the policy family of `policy_params`.
    policy_params: [T+1, B, P] current policy parameters at x_0..x_T (step
      T's are unused; passing all T+1 keeps one forward pass).
    values: [T+1, B] current V(x_0)..V(x_T); V(x_T) only bootstraps.
    raw_action: [T, B, ...] a_t the behaviour policy took at x_t (the raw,
      unclipped sample for Gaussians).
    rewards: [T, B] (already clipped) r_t of the transition x_t -> x_{t+1}.
    terminated, truncated: bool [T, B] the transition into x_{t+1} ended the
      episode by termination / by a time limit.
    bootstrap_value: [T, B] where truncated, the value of the ended
      episode's final observation (ignored elsewhere).
    discount: gamma.
    gae_lambda: lambda of the returns (1: n-step returns).
    entropy_cost, value_cost: weights of the entropy bonus and value loss.
    normalize_advantages: standardise A_t over the batch (policy term only).

  Returns:
    total: scalar loss.
    metrics: 'loss/{total,policy,value,entropy}' (weighted terms),
      'policy/entropy', 'value/mean', 'value/target_mean',
      'value/explained_variance', 'advantage/mean', 'advantage/std'.
  """
  values = tf.convert_to_tensor(values, tf.float32)
  advantages, returns = gae_lib.unroll_gae(
    tf.stop_gradient(values),
    rewards,
    terminated,
    truncated,
    bootstrap_value,
    discount,
    gae_lambda,
  )
  params_t = policy_params[:-1]
  log_prob = distribution.log_prob(params_t, raw_action)
  policy_advantages = advantages
  if normalize_advantages:
    # Over the whole batch, also when it is split over training devices.
    mean, variance = multi_device.moments(advantages)
    policy_advantages = (advantages - mean) / (tf.sqrt(variance) + 1e-8)
  policy_loss = -tf.reduce_mean(log_prob * tf.stop_gradient(policy_advantages))
  values_t = values[:-1]
  value_loss = value_cost * 0.5 * tf.reduce_mean(tf.square(values_t - returns))
  entropy = tf.reduce_mean(distribution.entropy(params_t))
  total, metrics = learning.actor_critic_total(
    policy_loss, value_loss, entropy, entropy_cost
  )
  metrics.update(learning.value_metrics(values_t, returns, advantages))
  return total, metrics
