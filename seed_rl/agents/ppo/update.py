"""One PPO update, compiled: values and GAE, then epochs of minibatch steps.

The agent (agent.py) owns the queue, normalizer statistics, annealing and the
KL-coefficient adaptation; this module turns one time-major batch into
weight updates, shuffled minibatch by minibatch, with optional early
stopping on the KL from the policy at the start of the update.

With LearnerConfig.training_devices (a MirroredStrategy) the update stays
one graph call and equals the one-device update: every device computes the
values, GAE and proximal policy of its shard of the B unrolls (GAE runs
along T only; the shards are gathered back into [T, B] in column order),
then each minibatch of transitions is split into equal shards, one per
device, whose gradients are averaged (agents/multi_device.py); advantage
normalisation uses the moments of the whole minibatch
(multi_device.moments). Shuffling, early stopping and the metrics read the
whole batch or the averaged minibatch metrics, as on one device.
"""

from __future__ import annotations

from typing import Callable, List, NamedTuple, Optional

import tensorflow as tf

from seed_rl.agents import learning
from seed_rl.agents import multi_device
from seed_rl.agents import gae as gae_lib
from seed_rl.agents.ppo import loss as loss_lib
from seed_rl.agents.ppo.config import PPOConfig
from seed_rl.agents import diagnostics
from seed_rl.agents import distributions

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


