"""IMPALA loss: V-trace policy gradient + baseline regression + entropy bonus.

Inputs are time-major over a whole unroll of T+1 steps ([T+1, B]); step t's
per-step fields follow the Unroll convention (reward/terminated/truncated
describe the transition INTO step t). Steps 0..T-1 are trained on; step T only
supplies the bootstrap value.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import tensorflow as tf

from seed_rl.agents import learning
from seed_rl.agents.advantages import normalize_advantages
from seed_rl.agents.episode_ends import transition_inputs
from seed_rl.agents.vtrace import vtrace

__all__ = [
  "MINIBATCH_UNITS",
  "POLICY_LOSSES",
  "TARGETS",
  "impala_loss",
  "round_targets",
  "transition_loss",
]

# 'pg': IMPALA's policy gradient, rho-weighted advantages times grad log pi.
# 'clip': PPO's clipped surrogate (eq. 7) of the ratio pi_theta / mu on the
#   unweighted V-trace advantage, as IMPACT (Luo et al. 2020) and Sample
#   Factory's APPO do: a trust region for reusing unrolls over epochs.
POLICY_LOSSES = ("pg", "clip")

# 'update': V-trace targets and advantages from each update's own forward
#   pass (IMPALA; IMPACT with epochs), so later epochs of a round chase
#   values that have already moved towards them.
# 'round': computed once per round with the weights before its first update
#   and held fixed over its epochs and minibatches, as PPO holds its GAE
#   advantages and returns (needs policy_loss 'clip': the importance weights
#   are those of the round's start).
TARGETS = ("update", "round")

# What a round's minibatches are drawn as: 'unroll', whole unrolls (each
#   update computes its own V-trace recursion over them); 'transition',
#   single steps from all of the round's unrolls, as PPO draws them (targets
#   'round' only: the recursion has run once, over the whole round).
MINIBATCH_UNITS = ("unroll", "transition")


def round_targets(  # noqa: PLR0913 (the targets' inputs, by keyword)
  distribution,
  policy_params: tf.Tensor,
  baseline: tf.Tensor,
  action: tf.Tensor,
  behaviour_params: tf.Tensor,
  reward: tf.Tensor,
  terminated: tf.Tensor,
  truncated: tf.Tensor,
  bootstrap_value: tf.Tensor,
  *,
  discount: float,
  clip_rho_threshold: float = 1.0,
  clip_c_threshold: float = 1.0,
  clip_pg_rho_threshold: float = 1.0,
  trace_lambda: float = 1.0,
  advantage: str = "vtrace",
) -> Tuple[tf.Tensor, tf.Tensor]:
  """V-trace targets v_s and the unweighted advantages r_s + gamma v_{s+1}
  - V(x_s) (or with advantage 'lambda' v_s - V(x_s)), both [T, B], of one
  round's unrolls under the given (round start) policy and values:
  impala_loss's targets with policy_loss 'clip', to hold fixed over the
  round (targets 'round'). Same inputs as impala_loss."""
  action_t = action[:-1]
  log_rhos = distribution.log_prob(policy_params[:-1], action_t) - (
    distribution.log_prob(
      tf.cast(behaviour_params[:-1], policy_params.dtype), action_t
    )
  )
  discounts, next_values, trace_mask = transition_inputs(
    baseline, terminated, truncated, bootstrap_value, discount
  )
  return vtrace.vtrace_targets(
    log_rhos=tf.cast(log_rhos, tf.float32),
    discounts=discounts,
    rewards=tf.cast(reward[1:], tf.float32),
    values=tf.cast(baseline[:-1], tf.float32),
    next_values=next_values,
    trace_mask=trace_mask,
    clip_rho_threshold=clip_rho_threshold,
    clip_c_threshold=clip_c_threshold,
    clip_pg_rho_threshold=clip_pg_rho_threshold,
    weight_pg_advantages=False,
    trace_lambda=trace_lambda,
    advantage=advantage,
  )


def impala_loss(  # noqa: PLR0913 (tensors and weights by keyword, as the equations)
  distribution,
  policy_params: tf.Tensor,
  baseline: tf.Tensor,
  action: tf.Tensor,
  behaviour_params: tf.Tensor,
  reward: tf.Tensor,
  terminated: tf.Tensor,
  truncated: tf.Tensor,
  bootstrap_value: tf.Tensor,
  *,
  discount: float,
  value_cost: float,
  entropy_cost: float,
  clip_rho_threshold: float = 1.0,
  clip_c_threshold: float = 1.0,
  clip_pg_rho_threshold: float = 1.0,
  normalize_advantage: bool = False,
  policy_loss: str = "pg",
  clip_ratio: float = 0.1,
  trace_lambda: float = 1.0,
  advantage: str = "vtrace",
  proximal_params: Optional[tf.Tensor] = None,
  fixed_targets: Optional[Tuple[tf.Tensor, tf.Tensor]] = None,
) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
  """Computes the IMPALA loss over one batch of unrolls.

  Kept in one piece: importance weights, V-trace targets and the three loss
  terms read top to bottom in the paper's order (section 4.2).

  Args:
    distribution: object with `log_prob(params, action)` and `entropy(params)`
      (an ActionDistribution of seed_rl.agents.distributions).
    policy_params: [T+1, B, P] current policy parameters (e.g. logits).
    baseline: [T+1, B] current value estimates.
    action: [T+1, B, ...] actions taken at each step.
    behaviour_params: [T+1, B, P] parameters the behaviour policy acted with.
    reward: [T+1, B] rewards (already clipped) of the transition into step t.
    terminated, truncated: bool [T+1, B].
    bootstrap_value: [T+1, B].
    discount: gamma in (0, 1].
    value_cost: weight of the value loss 0.5 * mean (vs - V)^2.
    entropy_cost: weight of the entropy bonus.
    clip_rho_threshold, clip_c_threshold, clip_pg_rho_threshold: V-trace clips.
    normalize_advantage: standardise the policy-gradient advantages
      rho_s (r_s + gamma v_{s+1} - V(x_s)) over the [T, B] batch (zero mean,
      unit std) before the policy loss; 'advantage/std' reports them raw.
    policy_loss: 'pg' (IMPALA: -mean(log pi(a_s) rho_s A_s)) or 'clip'
      (-mean(min(r_s A_s, clip(r_s, 1 - eps, 1 + eps) A_s)) with
      ratio r_s = pi_theta(a_s) / mu(a_s) carrying the gradient and
      A_s = reward_s + gamma v_{s+1} - V(x_s) without the importance
      weight).
    clip_ratio: eps of 'clip'.
    trace_lambda: lambda of the trace coefficients c_i = lambda min(c_bar,
      rho_i) (1: the paper's V-trace).
    advantage: 'vtrace' (A_s above) or 'lambda' (A_s = v_s - V(x_s),
      on-policy GAE(lambda); policy_loss 'clip' only).
    proximal_params: None, or [T+1, B, P] the policy's parameters at the
      start of the round: 'clip' is then the decoupled surrogate
      (learning.decoupled_clipped_surrogate) of r_s = pi_theta / pi_prox,
      weighted by min(pi_prox / mu, clip_pg_rho_threshold), so a learner
      whose data lag behind can still move clip_ratio per round.
    fixed_targets: None, or (v_s, A_s) [T, B] from `round_targets` at the
      round's start, used instead of this update's own (policy_loss 'clip'
      only).

  Returns:
    total loss (scalar) and a dict of scalar metrics (docs/METRICS.md);
    'loss/total' is the sum of 'loss/policy', 'loss/value' and
    'loss/entropy' (weighted terms).
  """
  params_t = policy_params[:-1]
  action_t = action[:-1]
  target_log_prob = distribution.log_prob(params_t, action_t)
  behaviour_log_prob = distribution.log_prob(
    tf.cast(behaviour_params[:-1], params_t.dtype), action_t
  )
  log_rhos = tf.stop_gradient(target_log_prob) - behaviour_log_prob

  discounts, next_values, trace_mask = transition_inputs(
    tf.stop_gradient(baseline), terminated, truncated, bootstrap_value, discount
  )
  values = baseline[:-1]
  if policy_loss not in POLICY_LOSSES:
    raise ValueError(
      f"impala_loss: policy_loss {policy_loss!r} is unknown; allowed: "
      f"{', '.join(POLICY_LOSSES)}"
    )
  clipped = policy_loss == "clip"
  if proximal_params is not None and not clipped:
    raise ValueError(
      "impala_loss: proximal_params anchor the clipped surrogate; "
      f"policy_loss {policy_loss!r} has none (allowed with them: 'clip')"
    )
  if fixed_targets is not None and not clipped:
    raise ValueError(
      "impala_loss: fixed_targets hold unweighted advantages; policy_loss "
      f"{policy_loss!r} weights them by this update's rhos (allowed with "
      "them: 'clip')"
    )
  vs, pg_advantages = fixed_targets or vtrace.vtrace_targets(
    log_rhos=log_rhos,
    discounts=discounts,
    rewards=tf.cast(reward[1:], tf.float32),
    values=tf.stop_gradient(values),
    next_values=next_values,
    trace_mask=trace_mask,
    clip_rho_threshold=clip_rho_threshold,
    clip_c_threshold=clip_c_threshold,
    clip_pg_rho_threshold=clip_pg_rho_threshold,
    weight_pg_advantages=not clipped,
    trace_lambda=trace_lambda,
    advantage=advantage,
  )

  return _loss_terms(
    distribution,
    params_t,
    values,
    action_t,
    target_log_prob,
    behaviour_log_prob,
    vs,
    pg_advantages,
    value_cost=value_cost,
    entropy_cost=entropy_cost,
    clip_rho_threshold=clip_rho_threshold,
    clip_pg_rho_threshold=clip_pg_rho_threshold,
    normalize_advantage=normalize_advantage,
    clipped=clipped,
    clip_ratio=clip_ratio,
    proximal_params=None if proximal_params is None else proximal_params[:-1],
  )


def transition_loss(  # noqa: PLR0913 (tensors and weights by keyword)
  distribution,
  policy_params: tf.Tensor,
  values: tf.Tensor,
  action: tf.Tensor,
  behaviour_params: tf.Tensor,
  vs: tf.Tensor,
  advantages: tf.Tensor,
  *,
  value_cost: float,
  entropy_cost: float,
  clip_rho_threshold: float = 1.0,
  clip_pg_rho_threshold: float = 1.0,
  normalize_advantage: bool = False,
  clip_ratio: float = 0.1,
  proximal_params: Optional[tf.Tensor] = None,
  old_values: Optional[tf.Tensor] = None,
  value_clip: Optional[float] = None,
) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
  """impala_loss with policy_loss 'clip' and the round's fixed targets over
  N transitions drawn from any steps of any unrolls (minibatch_unit
  'transition'): the targets need whole unrolls, the loss on them does not.

  Args:
    policy_params: [N, P] current policy parameters; values: [N] current V.
    action: [N, ...]; behaviour_params: [N, P] the policy that acted.
    vs, advantages: [N] `round_targets`' v_s and unweighted advantages.
    proximal_params: None or [N, P] the round's starting policy.
    old_values: [N] the round's starting values, with value_clip.
    value_clip: None, or PPO's clip of the value change from old_values
      (learning.value_loss).
    The weights as impala_loss's.
  """
  target_log_prob = distribution.log_prob(policy_params, action)
  behaviour_log_prob = distribution.log_prob(
    tf.cast(behaviour_params, policy_params.dtype), action
  )
  return _loss_terms(
    distribution,
    policy_params,
    values,
    action,
    target_log_prob,
    behaviour_log_prob,
    vs,
    advantages,
    value_cost=value_cost,
    entropy_cost=entropy_cost,
    clip_rho_threshold=clip_rho_threshold,
    clip_pg_rho_threshold=clip_pg_rho_threshold,
    normalize_advantage=normalize_advantage,
    clipped=True,
    clip_ratio=clip_ratio,
    proximal_params=proximal_params,
    old_values=old_values,
    value_clip=value_clip,
  )


def _loss_terms(  # noqa: PLR0913 (the loss terms' inputs, by keyword)
  distribution,
  params_t: tf.Tensor,
  values: tf.Tensor,
  action_t: tf.Tensor,
  target_log_prob: tf.Tensor,
  behaviour_log_prob: tf.Tensor,
  vs: tf.Tensor,
  pg_advantages: tf.Tensor,
  *,
  value_cost: float,
  entropy_cost: float,
  clip_rho_threshold: float,
  clip_pg_rho_threshold: float,
  normalize_advantage: bool,
  clipped: bool,
  clip_ratio: float,
  proximal_params: Optional[tf.Tensor],
  old_values: Optional[tf.Tensor] = None,
  value_clip: Optional[float] = None,
) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
  """The policy, value and entropy terms and their metrics over steps of
  any leading shape ([T, B] or [N]), given the targets."""
  log_rhos = tf.stop_gradient(target_log_prob) - behaviour_log_prob
  raw_advantages = pg_advantages
  if normalize_advantage:
    pg_advantages = normalize_advantages(pg_advantages)
  if proximal_params is not None:
    proximal_log_prob = distribution.log_prob(
      tf.cast(proximal_params, params_t.dtype), action_t
    )
    log_ratio = target_log_prob - tf.stop_gradient(proximal_log_prob)
    pg_loss = -tf.reduce_mean(
      learning.decoupled_clipped_surrogate(
        target_log_prob,
        proximal_log_prob,
        behaviour_log_prob,
        pg_advantages,
        clip_ratio,
        max_weight=clip_pg_rho_threshold,
      )
    )
  elif clipped:
    log_ratio = target_log_prob - behaviour_log_prob
    pg_loss = -tf.reduce_mean(
      learning.clipped_surrogate(tf.exp(log_ratio), pg_advantages, clip_ratio)
    )
  else:
    pg_loss = -tf.reduce_mean(target_log_prob * pg_advantages)
  value_loss = value_cost * tf.reduce_mean(
    learning.value_loss(values, vs, old_values, value_clip)
  )
  entropy = tf.reduce_mean(distribution.entropy(params_t))
  total, metrics = learning.actor_critic_total(
    pg_loss, value_loss, entropy, entropy_cost
  )
  if clipped:
    metrics.update(learning.ratio_metrics(log_ratio, clip_ratio))
  if proximal_params is not None:
    metrics["vtrace/proximal_weight"] = tf.reduce_mean(
      tf.exp(tf.stop_gradient(proximal_log_prob) - behaviour_log_prob)
    )

  rhos = tf.exp(log_rhos)
  metrics["vtrace/rho_mean"] = tf.reduce_mean(rhos)
  metrics["vtrace/rho_clipped_fraction"] = tf.reduce_mean(
    tf.cast(rhos > clip_rho_threshold, tf.float32)
  )
  metrics.update(learning.value_metrics(values, vs, raw_advantages))
  return total, metrics
