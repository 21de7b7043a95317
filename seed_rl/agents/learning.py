"""Training plumbing every agent shares (TensorFlow; learner only).

What surrounds each algorithm's own loss, written once: building the
optimizer a config describes, applying one update and reporting what every
agent reports for it (grad/*, opt/learning_rate, errors/nonfinite_updates,
then one more learner step), the single-device compiled training step,
acting greedily on evaluation rows, the action-spec check of the
discrete-action agents, and the sums that make up an actor-critic loss with
its metrics. The algorithms' maths stays in each
agent's loss module.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import tensorflow as tf

from seed_rl.agents import diagnostics
from seed_rl.agents import distributions
from seed_rl.common import optimizers
from seed_rl.common.specs import ArraySpec

Metrics = Dict[str, tf.Tensor]
# (*train_fn args) -> (gradients, one per trainable variable, metrics).
LossAndGradients = Callable[..., Tuple[Sequence[tf.Tensor], Metrics]]


# ---- optimizers --------------------------------------------------------------


def scheduled_optimizer(
  config: Any,
  variables: Sequence[tf.Variable],
  clock: tf.Variable,
  momentum: float = 0.0,
) -> optimizers.Optimizer:
  """The optimizer of an actor-critic config (A2C, V-trace, ACER).

  Reads config.optimizer ('adam' or 'rmsprop'), learning_rate (decayed
  linearly to 0 over total_learner_steps when lr_schedule == 'linear'),
  optimizer_epsilon, max_grad_norm, rmsprop_decay and, where the config
  has it (V-trace), optimizer_epsilon_form. `clock` is the learner step
  counter that drives the schedule.
  """
  cfg = config
  linear = cfg.lr_schedule == "linear"
  return optimizers.make_optimizer(
    cfg.optimizer,
    optimizers.learning_rate_schedule(
      cfg.learning_rate,
      decay_steps=cfg.total_learner_steps if linear else None,
    ),
    epsilon=cfg.optimizer_epsilon,
    max_grad_norm=cfg.max_grad_norm,
    rmsprop_decay=cfg.rmsprop_decay,
    momentum=momentum,
    variables=variables,
    clock=clock,
    epsilon_form=getattr(cfg, "optimizer_epsilon_form", "tensorflow"),
  )


def adam(
  config: Any, learning_rate: Any, variables: Sequence[tf.Variable]
) -> optimizers.Optimizer:
  """Adam at `learning_rate` with config.optimizer_epsilon and
  config.max_grad_norm (PPO, DQN, R2D2, SAC, TD3), and the epsilon form of
  config.optimizer_epsilon_form where the config has one (PPO; the others
  keep TensorFlow's, as the implementations they follow)."""
  return optimizers.make_optimizer(
    "adam",
    learning_rate,
    epsilon=config.optimizer_epsilon,
    max_grad_norm=config.max_grad_norm,
    variables=variables,
    epsilon_form=getattr(config, "optimizer_epsilon_form", "tensorflow"),
  )


# ---- one update --------------------------------------------------------------


def finish_update(
  metrics: Metrics,
  step_counter: tf.Variable,
  optimizers_used: Sequence[optimizers.Optimizer],
) -> Metrics:
  """Adds 'opt/learning_rate' (the first optimizer's, as applied) and
  'errors/nonfinite_updates' (updates skipped so far by all of them) to
  `metrics`, then counts one learner step. Call after every update."""
  metrics["opt/learning_rate"] = tf.convert_to_tensor(
    optimizers_used[0].learning_rate
  )
  metrics["errors/nonfinite_updates"] = tf.cast(
    tf.add_n([o.nonfinite_updates for o in optimizers_used]), tf.float32
  )
  step_counter.assign_add(1)
  return metrics


def apply_update(
  optimizer: optimizers.Optimizer,
  gradients: Sequence[tf.Tensor],
  variables: Sequence[tf.Variable],
  metrics: Metrics,
  step_counter: Optional[tf.Variable] = None,
  norm_gradients: Optional[Sequence[tf.Tensor]] = None,
) -> Metrics:
  """One optimizer step with its metrics; returns `metrics` completed.

  Adds grad/norm, grad/norm_torso and grad/norm_head (of `norm_gradients`,
  default `gradients`: a multi-device step passes one device's copy of the
  all-reduced gradients) and applies the gradients. With `step_counter`
  the step is a learner step: then `finish_update`. Without it (PPO's
  minibatch steps) the caller accounts for the learner step.
  """
  if norm_gradients is None:
    norm_gradients = gradients
  metrics.update(diagnostics.gradient_norms(norm_gradients, variables))
  optimizer.apply_gradients(zip(gradients, variables))
  if step_counter is None:
    return metrics
  return finish_update(metrics, step_counter, [optimizer])


def compile_train_fn(
  signature: Sequence[Any],
  loss_and_gradients: LossAndGradients,
  network: Any,
  optimizer: optimizers.Optimizer,
  step_counter: tf.Variable,
  after_update: Optional[Callable[[], None]] = None,
) -> Callable[..., Metrics]:
  """The single-device training step: `loss_and_gradients(*args)` for the
  trainable variables of `network`, then `apply_update`, then
  `after_update()` if given (e.g. ACER's average network) and
  `finish_update`; one compiled graph call with `signature`
  (seed_rl.agents.multi_device splits the same step over several
  devices)."""

  @tf.function(input_signature=signature)
  def train_fn(*args):
    gradients, metrics = loss_and_gradients(*args)
    variables = network.trainable_variables
    metrics = apply_update(optimizer, gradients, variables, metrics)
    if after_update is not None:
      after_update()
    return finish_update(metrics, step_counter, [optimizer])

  return train_fn


# ---- acting ------------------------------------------------------------------


def where_eval(
  eval_mask: tf.Tensor, greedy: tf.Tensor, sampled: tf.Tensor
) -> tf.Tensor:
  """greedy[i] where eval_mask[i] (bool [B]), else sampled[i]; [B, ...]."""
  mask = tf.reshape(eval_mask, [-1] + [1] * (sampled.shape.rank - 1))
  return tf.where(mask, greedy, sampled)


def sample_actions(
  distribution: distributions.ActionDistribution,
  params: tf.Tensor,
  generator: tf.random.Generator,
  eval_mask: tf.Tensor,
) -> Tuple[tf.Tensor, tf.Tensor]:
  """A sample of the policy for training rows, its mode for evaluation rows.

  Args:
    distribution: the policy family of `params`.
    params: [B, P] policy parameters.
    generator: draws the samples.
    eval_mask: bool [B] evaluation rows (greedy).

  Returns:
    The env action [B, ...] and the raw action [B, ...] (the Gaussian
    sample before clip / tanh; the action itself for a Categorical).
  """
  sampled, sampled_raw = distribution.sample(params, generator)
  greedy, greedy_raw = distribution.mode(params)
  return (
    where_eval(eval_mask, greedy, sampled),
    where_eval(eval_mask, greedy_raw, sampled_raw),
  )


def num_discrete_actions(action_spec: ArraySpec, agent: str) -> int:
  """The number of actions of a scalar discrete spec (DQN, R2D2).

  Raises:
    ValueError: naming `agent`, for any other spec.
  """
  if not action_spec.is_discrete or action_spec.shape != ():
    raise ValueError(
      f"{agent} needs a scalar discrete action spec (num_values "
      f"set, shape ()), got shape {list(action_spec.shape)} "
      f"num_values {action_spec.num_values}"
    )
  assert action_spec.num_values is not None  # is_discrete
  return int(action_spec.num_values)


# ---- actor-critic losses -----------------------------------------------------


def actor_critic_total(
  policy_loss: tf.Tensor,
  value_loss: tf.Tensor,
  entropy: tf.Tensor,
  entropy_cost: float,
) -> Tuple[tf.Tensor, Metrics]:
  """total = policy_loss + value_loss - entropy_cost * entropy.

  Args:
    policy_loss, value_loss: scalar weighted terms.
    entropy: scalar mean entropy of the policy.
    entropy_cost: weight of the entropy bonus.

  Returns:
    total and 'loss/{total,policy,value,entropy}' (the weighted terms),
    'policy/entropy'.
  """
  entropy_loss = -entropy_cost * entropy
  total = policy_loss + value_loss + entropy_loss
  return total, {
    "loss/total": total,
    "loss/policy": policy_loss,
    "loss/value": value_loss,
    "loss/entropy": entropy_loss,
    "policy/entropy": tf.stop_gradient(entropy),
  }


def clipped_surrogate(
  ratio: tf.Tensor, advantages: tf.Tensor, clip_ratio
) -> tf.Tensor:
  """PPO's per-sample L^CLIP (Schulman et al. 2017, eq. 7), to maximise:
  min(r A, clip(r, 1 - eps, 1 + eps) A), any shape (PPO: [N]; V-trace: [T, B]).

  The min makes the objective pessimistic: once r has moved past 1 +- eps in
  the direction that helps (r > 1+eps with A > 0, r < 1-eps with A < 0) the
  clipped term is constant and its gradient is zero.
  """
  clipped = tf.clip_by_value(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
  return tf.minimum(ratio * advantages, clipped * advantages)


def value_loss(
  values: tf.Tensor,
  returns: tf.Tensor,
  old_values: Optional[tf.Tensor] = None,
  value_clip: Optional[float] = None,
) -> tf.Tensor:
  """Per-sample value loss [N] (0.5 (V - G)^2); with value_clip the larger
  of that and 0.5 (V_old + clip(V - V_old, +-value_clip) - G)^2, PPO's
  clipped form (Baselines' ppo2), which needs old_values (V before the
  update)."""
  returns = tf.stop_gradient(returns)
  loss = tf.square(values - returns)
  if value_clip is not None:
    if old_values is None:
      raise ValueError(
        "value_loss: value_clip needs old_values, the value "
        "predictions before this update"
      )
    old_values = tf.stop_gradient(old_values)
    clipped = old_values + tf.clip_by_value(
      values - old_values, -value_clip, value_clip
    )
    loss = tf.maximum(loss, tf.square(clipped - returns))
  return 0.5 * loss


def decoupled_clipped_surrogate(
  log_prob: tf.Tensor,
  proximal_log_prob: tf.Tensor,
  behaviour_log_prob: tf.Tensor,
  advantages: tf.Tensor,
  clip_ratio,
  max_weight: Optional[float] = None,
) -> tf.Tensor:
  """The decoupled L^CLIP of Hilton, Cobbe and Schulman 2021 ("Batch
  size-invariance for policy optimization", eq. 2), per sample, to maximise:

    (pi_prox / mu) min(r A, clip(r, 1 - eps, 1 + eps) A),  r = pi_theta / pi_prox

  mu acted; pi_prox is the policy the trust region is anchored at (the
  weights at the start of the update). With mu = pi_prox it is L^CLIP.
  With stale data (an asynchronous learner's policy lag) L^CLIP anchors the
  trust region at mu, so a policy already eps away from mu gets no further
  push however many updates have passed; here each update may move eps
  from where it starts, and the importance weight pi_prox / mu (no
  gradient; truncated at `max_weight` if given, as V-trace's rho-bar)
  keeps the objective's expectation that of data from pi_prox.

  Args: log-probabilities [any shape] of the taken actions under pi_theta
  (carries the gradient), pi_prox and mu; advantages of the same shape.
  """
  weight = tf.exp(tf.stop_gradient(proximal_log_prob - behaviour_log_prob))
  if max_weight is not None:
    weight = tf.minimum(weight, max_weight)
  ratio = tf.exp(log_prob - tf.stop_gradient(proximal_log_prob))
  return weight * clipped_surrogate(ratio, advantages, clip_ratio)


def ratio_metrics(log_ratio: tf.Tensor, clip_ratio) -> Metrics:
  """'policy/approx_kl' (E[(r - 1) - log r], an unbiased, non-negative
  estimate of KL(mu || pi_theta)) and 'policy/clip_fraction' (|r - 1| > eps)
  of r = pi_theta / mu, any shape."""
  log_ratio = tf.stop_gradient(log_ratio)
  ratio = tf.exp(log_ratio)
  return {
    "policy/approx_kl": tf.reduce_mean((ratio - 1.0) - log_ratio),
    "policy/clip_fraction": tf.reduce_mean(
      tf.cast(tf.abs(ratio - 1.0) > clip_ratio, tf.float32)
    ),
  }


def value_metrics(
  values: tf.Tensor, targets: tf.Tensor, advantages: tf.Tensor
) -> Metrics:
  """'value/mean', 'value/target_mean', 'value/explained_variance' of
  values against their targets, and 'advantage/{mean,std}' (any shape)."""
  return {
    "value/mean": tf.reduce_mean(values),
    "value/target_mean": tf.reduce_mean(targets),
    "value/explained_variance": diagnostics.explained_variance(
      tf.stop_gradient(values), targets
    ),
    **diagnostics.advantage_stats(advantages),
  }