class Transitions(NamedTuple):
  """The N = T*B transitions of an update, flat, with their targets."""

  observation: tf.Tensor  # [N, ...]
  raw_action: tf.Tensor  # [N, ...]
  behaviour_log_prob: tf.Tensor  # [N] log mu(a|x)
  old_values: tf.Tensor  # [N] V(x) at the start of the update
  prox_params: tf.Tensor  # [N, P] policy params at the start of the update
  prox_log_prob: tf.Tensor  # [N] log pi_start(a|x)
  advantages: tf.Tensor  # [N]
  returns: tf.Tensor  # [N]


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
    strategy: the MirroredStrategy of the training devices (network and
      optimizer built in its scope), or None for one device.
    observations: (observation, terminated, truncated) -> stacks [T+1, B,
      ...]: what the signature's observations become first (frame stacks
      rebuilt from frames, agents/frame_stacks.py); None keeps them.
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
    strategy: Optional[tf.distribute.Strategy] = None,
    observations: Optional[Callable[..., tf.Tensor]] = None,
  ):
    self._config = config
    self._network = network
    self._distribution = distribution
    self._optimizer = optimizer
    self._kl_coef = kl_coef
    self._preprocess = preprocess
    self._signature = list(signature)
    self._strategy = strategy
    self._observations = observations
    self._step_metrics = _STEP_METRICS + (
      ("ppo/proximal_weight",) if config.surrogate_anchor == "proximal" else ()
    )

    def targets(*args):
      with multi_device.training_scope(strategy):
        return self._batch_targets(*self._stacked(args))

    self.targets_fn = tf.function(targets, input_signature=self._signature)
    self.update_fn = self._make_update_fn()

  def _stacked(self, target_args):
    """`_targets`' arguments with the observations as the network sees
    them (`observations`)."""
    if self._observations is None:
      return tuple(target_args)
    # (observation, raw_action, rewards, terminated, truncated, ...)
    observation = self._observations(
      target_args[0], target_args[3], target_args[4]
    )
    return (observation,) + tuple(target_args[1:])

  def _batch_targets(self, *target_args):
    """`_targets` of the whole batch: with training devices, each device's
    of its shard of the B unrolls, gathered back along B."""
    strategy = self._strategy
    if strategy is None:
      return self._targets(*target_args)
    n = strategy.num_replicas_in_sync
    shards = strategy.experimental_distribute_values_from_function(
      lambda context: tuple(
        tf.split(x, n, axis=1)[context.replica_id_in_sync_group]
        for x in target_args
      )
    )
    per_replica = strategy.run(self._targets, args=shards)
    return tuple(strategy.gather(x, axis=1) for x in per_replica)

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
    log_prob = tf.reshape(
      distribution.log_prob(flat_params, _flat(raw_action)), tf.shape(values)
    )
    return values, advantages, returns, params, log_prob

  def _minibatch_step(self, batch: Transitions, clip_ratio):
    """One gradient step on a minibatch of transitions; returns its metrics.

    With training devices the minibatch [N', ...] is split into equal
    shards along N', one per device, and their gradients averaged.
    """
    variables = self._network.trainable_variables

    def loss_and_gradients(*shard):
      gradients, metrics = self._loss_and_gradients(
        Transitions(*shard), clip_ratio
      )
      return gradients, metrics, ()  # no per-item outputs

    gradients, first, metrics, _ = multi_device.run_sharded(
      self._strategy, loss_and_gradients, tuple(batch), variables
    )
    return learning.apply_update(
      self._optimizer, gradients, variables, metrics, norm_gradients=first
    )

  def _loss_and_gradients(self, batch: Transitions, clip_ratio):
    """Gradients of the PPO loss on (a shard of) a minibatch, metrics."""
    cfg, distribution = self._config, self._distribution
    variables = self._network.trainable_variables
    with tf.GradientTape() as tape:
      params, values = self._network(self._preprocess(batch.observation))
      log_prob = distribution.log_prob(params, batch.raw_action)
      kl = (
        distribution.kl(batch.prox_params, params)
        if cfg.loss == "kl_penalty"
        else None
      )
      total, metrics = loss_lib.ppo_loss(
        log_prob,
        batch.behaviour_log_prob,
        batch.advantages,
        values,
        batch.returns,
        distribution.entropy(params),
        loss_type=cfg.loss,
        clip_ratio=clip_ratio,
        old_values=batch.old_values,
        value_clip=cfg.value_clip,
        kl=kl,
        kl_coef=tf.convert_to_tensor(self._kl_coef),
        kl_target=cfg.kl_target,
        kl_cutoff_factor=cfg.kl_cutoff_factor,
        kl_cutoff_coef=cfg.kl_cutoff_coef,
        entropy_cost=cfg.entropy_cost,
        value_cost=cfg.value_cost,
        normalize_advantage=cfg.normalize_advantages,
        proximal_log_prob=(
          batch.prox_log_prob if cfg.surrogate_anchor == "proximal" else None
        ),
      )
    # The KL from the start of the update, before this step (drives early
    # stopping; the same estimator as policy/approx_kl).
    log_ratio = tf.stop_gradient(log_prob) - batch.prox_log_prob
    metrics["ppo/update_kl"] = tf.reduce_mean(
      tf.exp(log_ratio) - 1.0 - log_ratio
    )
    return tape.gradient(total, variables), metrics

  def _flat_targets(self, target_args, behaviour_log_prob) -> Transitions:
    """Targets of a time-major batch, flattened to its N = T*B transitions.

    Args:
      target_args: `_targets`' arguments (observation [T+1, B, ...],
        raw_action [T, B, ...], then rewards and flags [T, B]).
      behaviour_log_prob: [T, B].
    """
    observation, raw_action = target_args[:2]
    values, advantages, returns, prox_params, prox_log_prob = (
      self._batch_targets(*target_args)
    )
    return Transitions(
      *(
        _flat(x)
        for x in (
          observation[:-1],
          raw_action,
          behaviour_log_prob,
          values,
          prox_params,
          prox_log_prob,
          advantages,
          returns,
        )
      )
    )

  def _make_update_fn(self):
    cfg = self._config

    @tf.function(
      input_signature=self._signature
      + [
        tf.TensorSpec([None, None], tf.float32),
        tf.TensorSpec([None, None], tf.int32),
        tf.TensorSpec([], tf.float32),
      ]
    )
    def update_fn(*args):
      """A whole PPO update on `_targets`' six inputs, behaviour_log_prob
      [T, B], order [num_epochs, T*B] (one shuffle per epoch) and
      clip_ratio []."""
      target_args, (behaviour_log_prob, order, clip_ratio) = args[:6], args[6:]
      target_args = self._stacked(target_args)
      with multi_device.training_scope(self._strategy):
        data = self._flat_targets(target_args, behaviour_log_prob)
        explained_variance = diagnostics.explained_variance(
          data.old_values, data.returns
        )
        out = self._epochs(data, target_args, order, clip_ratio)
        out["value/explained_variance"] = explained_variance
        if cfg.loss == "kl_penalty":
          # One forward pass per update, for the KL adaptation: on one
          # device (the first copy of the weights, cross-replica context).
          params, _ = self._network(self._preprocess(data.observation))
          out["ppo/update_kl_final"] = tf.reduce_mean(
            self._distribution.kl(data.prox_params, params)
          )
        return out

    return update_fn

  def _epochs(self, data: Transitions, target_args, order, clip_ratio):
    """The epochs of minibatch steps over `data` (order [num_epochs, N]),
    until the KL from the start exceeds early_stop_kl; returns the
    update's metrics (`_summary`)."""
    cfg = self._config
    num_minibatches, early_stop_kl = cfg.num_minibatches, cfg.early_stop_kl
    n = tf.shape(data.observation)[0]
    advantages, returns = data.advantages, data.returns
    sums = tf.zeros([len(self._step_metrics)])
    count = tf.constant(0)
    stopped = tf.constant(False)
    for epoch in tf.range(tf.shape(order)[0]):
      if cfg.recompute_advantages_each_epoch and epoch > 0:
        _, new_adv, new_ret, _, _ = self._batch_targets(*target_args)
        advantages, returns = _flat(new_adv), _flat(new_ret)
      for m in tf.range(num_minibatches):
        # Equal-as-possible contiguous slices of this epoch's permutation.
        idx = order[
          epoch, (m * n) // num_minibatches : ((m + 1) * n) // num_minibatches
        ]
        minibatch = data._replace(advantages=advantages, returns=returns)
        metrics = self._minibatch_step(
          Transitions(*[tf.gather(x, idx) for x in minibatch]),
          clip_ratio,
        )
        sums += tf.stack(
          [tf.cast(metrics[k], tf.float32) for k in self._step_metrics]
        )
        count += 1
        if early_stop_kl is not None:
          if metrics["ppo/update_kl"] > early_stop_kl:
            stopped = True
            break
      if stopped:
        break
    return self._summary(sums, count, stopped, advantages, returns)

  def _summary(self, sums, count, stopped, advantages, returns):
    """The update's metrics: the mean of each step metric over its
    `count` minibatch steps, epochs run, whether it stopped early, and the
    statistics of the (last) advantages and returns [N]."""
    means = sums / tf.cast(count, tf.float32)
    out = {name: means[i] for i, name in enumerate(self._step_metrics)}
    out.update(
      {
        "ppo/epochs": tf.cast(count, tf.float32) / self._config.num_minibatches,
        "ppo/early_stopped": tf.cast(stopped, tf.float32),
        **diagnostics.advantage_stats(advantages),
        "value/target_mean": tf.reduce_mean(returns),
      }
    )
    return out


def _flat(x: tf.Tensor) -> tf.Tensor:
  """[T, B, ...] -> [T*B, ...]."""
  return tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], axis=0))
