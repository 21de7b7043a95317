"""The PPO agent as the learner runtime drives it.

One `train_step` is one PPO update: take `batch_size` unrolls from the queue,
compute values and GAE once (optionally again before every epoch), then run
`num_epochs` passes of shuffled minibatches.

Minibatches are of single transitions, not whole unrolls: advantages are
computed on the full [T, B] batch before shuffling, so nothing needs the time
axis afterwards, and mixing steps from many envs and times decorrelates each
gradient estimate (CleanRL and Baselines do the same for feed-forward
policies).

Off-policy data. Actors act while the learner trains, so an unroll may come
from weights a few updates old (`perf/policy_lag`). The ratio r = pi / mu in
the surrogate uses the stored behaviour log-probability mu, which keeps the
importance weighting correct. The trust region of the update itself is
measured from the *proximal* policy, the weights at the start of this update
(Hilton et al. 2021, "decoupled" PPO): the KL penalty, its adaptation and
early stopping use KL(pi_start || pi). With no lag both are the same policy,
as in synchronous PPO; with lag, a KL measured from mu would include the
drift of earlier updates and could stop an update before its first step.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Mapping, Optional

import numpy as np
import tensorflow as tf

from seed_rl.agents.ppo import gae as gae_lib
from seed_rl.agents.ppo import loss as loss_lib
from seed_rl.agents.ppo import networks
from seed_rl.agents.ppo.config import PPOConfig
from seed_rl.agents.vtrace.unroll_queue import UnrollQueue
from seed_rl.common import distributions
from seed_rl.common import normalizers
from seed_rl.common import optimizers
from seed_rl.common.agent_api import ActInputs, ActOutputs, Agent, Unroll
from seed_rl.common.specs import ArraySpec

# Names in ActOutputs.extras / Unroll.extras.
LOG_PROB = "log_prob"  # float32 [B] log mu(a|s) of the raw action.
RAW_ACTION = "raw_action"  # float32 [B, D] Gaussian sample before clip/tanh.

# Metrics of one minibatch step (loss_lib.ppo_loss's plus the agent's own),
# averaged over the steps of an update.
_STEP_METRICS = ("loss/total", "loss/policy", "loss/value", "loss/entropy",
                 "ppo/entropy", "ppo/approx_kl", "ppo/clip_fraction",
                 "ppo/kl_coef", "ppo/grad_norm", "ppo/update_kl")


class PPOAgent(Agent):
  """PPO (clipped or adaptive-KL) actor-critic on a bounded unroll queue."""

  unroll_overlap = 1

  def __init__(self, observation_spec: ArraySpec, action_spec: ArraySpec,
               num_envs: int, config: Optional[PPOConfig] = None):
    super().__init__(observation_spec, action_spec, num_envs)
    cfg = self.config = config if config is not None else PPOConfig()
    self.unroll_length = cfg.unroll_length
    self._distribution = distributions.for_action_spec(action_spec,
                                                       cfg.bound_handling)
    self._continuous = not action_spec.is_discrete
    float_obs = np.issubdtype(np.dtype(observation_spec.dtype), np.floating)
    if cfg.normalize_observations and not float_obs:
      raise ValueError(
          f"PPOConfig.normalize_observations needs float observations; the "
          f"observation spec is {observation_spec.dtype} "
          f"{observation_spec.shape} (image frames are scaled by their torso "
          f"instead)")
    self._obs_normalizer = None
    if cfg.normalize_observations:
      self._obs_normalizer = normalizers.RunningMeanStd(
          observation_spec.shape, clip=cfg.observation_clip,
          name="observation_normalizer")
    self._reward_scaler = None
    if cfg.scale_rewards:
      self._reward_scaler = normalizers.RewardScaler(
          num_envs, cfg.gamma, clip=cfg.reward_clip)
    # act() reads the observation statistics while train_step() may update
    # them; the lock makes every act call see one consistent (mean, var).
    self._stats_lock = threading.Lock()

    self._network = networks.PPONetwork(
        cfg.torso or networks.default_torso(observation_spec),
        self._distribution, log_std=cfg.log_std,
        init_log_std=cfg.init_log_std, shared_torso=cfg.shared_torso,
        name="ppo_network")
    networks.build_network(
        self._network, observation_spec,
        "float32" if self._obs_normalizer is not None else None)
    # The rate is a variable set before every update from step_counter: it is
    # annealed per PPO update, not per minibatch (the optimizer's own
    # iteration count varies with early stopping).
    self._optimizer = optimizers.make_optimizer(
        "adam", cfg.learning_rate, epsilon=cfg.adam_epsilon,
        max_grad_norm=cfg.max_grad_norm)
    # Slots exist before any restore, so a checkpoint loads immediately.
    self._optimizer.build(self._network.trainable_variables)
    self._step_counter = tf.Variable(0, dtype=tf.int64, trainable=False,
                                     name="learner_step")
    self._kl_coef = tf.Variable(cfg.initial_kl_coef, dtype=tf.float32,
                                trainable=False, name="kl_coef")
    self._generator = tf.random.Generator.from_seed(cfg.seed)
    self._shuffle_rng = np.random.default_rng(cfg.seed)
    self._queue = UnrollQueue(cfg.queue_capacity or cfg.batch_size,
                              cfg.batch_size)
    self._act_fn = self._make_act_fn()
    self._targets_fn = self._make_targets_fn()
    self._update_fn = self._make_update_fn()

  # ---- Agent API ---------------------------------------------------------

  @property
  def step_counter(self) -> tf.Variable:
    return self._step_counter

  @property
  def network(self) -> networks.PPONetwork:
    return self._network

  @property
  def distribution(self) -> distributions.ActionDistribution:
    return self._distribution

  @property
  def observation_normalizer(self) -> Optional[normalizers.RunningMeanStd]:
    return self._obs_normalizer

  @property
  def reward_scaler(self) -> Optional[normalizers.RewardScaler]:
    return self._reward_scaler

  def act(self, inputs: ActInputs) -> ActOutputs:
    batch_size = int(inputs.observation.shape[0])
    self.observation_spec.check_batch(inputs.observation, batch_size,
                                      "ActInputs.observation")
    eval_mask = np.asarray(inputs.eval_mask, np.bool_)
    if eval_mask.shape != (batch_size,):
      raise ValueError(f"ActInputs.eval_mask: shape {list(eval_mask.shape)}, "
                       f"expected [{batch_size}]")
    with self._stats_lock:
      action, raw_action, log_prob, value = self._act_fn(inputs.observation,
                                                         eval_mask)
    extras = {LOG_PROB: log_prob.numpy()}
    if self._continuous:
      extras[RAW_ACTION] = raw_action.numpy()
    return ActOutputs(
        action=action.numpy().astype(self.action_spec.dtype, copy=False),
        value=value.numpy(), extras=extras, core_state=())

  def add_unrolls(self, unrolls: Unroll) -> None:
    self._check_unroll(unrolls)
    self._queue.put(unrolls)

  def train_step(self) -> Mapping[str, float]:
    batch = self._queue.get_batch()
    if batch is None:
      return {}
    cfg = self.config
    t, b = cfg.unroll_length, cfg.batch_size
    step = int(self._step_counter.numpy())
    policy_lag = step - float(np.mean(batch.policy_version[:, :t]))

    (observation, raw_action, rewards, terminated, truncated,
     bootstrap_value, behaviour_log_prob) = self._time_major(batch)

    if self._obs_normalizer is not None:
      # Statistics move here, once per update, from the batch (steps 1..T;
      # step 0 repeats the previous unroll's last step), not in act():
      # (1) weights and statistics then change together, so the policy an
      # unroll's policy_version names is one fixed function of the raw
      # observation, and the ratio pi/mu compares like with like; (2) every
      # training step counts exactly once, while act() also sees evaluation
      # envs and the extra rows for truncated episodes' final observations;
      # (3) the inference thread does no extra work per call.
      with self._stats_lock:
        self._obs_normalizer.update(
            observation[1:].reshape((-1,) + self.observation_spec.shape))
    if cfg.reward_clipping == "abs_one":
      rewards = np.clip(rewards, -1.0, 1.0)
    if self._reward_scaler is not None:
      self._reward_scaler.update(rewards, terminated | truncated,
                                 batch.env_ids)
      rewards = self._reward_scaler.scale(rewards).numpy()

    remaining = 1.0
    if cfg.total_learner_steps:
      remaining = max(0.0, 1.0 - step / cfg.total_learner_steps)
    learning_rate = cfg.learning_rate * (
        remaining if cfg.anneal_learning_rate else 1.0)
    clip_ratio = cfg.clip_ratio * (remaining if cfg.anneal_clip_ratio else 1.0)
    self._optimizer.learning_rate.assign(learning_rate)

    # One shuffled order of the T*B transitions per epoch; the update runs
    # all epochs and minibatches in one graph call (4x faster than a Python
    # loop of per-minibatch calls for a HalfCheetah update on CPU: 0.1 s vs
    # 0.4 s for 320 minibatches).
    order = np.stack([self._shuffle_rng.permutation(t * b)
                      for _ in range(cfg.num_epochs)]).astype(np.int32)
    out = self._update_fn(observation, raw_action, rewards, terminated,
                          truncated, bootstrap_value, behaviour_log_prob,
                          order, np.float32(clip_ratio))
    result = {name: float(value) for name, value in out.items()}
    if cfg.loss == "kl_penalty":
      self._kl_coef.assign(loss_lib.adapt_kl_coef(
          float(self._kl_coef.numpy()), result["ppo/update_kl_final"],
          cfg.kl_target))
    self._step_counter.assign_add(1)
    result.update({
        "perf/policy_lag": policy_lag,
        "ppo/learning_rate": learning_rate,
        "ppo/clip_ratio": clip_ratio,
    })
    if self._reward_scaler is not None:
      result["ppo/reward_scale"] = float(
          self._reward_scaler.return_stats.std.numpy())
    return result

  def _time_major(self, batch: Unroll):
    """Unroll [B, T+1, ...] -> time-major training inputs.

    Returns observation [T+1, B, ...] and, for the T transitions t -> t+1,
    raw_action [T, B, ...] and behaviour_log_prob [T, B] (taken at step t),
    rewards, terminated, truncated and bootstrap_value [T, B] (stored at step
    t+1: SEED's layout puts a transition's outcome on the step it leads to,
    so step 0's flags belong to the previous unroll).
    """
    t = self.unroll_length

    def time_major(x, dtype=None):
      x = np.swapaxes(np.asarray(x), 0, 1)
      return x if dtype is None else x.astype(dtype, copy=False)

    raw_action = (batch.extras[RAW_ACTION] if self._continuous
                  else batch.action)
    return (time_major(batch.observation),
            time_major(raw_action)[:t],
            time_major(batch.reward, np.float32)[1:],
            time_major(batch.terminated, np.bool_)[1:],
            time_major(batch.truncated, np.bool_)[1:],
            time_major(batch.bootstrap_value, np.float32)[1:],
            time_major(batch.extras[LOG_PROB], np.float32)[:t])

  def checkpoint_objects(self) -> Dict[str, Any]:
    objects = {"network": self._network, "optimizer": self._optimizer,
               "step": self._step_counter, "kl_coef": self._kl_coef}
    if self._obs_normalizer is not None:
      objects["observation_normalizer"] = self._obs_normalizer
    if self._reward_scaler is not None:
      objects["reward_scaler"] = self._reward_scaler
    return objects

  def stop(self) -> None:
    self._queue.stop()

  # ---- compiled functions ------------------------------------------------

  def _preprocess(self, observation: tf.Tensor) -> tf.Tensor:
    if self._obs_normalizer is None:
      return observation  # torsos cast (and scale frames) themselves
    return self._obs_normalizer.normalize(observation)

  def _raw_action_spec(self, leading) -> tf.TensorSpec:
    if self._continuous:
      return tf.TensorSpec(leading + self.action_spec.shape, tf.float32)
    return tf.TensorSpec(leading, self.action_spec.dtype)

  def _make_act_fn(self):
    obs_spec = self.observation_spec
    network, distribution = self._network, self._distribution
    generator = self._generator

    @tf.function(input_signature=[
        tf.TensorSpec((None,) + obs_spec.shape, obs_spec.dtype),
        tf.TensorSpec([None], tf.bool)])
    def act_fn(observation, eval_mask):
      params, value = network(self._preprocess(observation))
      sampled, sampled_raw = distribution.sample(params, generator)
      greedy, greedy_raw = distribution.mode(params)
      mask = tf.reshape(eval_mask, [-1] + [1] * (sampled.shape.rank - 1))
      action = tf.where(mask, greedy, sampled)
      raw_action = tf.where(mask, greedy_raw, sampled_raw)
      log_prob = distribution.log_prob(params, raw_action)
      return action, raw_action, log_prob, value

    return act_fn

  def _time_major_signature(self):
    obs_spec = self.observation_spec
    return [
        tf.TensorSpec((None, None) + obs_spec.shape, obs_spec.dtype),
        self._raw_action_spec((None, None)),
        tf.TensorSpec([None, None], tf.float32),
        tf.TensorSpec([None, None], tf.bool),
        tf.TensorSpec([None, None], tf.bool),
        tf.TensorSpec([None, None], tf.float32)]

  def _targets(self, observation, raw_action, rewards, terminated, truncated,
               bootstrap_value):
    """Values, GAE and the proximal policy of a time-major batch.

    Args:
      observation: [T+1, B, ...]; raw_action [T, B, ...]; rewards,
        terminated, truncated, bootstrap_value [T, B] (see `_time_major`).

    Returns:
      values [T, B], advantages [T, B], returns [T, B], the policy params
      [T, B, P] and log pi(a_t|x_t) [T, B] under the current weights.
    """
    cfg, distribution = self.config, self._distribution
    shape = tf.shape(observation)
    t1, b = shape[0], shape[1]
    flat_obs = tf.reshape(observation, tf.concat([[t1 * b], shape[2:]], 0))
    params, value = self._network(self._preprocess(flat_obs))
    value = tf.reshape(value, [t1, b])
    params = tf.reshape(params, [t1, b, distribution.num_params])
    advantages, returns = gae_lib.unroll_gae(
        value, rewards, terminated, truncated, bootstrap_value, cfg.gamma,
        cfg.gae_lambda)
    values, params = value[:-1], params[:-1]
    flat_params = tf.reshape(params, [-1, distribution.num_params])
    flat_actions = tf.reshape(
        raw_action, tf.concat([[-1], tf.shape(raw_action)[2:]], axis=0))
    log_prob = tf.reshape(distribution.log_prob(flat_params, flat_actions),
                          tf.shape(values))
    return values, advantages, returns, params, log_prob

  def _make_targets_fn(self):
    return tf.function(self._targets,
                       input_signature=self._time_major_signature())

  def _minibatch_step(self, observation, raw_action, behaviour_log_prob,
                      advantages, returns, old_values, prox_params,
                      prox_log_prob, clip_ratio):
    """One gradient step on N transitions ([N, ...]); returns its metrics."""
    cfg, distribution = self.config, self._distribution
    variables = self._network.trainable_variables
    with tf.GradientTape() as tape:
      params, values = self._network(self._preprocess(observation))
      log_prob = distribution.log_prob(params, raw_action)
      kl = (distribution.kl(prox_params, params)
            if cfg.loss == "kl_penalty" else None)
      total, metrics = loss_lib.ppo_loss(
          log_prob, behaviour_log_prob, advantages, values, returns,
          distribution.entropy(params),
          loss_type=cfg.loss, clip_ratio=clip_ratio, old_values=old_values,
          value_clip=cfg.value_clip, kl=kl,
          kl_coef=tf.convert_to_tensor(self._kl_coef),
          kl_target=cfg.kl_target, kl_cutoff_factor=cfg.kl_cutoff_factor,
          kl_cutoff_coef=cfg.kl_cutoff_coef, entropy_cost=cfg.entropy_cost,
          value_cost=cfg.value_cost,
          normalize_advantage=cfg.normalize_advantages)
    gradients = tape.gradient(total, variables)
    metrics["ppo/grad_norm"] = tf.linalg.global_norm(gradients)
    # The KL from the start of the update, before this step (drives early
    # stopping; the same estimator as ppo/approx_kl).
    log_ratio = tf.stop_gradient(log_prob) - prox_log_prob
    metrics["ppo/update_kl"] = tf.reduce_mean(
        tf.exp(log_ratio) - 1.0 - log_ratio)
    self._optimizer.apply_gradients(zip(gradients, variables))
    return metrics

  def _make_update_fn(self):
    cfg, distribution = self.config, self._distribution
    num_minibatches = cfg.num_minibatches
    early_stop_kl = cfg.early_stop_kl

    @tf.function(input_signature=self._time_major_signature() + [
        tf.TensorSpec([None, None], tf.float32),
        tf.TensorSpec([None, None], tf.int32),
        tf.TensorSpec([], tf.float32)])
    def update_fn(observation, raw_action, rewards, terminated, truncated,
                  bootstrap_value, behaviour_log_prob, order, clip_ratio):
      """A whole PPO update; order [num_epochs, T*B] shuffles each epoch."""
      target_args = (observation, raw_action, rewards, terminated, truncated,
                     bootstrap_value)
      values, advantages, returns, prox_params, prox_log_prob = (
          self._targets(*target_args))

      def flat(x):
        return tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], axis=0))

      obs_flat = flat(observation[:-1])
      action_flat, behaviour_flat = flat(raw_action), flat(behaviour_log_prob)
      old_values, prox_params = flat(values), flat(prox_params)
      prox_log_prob = flat(prox_log_prob)
      advantages, returns = flat(advantages), flat(returns)
      explained_variance = 1.0 - (tf.math.reduce_variance(returns - old_values)
                                  / tf.math.reduce_variance(returns))
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
          idx = order[epoch, (m * n) // num_minibatches:
                      ((m + 1) * n) // num_minibatches]
          metrics = self._minibatch_step(
              tf.gather(obs_flat, idx), tf.gather(action_flat, idx),
              tf.gather(behaviour_flat, idx), tf.gather(advantages, idx),
              tf.gather(returns, idx), tf.gather(old_values, idx),
              tf.gather(prox_params, idx), tf.gather(prox_log_prob, idx),
              clip_ratio)
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
      out.update({
          "ppo/explained_variance": explained_variance,
          "ppo/epochs": tf.cast(count, tf.float32) / num_minibatches,
          "ppo/early_stopped": tf.cast(stopped, tf.float32),
          "ppo/advantage_mean": tf.reduce_mean(advantages),
          "ppo/return_mean": tf.reduce_mean(returns),
      })
      if cfg.loss == "kl_penalty":
        params, _ = self._network(self._preprocess(obs_flat))
        out["ppo/update_kl_final"] = tf.reduce_mean(
            distribution.kl(prox_params, params))
      return out

    return update_fn

  # ---- validation --------------------------------------------------------

  def _check_unroll(self, unroll: Unroll) -> None:
    b, t1 = unroll.batch_size, self.unroll_length + 1

    def check(name, array, shape, dtype=None):
      array = np.asarray(array)
      if tuple(array.shape) != tuple(shape):
        raise ValueError(f"Unroll.{name}: shape {list(array.shape)}, expected "
                         f"{list(shape)} (batch {b}, unroll_length + 1 = {t1})")
      if dtype is not None and array.dtype != np.dtype(dtype):
        raise ValueError(f"Unroll.{name}: dtype {array.dtype.name}, expected "
                         f"{np.dtype(dtype).name}")

    check("env_ids", unroll.env_ids, (b,))
    check("observation", unroll.observation,
          (b, t1) + self.observation_spec.shape, self.observation_spec.dtype)
    check("action", unroll.action, (b, t1) + self.action_spec.shape,
          self.action_spec.dtype)
    for name in ("reward", "bootstrap_value", "policy_version"):
      check(name, getattr(unroll, name), (b, t1))
    for name in ("terminated", "truncated"):
      check(name, getattr(unroll, name), (b, t1), np.bool_)
    needed = [LOG_PROB] + ([RAW_ACTION] if self._continuous else [])
    for name in needed:
      if name not in unroll.extras:
        raise ValueError(f"Unroll.extras lacks {name!r} (stored by "
                         f"PPOAgent.act); has {sorted(unroll.extras)}")
    check(f"extras[{LOG_PROB!r}]", unroll.extras[LOG_PROB], (b, t1))
    if self._continuous:
      check(f"extras[{RAW_ACTION!r}]", unroll.extras[RAW_ACTION],
            (b, t1) + self.action_spec.shape)
    if unroll.core_state:
      raise ValueError(f"Unroll.core_state: PPO is feed-forward and expects "
                       f"(), got {len(unroll.core_state)} arrays")
    if b and self._reward_scaler is not None and (
        np.min(unroll.env_ids) < 0 or np.max(unroll.env_ids) >= self.num_envs):
      raise ValueError(f"Unroll.env_ids must be in [0, {self.num_envs}), got "
                       f"{np.min(unroll.env_ids)}..{np.max(unroll.env_ids)}")


def create_agent(observation_spec: ArraySpec, action_spec: ArraySpec,
                 num_envs: int) -> PPOAgent:
  """Builds the agent with the gin-bound PPOConfig.

  Discrete action specs get a Categorical policy; float32 vector specs a
  Gaussian (squashed or clipped into the Box when the spec has bounds).
  """
  return PPOAgent(observation_spec, action_spec, num_envs, PPOConfig())
