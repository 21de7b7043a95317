"""PPO objectives (Schulman et al. 2017, arXiv 1707.06347).

All per-sample tensors are flat [N] (N steps of a minibatch). The ratio is
r = pi_theta(a|s) / mu(a|s) with mu the behaviour policy that acted, whose
log-probability was stored at inference time.

  clipped surrogate (eq. 7):  L^CLIP = E[min(r A, clip(r, 1-eps, 1+eps) A)]
  KL penalty (eq. 8):         L^KLPEN = E[r A - beta KL(mu || pi_theta)],
    beta adapted after each update (section 4): doubled when the measured KL
    exceeds 1.5 x target, halved below target / 1.5. BatchPPO's optional
    cutoff adds cutoff_coef * max(0, KL - cutoff_factor x target)^2 so one
    large step cannot run away before beta catches up.
  decoupled clipped surrogate (Hilton et al. 2021, eq. 2), with pi_prox
    the policy at the start of the update:
    L^CLIP_dec = E[(pi_prox / mu) min(r' A, clip(r', 1-eps, 1+eps) A)],
    r' = pi_theta / pi_prox: the trust region moves with the learner, not
    with the (possibly lagging) behaviour policy.
  value loss: 0.5 (V - R)^2, or with clipping (Baselines' PPO2)
    0.5 max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import tensorflow as tf

from seed_rl.agents import learning
from seed_rl.agents.advantages import normalize_advantages
from seed_rl.agents.learning import value_loss

__all__ = ["kl_penalty_surrogate", "ppo_loss", "value_loss"]

LOSS_TYPES = ("clip", "kl_penalty")


def kl_penalty_surrogate(
  ratio: tf.Tensor,
  advantages: tf.Tensor,
  kl: tf.Tensor,
  kl_coef,
  kl_target: Optional[float] = None,
  cutoff_factor: Optional[float] = None,
  cutoff_coef: float = 1000.0,
) -> tf.Tensor:
  """Per-sample L^KLPEN [N] (to maximise); kl is KL(mu || pi_theta) [N]."""
  objective = ratio * advantages - kl_coef * kl
  if cutoff_factor is not None:
    if kl_target is None:
      raise ValueError(
        "kl_penalty_surrogate: cutoff_factor needs kl_target "
        "(the cutoff sits at cutoff_factor * kl_target)"
      )
    excess = tf.nn.relu(kl - cutoff_factor * kl_target)
    objective -= cutoff_coef * tf.square(excess)
  return objective


def adapt_kl_coef(
  kl_coef: float,
  measured_kl: float,
  kl_target: float,
  tolerance: float = 1.5,
  factor: float = 2.0,
  min_coef: float = 1e-6,
  max_coef: float = 1e6,
) -> float:
  """Section 4 of the paper: grow beta on KL overshoot, shrink on undershoot.

  The bounds keep beta from under/overflowing over long runs where the KL
  stays on one side of the target.
  """
  if measured_kl > kl_target * tolerance:
    kl_coef *= factor
  elif measured_kl < kl_target / tolerance:
    kl_coef /= factor
  return float(min(max(kl_coef, min_coef), max_coef))


def ppo_loss(  # noqa: PLR0913 (tensors and weights by keyword, as the equations)
  log_prob: tf.Tensor,
  behaviour_log_prob: tf.Tensor,
  advantages: tf.Tensor,
  values: tf.Tensor,
  returns: tf.Tensor,
  entropy: tf.Tensor,
  *,
  loss_type: str = "clip",
  clip_ratio=0.2,
  old_values: Optional[tf.Tensor] = None,
  value_clip: Optional[float] = None,
  kl: Optional[tf.Tensor] = None,
  kl_coef=1.0,
  kl_target: Optional[float] = None,
  kl_cutoff_factor: Optional[float] = None,
  kl_cutoff_coef: float = 1000.0,
  entropy_cost: float = 0.0,
  value_cost: float = 0.5,
  normalize_advantage: bool = True,
  proximal_log_prob: Optional[tf.Tensor] = None,
) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
  """Total PPO loss (to minimise) over a minibatch and its metrics.

  Kept in one piece: the surrogate (either kind), value and entropy terms
  and their metrics read top to bottom as the module docstring's equations.

  Args:
    log_prob: [N] log pi_theta(a|s) (carries the gradient).
    behaviour_log_prob: [N] log mu(a|s) stored at inference.
    advantages: [N] GAE advantages (no gradient).
    values: [N] V_theta(s) (carries the gradient).
    returns: [N] value targets.
    entropy: [N] entropy of pi_theta(.|s).
    loss_type: 'clip' or 'kl_penalty'.
    clip_ratio: eps of the clipped objective (also used for
      'policy/clip_fraction' with 'kl_penalty').
    old_values: [N] values before the update; needed with value_clip.
    value_clip: None, or the clip range of the value change (in return units).
    kl: [N] KL(mu || pi_theta); needed with 'kl_penalty'.
    kl_coef: beta.
    kl_target, kl_cutoff_factor, kl_cutoff_coef: BatchPPO's KL cutoff.
    entropy_cost: weight of the entropy bonus.
    value_cost: weight of the value loss.
    normalize_advantage: standardise advantages over the minibatch.
    proximal_log_prob: None, or [N] log pi_prox(a|s) at the start of the
      update: 'clip' then uses the decoupled surrogate, anchored there.

  Returns:
    loss: scalar.
    metrics: 'loss/total', 'loss/policy', 'loss/value', 'loss/entropy'
      (the weighted terms of the loss), 'policy/entropy',
      'policy/approx_kl' (E[(r - 1) - log r], an unbiased, non-negative
      estimate of KL(mu || pi_theta)), 'policy/clip_fraction',
      'ppo/kl_coef'; both ratio metrics of r' = pi_theta / pi_prox with
      proximal_log_prob, and then 'ppo/proximal_weight', the mean of
      pi_prox / mu.
  """
  if loss_type not in LOSS_TYPES:
    raise ValueError(
      f"ppo_loss: loss_type {loss_type!r} is unknown; allowed: "
      f"{', '.join(LOSS_TYPES)}"
    )
  advantages = tf.stop_gradient(advantages)
  if normalize_advantage:
    advantages = normalize_advantages(advantages)
  anchor = behaviour_log_prob
  if proximal_log_prob is not None:
    if loss_type != "clip":
      raise ValueError(
        f"ppo_loss: proximal_log_prob anchors the clipped surrogate; "
        f"loss_type {loss_type!r} has none (allowed with it: 'clip')"
      )
    anchor = proximal_log_prob
  log_ratio = log_prob - tf.stop_gradient(anchor)
  ratio = tf.exp(log_ratio)
  if proximal_log_prob is not None:
    objective = learning.decoupled_clipped_surrogate(
      log_prob, proximal_log_prob, behaviour_log_prob, advantages, clip_ratio
    )
  elif loss_type == "clip":
    objective = learning.clipped_surrogate(ratio, advantages, clip_ratio)
  else:
    if kl is None:
      raise ValueError(
        "ppo_loss: loss_type='kl_penalty' needs kl, the "
        "per-sample KL(behaviour || current policy)"
      )
    objective = kl_penalty_surrogate(
      ratio,
      advantages,
      kl,
      kl_coef,
      kl_target,
      kl_cutoff_factor,
      kl_cutoff_coef,
    )
  policy_loss = -tf.reduce_mean(objective)
  v_loss = value_cost * tf.reduce_mean(
    value_loss(values, returns, old_values, value_clip)
  )
  loss, metrics = learning.actor_critic_total(
    policy_loss, v_loss, tf.reduce_mean(entropy), entropy_cost
  )

  metrics.update(learning.ratio_metrics(log_ratio, clip_ratio))
  metrics["ppo/kl_coef"] = tf.cast(kl_coef, tf.float32)
  if proximal_log_prob is not None:
    metrics["ppo/proximal_weight"] = tf.reduce_mean(
      tf.exp(tf.stop_gradient(proximal_log_prob - behaviour_log_prob))
    )
  return loss, metrics
