"""One PPO update, compiled: values and GAE, then epochs of minibatch steps.

The agent (agent.py) owns the queue, normalizer statistics, annealing and the
KL-coefficient adaptation; this module turns one time-major batch into
weight updates, shuffled minibatch by minibatch, with optional early
stopping on the KL from the policy at the start of the update.
"""

from __future__ import annotations

from typing import Callable, List

import tensorflow as tf

from seed_rl.agents.ppo import gae as gae_lib
from seed_rl.agents.ppo import loss as loss_lib
from seed_rl.agents.ppo.config import PPOConfig
from seed_rl.common import diagnostics
from seed_rl.common import distributions

# Metrics of one minibatch step (loss_lib.ppo_loss's plus grad and KL norms),
# averaged over the steps of an update.
_STEP_METRICS = (
  "loss/total",
  "loss/policy",
  "loss/value",
  "loss/entropy",
  "policy/entropy",
  "policy/approx_kl",
  "policy/clip_fraction",
  "ppo/kl_coef",
  "grad/norm",
  "grad/norm_torso",
  "grad/norm_head",
  "ppo/update_kl",
)


class PPOUpdate:
  """Builds `targets_fn` and `update_fn` over one network and optimizer.

  Args:
    config: the agent's settings.
    network: maps preprocessed observations [N, ...] to (params [N, P],
      values [N]).
    distribution: the policy family of `network`'s params.
    optimizer: applies the gradients (its learning rate is set by the agent).
    kl_coef: float32 variable, beta of the KL penalty.
    preprocess: raw observations -> network inputs (e.g. normalisation).
    signature: TensorSpecs of (observation [T+1, B, ...], raw_action
      [T, B, ...], rewards, terminated, truncated, bootstrap_value [T, B]).
  """

  def __init__(
    self,
    config: PPOConfig,
    network,
    distribution: distributions.ActionDistribution,
    optimizer,
    kl_coef: tf.Variable,
    preprocess: Callable[[tf.Tensor], tf.Tensor],
    signature: List[tf.TensorSpec],
  ):
    self._config = config
    self._network = network
    self._distribution = distribution
    self._optimizer = optimizer
    self._kl_coef = kl_coef
    self._preprocess = preprocess
    self._signature = list(signature)
    self.targets_fn = tf.function(
      self._targets, input_signature=self._signature
    )
    self.update_fn = self._make_update_fn()

  def _targets(
    self,
    observation,
    raw_action,
    rewards,
    terminated,
    truncated,
    bootstrap_value,
  ):
    """Values, GAE and the proximal policy of a time-major batch.

    Args:
      observation: [T+1, B, ...]; raw_action [T, B, ...]; rewards,
        terminated, truncated, bootstrap_value [T, B] (as
        PPOAgent._time_major lays them out).

    Returns:
      values [T, B], advantages [T, B], returns [T, B], the policy params
      [T, B, P] and log pi(a_t|x_t) [T, B] under the current weights.
    """
    cfg, distribution = self._config, self._distribution
    shape = tf.shape(observation)
    t1, b = shape[0], shape[1]
    flat_obs = tf.reshape(observation, tf.concat([[t1 * b], shape[2:]], 0))
    params, value = self._network(self._preprocess(flat_obs))
    value = tf.reshape(value, [t1, b])
    params = tf.reshape(params, [t1, b, distribution.num_params])
    advantages, returns = gae_lib.unroll_gae(
      value,
      rewards,
      terminated,
      truncated,
      bootstrap_value,
      cfg.discount,
      cfg.gae_lambda,
    )
    values, params = value[:-1], params[:-1]
    flat_params = tf.reshape(params, [-1, distribution.num_params])
    flat_actions = tf.reshape(
      raw_action, tf.concat([[-1], tf.shape(raw_action)[2:]], axis=0)
    )
    log_prob = tf.reshape(
      distribution.log_prob(flat_params, flat_actions), tf.shape(values)
    )
    return values, advantages, returns, params, log_prob

  def _minibatch_step(
    self,
    observation,
    raw_action,
    behaviour_log_prob,
    advantages,
    returns,
    old_values,
    prox_params,
    prox_log_prob,
    clip_ratio,
  ):
    """One gradient step on N transitions ([N, ...]); returns its metrics."""
    cfg, distribution = self._config, self._distribution
    variables = self._network.trainable_variables
    with tf.GradientTape() as tape:
      params, values = self._network(self._preprocess(observation))
      log_prob = distribution.log_prob(params, raw_action)
      kl = (
        distribution.kl(prox_params, params)
        if cfg.loss == "kl_penalty"
        else None
      )
      total, metrics = loss_lib.ppo_loss(
        log_prob,
        behaviour_log_prob,
        advantages,
        values,
        returns,
        distribution.entropy(params),
        loss_type=cfg.loss,
        clip_ratio=clip_ratio,
        old_values=old_values,
        value_clip=cfg.value_clip,
        kl=kl,
        kl_coef=tf.convert_to_tensor(self._kl_coef),
        kl_target=cfg.kl_target,
        kl_cutoff_factor=cfg.kl_cutoff_factor,
        kl_cutoff_coef=cfg.kl_cutoff_coef,
        entropy_cost=cfg.entropy_cost,
        value_cost=cfg.value_cost,
        normalize_advantage=cfg.normalize_advantages,
      )
    gradients = tape.gradient(total, variables)
    metrics.update(diagnostics.gradient_norms(gradients, variables))
    # The KL from the start of the update, before this step (drives early
    # stopping; the same estimator as policy/approx_kl).
    log_ratio = tf.stop_gradient(log_prob) - prox_log_prob
    metrics["ppo/update_kl"] = tf.reduce_mean(
      tf.exp(log_ratio) - 1.0 - log_ratio
    )
    self._optimizer.apply_gradients(zip(gradients, variables))
    return metrics

  def _make_update_fn(self):
    cfg, distribution = self._config, self._distribution
    num_minibatches = cfg.num_minibatches
    early_stop_kl = cfg.early_stop_kl

    @tf.function(
      input_signature=self._signature
      + [
        tf.TensorSpec([None, None], tf.float32),
        tf.TensorSpec([None, None], tf.int32),
        tf.TensorSpec([], tf.float32),
      ]
    )
    def update_fn(
      observation,
      raw_action,
      rewards,
      terminated,
      truncated,
      bootstrap_value,
      behaviour_log_prob,
      order,
      clip_ratio,
    ):
      """A whole PPO update; order [num_epochs, T*B] shuffles each epoch."""
      target_args = (
        observation,
        raw_action,
        rewards,
        terminated,
        truncated,
        bootstrap_value,
      )
      values, advantages, returns, prox_params, prox_log_prob = self._targets(
        *target_args
      )

      def flat(x):
        return tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], axis=0))

      obs_flat = flat(observation[:-1])
      action_flat, behaviour_flat = flat(raw_action), flat(behaviour_log_prob)
      old_values, prox_params = flat(values), flat(prox_params)
      prox_log_prob = flat(prox_log_prob)
      advantages, returns = flat(advantages), flat(returns)
      explained_variance = diagnostics.explained_variance(old_values, returns)
      n = tf.shape(obs_flat)[0]

      names = _STEP_METRICS
      sums = tf.zeros([len(names)])
      count = tf.constant(0)
      stopped = tf.constant(False)
      for epoch in tf.range(tf.shape(order)[0]):
        if cfg.recompute_advantages_each_epoch and epoch > 0:
          _, new_adv, new_ret, _, _ = self._targets(*target_args)
          advantages, returns = flat(new_adv), flat(new_ret)
        for m in tf.range(num_minibatches):
          # Equal-as-possible contiguous slices of this epoch's permutation.
          idx = order[
            epoch, (m * n) // num_minibatches : ((m + 1) * n) // num_minibatches
          ]
          metrics = self._minibatch_step(
            tf.gather(obs_flat, idx),
            tf.gather(action_flat, idx),
            tf.gather(behaviour_flat, idx),
            tf.gather(advantages, idx),
            tf.gather(returns, idx),
            tf.gather(old_values, idx),
            tf.gather(prox_params, idx),
            tf.gather(prox_log_prob, idx),
            clip_ratio,
          )
          sums += tf.stack([tf.cast(metrics[k], tf.float32) for k in names])
          count += 1
          if early_stop_kl is not None:
            if metrics["ppo/update_kl"] > early_stop_kl:
              stopped = True
              break
        if stopped:
          break

      means = sums / tf.cast(count, tf.float32)
      out = {name: means[i] for i, name in enumerate(names)}
      out.update(
        {
          "value/explained_variance": explained_variance,
          "ppo/epochs": tf.cast(count, tf.float32) / num_minibatches,
          "ppo/early_stopped": tf.cast(stopped, tf.float32),
          **diagnostics.advantage_stats(advantages),
          "value/target_mean": tf.reduce_mean(returns),
        }
      )
      if cfg.loss == "kl_penalty":
        params, _ = self._network(self._preprocess(obs_flat))
        out["ppo/update_kl_final"] = tf.reduce_mean(
          distribution.kl(prox_params, params)
        )
      return out

    return update_fn
