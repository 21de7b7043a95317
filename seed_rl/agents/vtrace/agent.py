"""The V-trace (IMPALA) agent as the learner runtime drives it."""

from __future__ import annotations

import contextlib
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
import tensorflow as tf

from seed_rl.agents import frame_stacks
from seed_rl.agents import learning
from seed_rl.agents import multi_device
from seed_rl.agents import queue_fed
from seed_rl.agents import rewards as rewards_lib
from seed_rl.agents.vtrace import loss as loss_lib
from seed_rl.agents.vtrace import networks
from seed_rl.agents.vtrace import transitions
from seed_rl.agents.vtrace.config import VtraceConfig
from seed_rl.common import agent_api
from seed_rl.common import devices
from seed_rl.agents import distributions
from seed_rl.common import optimizers
from seed_rl.common.agent_api import ActInputs, ActOutputs, Unroll
from seed_rl.common.specs import ArraySpec

# Name of the behaviour distribution parameters in ActOutputs.extras and
# Unroll.extras (categorical logits; mean and log std for a Gaussian).
BEHAVIOUR_PARAMS = "logits"

# Trains on several devices when LearnerConfig.training_devices is set (see
# seed_rl/common/devices.py and seed_rl/agents/multi_device.py).
SUPPORTS_TRAINING_DEVICES = True


def policy_distribution(
  action_spec: ArraySpec,
) -> distributions.ActionDistribution:
  """Categorical for discrete specs, an unbounded DiagGaussian for [D] floats.

  A Box's bounds are ignored on purpose: V-trace re-evaluates log pi at the
  stored action, so the environment gets the raw Gaussian sample (keeping it
  inside the Box is the environment's job) and env action == raw action.
  """
  return distributions.for_action_spec(
    action_spec.replace(minimum=None, maximum=None)
  )


class VtraceAgent(queue_fed.QueueAgent):
  """IMPALA actor-critic trained with V-trace on a bounded unroll queue."""

  # Frame stacks are rebuilt in the training step (agents/frame_stacks.py).
  trains_on_frames = True

  def __init__(
    self,
    observation_spec: ArraySpec,
    action_spec: ArraySpec,
    num_envs: int,
    config: Optional[VtraceConfig] = None,
  ):
    super().__init__(observation_spec, action_spec, num_envs)
    self.config = config if config is not None else VtraceConfig()
    self.unroll_length = self.config.unroll_length
    self._distribution = policy_distribution(action_spec)
    # The learner's devices (default: TF's one device, no strategy).
    self._placement = devices.current()
    self._transitions = self.config.minibatch_unit == "transition"
    strategy = self._placement.strategy
    if strategy is not None:
      per_update = "unroll_length * " if self._transitions else ""
      devices.shard_size(
        self._units_per_round() // self.config.num_minibatches,
        self._placement,
        f"VtraceConfig.{per_update}batch_size / num_minibatches",
      )
    # Drawn from TF's global seed (learner_main's --seed), so acting stays
    # reproducible under tf.random.set_seed like stateful random ops.
    seed = int(tf.random.uniform([], maxval=tf.int64.max, dtype=tf.int64))
    device = self._placement.inference_device
    with tf.device(device) if device else contextlib.nullcontext():
      self._generator = tf.random.Generator.from_seed(seed)
    # Weights, optimizer slots and the step counter are mirrored on every
    # training device under a strategy (the generator above is not: it
    # only samples actions, on the inference device).
    with strategy.scope() if strategy else contextlib.nullcontext():
      self._build_variables()
    self._shuffle_rng = np.random.default_rng(
      int(self._generator.uniform_full_int([], tf.int64)) % 2**32
    )
    self._init_queue(self.config.queue_capacity, self.config.batch_size)
    # Per-array core state shape after [B]; [] when feed-forward.
    self._core_state_shapes = [
      tuple(s.shape[1:]) for s in self._network.initial_state(1)
    ]
    self._proximal = self.config.surrogate_anchor == "proximal"
    self._round_targets = self.config.targets == "round"
    self._act_fn = self._make_act_fn()
    self._train_fn = (
      self._compile(
        transitions.signature(
          self.config,
          observation_spec,
          action_spec,
          self._distribution.num_params,
        ),
        transitions.loss_and_gradients_fn(
          self.config, self._network, self._distribution
        ),
      )
      if self._transitions
      else self._make_train_fn()
    )
    self._round_fn = (
      self._make_round_fn() if self._proximal or self._round_targets else None
    )

  def _units_per_round(self) -> int:
    """What a round's minibatches split: its unrolls, or its T*B steps."""
    cfg = self.config
    steps = cfg.unroll_length if self._transitions else 1
    return steps * cfg.batch_size

  def _build_variables(self) -> None:
    """The network, the step counter and the optimizer (with its slots)."""
    self._network = networks.ActorCriticNetwork(
      torso_fn=self.config.torso,
      num_policy_params=self._distribution.num_params,
      action_features=networks.action_features(self._distribution),
      use_lstm=self.config.use_lstm,
      lstm_units=self.config.lstm_units,
      # VtraceConfig.__post_init__ resolves None to `not use_lstm`.
      separate_value_torso=bool(self.config.separate_value_torso),
      name="vtrace_network",
    )
    networks.build_network(
      self._network, self.observation_spec, self.action_spec
    )
    self._step_counter = optimizers.learner_step_counter()
    self._optimizer = learning.scheduled_optimizer(
      self.config,
      self._network.trainable_variables,
      self._step_counter,
      momentum=self.config.rmsprop_momentum,
    )

  # ---- Agent API ---------------------------------------------------------

  @property
  def network(self) -> networks.ActorCriticNetwork:
    return self._network

  def initial_core_state(self, batch_size: int):
    return tuple(s.numpy() for s in self._network.initial_state(batch_size))

  def act(self, inputs: ActInputs) -> ActOutputs:
    inputs = agent_api.check_act_inputs(
      inputs,
      self.observation_spec,
      self.action_spec,
      len(self._core_state_shapes),
    )
    # Arrays, then the core state (a tuple of arrays) with an LSTM.
    args: List[Union[np.ndarray, Tuple[np.ndarray, ...]]] = [
      inputs.observation,
      inputs.prev_action,
      inputs.reward,
      inputs.done,
      inputs.eval_mask,
    ]
    if self.config.use_lstm:
      args.append(inputs.core_state)
    action, value, params, core_state = self._act_fn(*args)
    return ActOutputs(
      action=action.numpy(),
      value=value.numpy(),
      extras={BEHAVIOUR_PARAMS: params.numpy()},
      core_state=tuple(s.numpy() for s in core_state),
    )

  def greedy_policy(self) -> Tuple[agent_api.GreedyStep, bool]:
    """The mode of the policy (argmax of the logits; the unbounded Gaussian
    mean for continuous actions), as `act` for evaluation rows; recurrent
    with use_lstm."""
    network, distribution = self._network, self._distribution
    action_dtype = self.action_spec.dtype

    def step(observation, prev_action, reward, done, core):
      params, _, core = network.step(
        observation, prev_action, reward, done, core
      )
      return tf.cast(distribution.mode(params)[0], action_dtype), core

    return step, bool(self.config.use_lstm)

  def add_unrolls(self, unrolls: Unroll) -> None:
    agent_api.check_unroll(
      unrolls,
      self.unroll_length,
      self.observation_spec,
      self.action_spec,
      required_extras={BEHAVIOUR_PARAMS: (self._distribution.num_params,)},
      core_state_shapes=self._core_state_shapes,
      trains_on_frames=self.trains_on_frames,
    )
    self._queue.put(unrolls)

  def train_step(self) -> Mapping[str, float]:
    taken = self._next_batch()
    if taken is None:
      return {}
    batch, policy_lag = taken
    cfg = self.config
    time_major = agent_api.time_major
    # [T+1, B, ...] time-major arrays, then [B, ...] core states.
    inputs: Tuple[np.ndarray, ...] = (
      time_major(batch.observation),
      time_major(batch.prev_action),
      time_major(batch.action),
      time_major(batch.reward, np.float32),
      time_major(batch.terminated),
      time_major(batch.truncated),
      time_major(batch.bootstrap_value, np.float32),
      time_major(batch.extras[BEHAVIOUR_PARAMS], np.float32),
    )
    core_state = tuple(np.asarray(s, np.float32) for s in batch.core_state)
    if self._round_fn is not None:
      # The round's policy before its first update (the trust region's
      # anchor) and, with targets 'round', its V-trace targets and
      # advantages, held over the round's updates.
      prox, vs, advantages, stacks, values = self._round_fn(*inputs, core_state)
      if self._transitions:
        inputs = transitions.flatten_round(
          inputs,
          prox,
          vs,
          advantages,
          stacks,
          self._proximal,
          values if cfg.value_clip else None,
        )
      else:
        if self._proximal:
          inputs = inputs + (prox.numpy(),)
        if self._round_targets:
          inputs = inputs + (vs.numpy(), advantages.numpy())
    units = self._units_per_round()
    minibatch = units // cfg.num_minibatches
    sums: Dict[str, float] = {}
    updates = 0
    for _ in range(cfg.num_epochs):
      order = (
        self._shuffle_rng.permutation(units)
        if cfg.num_minibatches > 1
        else np.arange(units)
      )
      for m in range(cfg.num_minibatches):
        idx = order[m * minibatch : (m + 1) * minibatch]
        # The inputs' arrays, then the core state (a tuple of arrays).
        args: Tuple[Union[np.ndarray, Tuple[np.ndarray, ...]], ...]
        if self._transitions:
          args = tuple(tf.gather(x, idx)[None] for x in inputs)
        elif cfg.num_minibatches == 1:
          args = inputs + (core_state,)
        else:
          args = tuple(x[:, idx] for x in inputs) + (
            tuple(s[idx] for s in core_state),
          )
        metrics = self._train_fn(*args)
        for name, value in metrics.items():
          sums[name] = sums.get(name, 0.0) + float(value)
        updates += 1
    return self._step_result(
      {name: value / updates for name, value in sums.items()},
      policy_lag,
      cfg.unroll_length * cfg.batch_size * cfg.num_epochs,
    )

  # ---- compiled functions ------------------------------------------------

  def _state_spec(self, batch_size):
    return tuple(
      tf.TensorSpec([batch_size, s.shape[-1]], tf.float32)
      for s in self._network.initial_state(1)
    )

  def _make_act_fn(self):
    obs_spec, act_spec = self.observation_spec, self.action_spec
    signature = [
      tf.TensorSpec((None,) + obs_spec.shape, obs_spec.dtype),
      tf.TensorSpec((None,) + act_spec.shape, act_spec.dtype),
      tf.TensorSpec([None], tf.float32),
      tf.TensorSpec([None], tf.bool),
      tf.TensorSpec([None], tf.bool),
    ]
    if self.config.use_lstm:
      signature.append(self._state_spec(None))
    network, distribution = self._network, self._distribution
    generator = self._generator
    device = self._placement.inference_device

    @tf.function(input_signature=signature)
    def act_fn(observation, prev_action, reward, done, eval_mask, *state):
      # With training devices, inference reads the first copy of mirrored
      # weights (or the one on `device`).
      with tf.device(device) if device else contextlib.nullcontext():
        core_state = state[0] if state else ()
        params, value, new_state = network.step(
          observation, prev_action, reward, done, core_state
        )
        # Unbounded policies: the env action is the raw action.
        action, _ = learning.sample_actions(
          distribution, params, generator, eval_mask
        )
        return action, value, params, new_state

    return act_fn

  def _batch_signature(self, b: int) -> List[tf.TensorSpec]:
    """B unrolls, time-major [T+1, B]: observation (frames [k-1 + T+1, B,
    H, W] when the learner stacks frames), prev_action, action, reward,
    terminated, truncated, bootstrap_value and behaviour params."""
    obs_spec, act_spec = self.observation_spec, self.action_spec
    t1 = self.config.unroll_length + 1
    return [
      frame_stacks.frames_spec(obs_spec, t1, b),
      tf.TensorSpec((t1, b) + act_spec.shape, act_spec.dtype),
      tf.TensorSpec((t1, b) + act_spec.shape, act_spec.dtype),
      tf.TensorSpec([t1, b], tf.float32),
      tf.TensorSpec([t1, b], tf.bool),
      tf.TensorSpec([t1, b], tf.bool),
      tf.TensorSpec([t1, b], tf.float32),
      tf.TensorSpec([t1, b, self._distribution.num_params], tf.float32),
    ]

  def _train_signature(self):
    """A minibatch of B' = batch_size / num_minibatches unrolls: the
    `_batch_signature` arrays (and with surrogate_anchor 'proximal' the
    round's proximal params [T+1, B', P], with targets 'round' its V-trace
    targets and advantages [T, B']), then the core state."""
    cfg = self.config
    b = cfg.batch_size // cfg.num_minibatches
    batch = self._batch_signature(b)
    return (
      batch
      + ([batch[-1]] if cfg.surrogate_anchor == "proximal" else [])
      + [tf.TensorSpec([cfg.unroll_length, b], tf.float32)]
      * (2 if cfg.targets == "round" else 0)
      + [self._state_spec(b)]
    )

  def _target_settings(self) -> Dict[str, Any]:
    """The V-trace targets' settings, as round_targets and impala_loss take
    them."""
    cfg = self.config
    return dict(
      discount=cfg.discount,
      clip_rho_threshold=cfg.clip_rho_threshold,
      clip_c_threshold=cfg.clip_c_threshold,
      clip_pg_rho_threshold=cfg.clip_pg_rho_threshold,
      trace_lambda=cfg.trace_lambda,
      advantage=cfg.advantage,
    )

  def _make_round_fn(self):
    """Over a whole round's batch under the current weights (the train
    signature's [T+1, B] arrays, then the core state): the policy params
    [T+1, B, P], the V-trace targets and advantages [T, B] with the rhos of
    these weights against the behaviour policy, the trained steps'
    observations (stacks) [T, B, *obs_shape] and their values [T, B]."""
    cfg, obs_spec = self.config, self.observation_spec
    network, distribution = self._network, self._distribution
    signature = self._batch_signature(cfg.batch_size)

    @tf.function(input_signature=signature + [self._state_spec(cfg.batch_size)])
    def round_fn(
      observation,
      prev_action,
      action,
      reward,
      terminated,
      truncated,
      bootstrap_value,
      behaviour_params,
      core,
    ):
      observation = frame_stacks.observations(
        obs_spec, observation, terminated[1:], truncated[1:]
      )
      done = tf.logical_or(terminated, truncated)
      params, baseline = network.unroll(
        observation, prev_action, reward, done, core
      )
      vs, advantages = loss_lib.round_targets(
        distribution,
        params,
        tf.cast(baseline, tf.float32),
        action,
        behaviour_params,
        rewards_lib.clip_rewards(reward, cfg.reward_clipping),
        terminated,
        truncated,
        bootstrap_value,
        **self._target_settings(),
      )
      return (
        tf.cast(params, tf.float32),
        vs,
        advantages,
        observation[:-1],
        tf.cast(baseline[:-1], tf.float32),
      )

    return round_fn

  def _make_train_fn(self):
    cfg, obs_spec = self.config, self.observation_spec
    network, distribution = self._network, self._distribution
    round_targets = cfg.targets == "round"

    def loss_and_gradients(
      observation,
      prev_action,
      action,
      reward,
      terminated,
      truncated,
      bootstrap_value,
      behaviour_params,
      *rest,
    ):
      """Gradients of the mean loss over this [T+1, B'] batch, metrics;
      `rest`: the proximal params with surrogate_anchor 'proximal', the
      round's targets and advantages with targets 'round', then the core
      state."""
      rest, core_state = list(rest[:-1]), rest[-1]
      fixed_targets = (rest.pop(), rest.pop())[::-1] if round_targets else None
      proximal_params = rest[0] if rest else None
      done = tf.logical_or(terminated, truncated)
      observation = frame_stacks.observations(
        obs_spec, observation, terminated[1:], truncated[1:]
      )
      variables = network.trainable_variables
      with tf.GradientTape() as tape:
        params, baseline = network.unroll(
          observation, prev_action, reward, done, core_state
        )
        total, metrics = loss_lib.impala_loss(
          distribution,
          params,
          baseline,
          action,
          behaviour_params,
          rewards_lib.clip_rewards(reward, cfg.reward_clipping),
          terminated,
          truncated,
          bootstrap_value,
          value_cost=cfg.value_cost,
          entropy_cost=cfg.entropy_cost,
          normalize_advantage=cfg.normalize_advantages,
          policy_loss=cfg.policy_loss,
          clip_ratio=cfg.clip_ratio,
          proximal_params=proximal_params,
          fixed_targets=fixed_targets,
          **self._target_settings(),
        )
      return tape.gradient(total, variables), metrics

    return self._compile(self._train_signature(), loss_and_gradients)

  def _compile(self, signature, loss_and_gradients):
    """The training step of `loss_and_gradients` over `signature`'s arrays,
    on the training devices when there are several."""
    args = (
      signature,
      loss_and_gradients,
      self._network,
      self._optimizer,
      self._step_counter,
    )
    strategy = self._placement.strategy
    if strategy is not None:
      return multi_device.compile_train_fn(strategy, *args)
    return learning.compile_train_fn(*args)


def create_agent(
  observation_spec: ArraySpec, action_spec: ArraySpec, num_envs: int
) -> VtraceAgent:
  """Builds the agent with the gin-bound VtraceConfig."""
  return VtraceAgent(observation_spec, action_spec, num_envs, VtraceConfig())
