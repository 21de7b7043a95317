"""The V-trace (IMPALA) agent as the learner runtime drives it."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import numpy as np
import tensorflow as tf

from seed_rl.agents.vtrace import distributions
from seed_rl.agents.vtrace import loss as loss_lib
from seed_rl.agents.vtrace import networks
from seed_rl.agents.vtrace.config import VtraceConfig
from seed_rl.agents.vtrace.unroll_queue import UnrollQueue
from seed_rl.common import optimizers
from seed_rl.common.agent_api import ActInputs, ActOutputs, Agent, Unroll
from seed_rl.common.specs import ArraySpec

# Name of the behaviour distribution parameters in ActOutputs.extras and
# Unroll.extras (categorical logits; mean and log std for a Gaussian).
BEHAVIOUR_PARAMS = "logits"


class VtraceAgent(Agent):
  """IMPALA actor-critic trained with V-trace on a bounded unroll queue."""

  unroll_overlap = 1

  def __init__(self, observation_spec: ArraySpec, action_spec: ArraySpec,
               num_envs: int, config: Optional[VtraceConfig] = None):
    super().__init__(observation_spec, action_spec, num_envs)
    self.config = config if config is not None else VtraceConfig()
    self.unroll_length = self.config.unroll_length
    self._distribution = distributions.for_action_spec(action_spec)
    self._network = networks.ActorCriticNetwork(
        torso_fn=self.config.torso,
        num_policy_params=self._distribution.num_params,
        action_features=self._distribution.action_features,
        use_lstm=self.config.use_lstm,
        lstm_size=self.config.lstm_size,
        separate_value_torso=self.config.separate_value_torso,
        name="vtrace_network")
    networks.build_network(self._network, observation_spec, action_spec)
    self._optimizer = optimizers.make_optimizer(
        self.config.optimizer,
        optimizers.learning_rate_schedule(
            self.config.learning_rate,
            decay_steps=(self.config.total_learner_steps
                         if self.config.lr_schedule == "linear" else None)),
        epsilon=self.config.optimizer_epsilon,
        max_grad_norm=self.config.max_grad_norm,
        rmsprop_decay=self.config.rmsprop_decay,
        momentum=self.config.rmsprop_momentum)
    # Slots exist before any restore, so a checkpoint loads immediately.
    self._optimizer.build(self._network.trainable_variables)
    self._step_counter = tf.Variable(0, dtype=tf.int64, trainable=False,
                                     name="learner_step")
    self._queue = UnrollQueue(self.config.queue_capacity,
                              self.config.batch_size)
    self._num_core_arrays = len(self._network.initial_state(1))
    self._act_fn = self._make_act_fn()
    self._train_fn = self._make_train_fn()

  # ---- Agent API ---------------------------------------------------------

  @property
  def step_counter(self) -> tf.Variable:
    return self._step_counter

  @property
  def network(self) -> networks.ActorCriticNetwork:
    return self._network

  def initial_core_state(self, batch_size: int):
    return tuple(s.numpy() for s in self._network.initial_state(batch_size))

  def act(self, inputs: ActInputs) -> ActOutputs:
    batch_size = int(inputs.observation.shape[0])
    self.observation_spec.check_batch(inputs.observation, batch_size,
                                      "ActInputs.observation")
    self.action_spec.check_batch(inputs.prev_action, batch_size,
                                 "ActInputs.prev_action")
    args = [inputs.observation, inputs.prev_action,
            np.asarray(inputs.reward, np.float32),
            np.asarray(inputs.done, np.bool_),
            np.asarray(inputs.eval_mask, np.bool_)]
    if len(inputs.core_state) != self._num_core_arrays:
      raise ValueError(
          f"ActInputs.core_state has {len(inputs.core_state)} arrays, "
          f"expected {self._num_core_arrays} (use initial_core_state(B))")
    if self.config.use_lstm:
      args.append(tuple(np.asarray(s, np.float32) for s in inputs.core_state))
    action, value, params, core_state = self._act_fn(*args)
    return ActOutputs(
        action=action.numpy(),
        value=value.numpy(),
        extras={BEHAVIOUR_PARAMS: params.numpy()},
        core_state=tuple(s.numpy() for s in core_state))

  def add_unrolls(self, unrolls: Unroll) -> None:
    self._check_unroll(unrolls)
    self._queue.put(unrolls)

  def train_step(self) -> Mapping[str, float]:
    batch = self._queue.get_batch()
    if batch is None:
      return {}
    policy_lag = float(self._step_counter.numpy()) - float(
        np.mean(batch.policy_version))

    def time_major(x, dtype=None):
      x = np.swapaxes(x, 0, 1)
      return x if dtype is None else x.astype(dtype, copy=False)

    metrics = self._train_fn(
        time_major(batch.observation), time_major(batch.prev_action),
        time_major(batch.action), time_major(batch.reward, np.float32),
        time_major(batch.terminated), time_major(batch.truncated),
        time_major(batch.bootstrap_value, np.float32),
        time_major(batch.extras[BEHAVIOUR_PARAMS], np.float32),
        tuple(np.asarray(s, np.float32) for s in batch.core_state))
    result = {name: float(value) for name, value in metrics.items()}
    result["perf/policy_lag"] = policy_lag
    return result

  def checkpoint_objects(self) -> Dict[str, Any]:
    return {"network": self._network, "optimizer": self._optimizer,
            "step": self._step_counter}

  def stop(self) -> None:
    self._queue.stop()

  # ---- compiled functions ------------------------------------------------

  def _state_spec(self, batch_size):
    return tuple(
        tf.TensorSpec([batch_size, s.shape[-1]], tf.float32)
        for s in self._network.initial_state(1))

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

    @tf.function(input_signature=signature)
    def act_fn(observation, prev_action, reward, done, eval_mask, *state):
      core_state = state[0] if state else ()
      params, value, new_state = network.step(observation, prev_action, reward,
                                              done, core_state)
      sampled = distribution.sample(params)
      greedy = distribution.mode(params)
      mask = tf.reshape(eval_mask, [-1] + [1] * (sampled.shape.rank - 1))
      action = tf.where(mask, greedy, sampled)
      return action, value, params, new_state

    return act_fn

  def _make_train_fn(self):
    cfg = self.config
    obs_spec, act_spec = self.observation_spec, self.action_spec
    t1, b = cfg.unroll_length + 1, cfg.batch_size
    signature = [
        tf.TensorSpec((t1, b) + obs_spec.shape, obs_spec.dtype),
        tf.TensorSpec((t1, b) + act_spec.shape, act_spec.dtype),
        tf.TensorSpec((t1, b) + act_spec.shape, act_spec.dtype),
        tf.TensorSpec([t1, b], tf.float32),
        tf.TensorSpec([t1, b], tf.bool),
        tf.TensorSpec([t1, b], tf.bool),
        tf.TensorSpec([t1, b], tf.float32),
        tf.TensorSpec([t1, b, self._distribution.num_params], tf.float32),
        self._state_spec(b),
    ]
    network, distribution = self._network, self._distribution
    optimizer, step_counter = self._optimizer, self._step_counter

    @tf.function(input_signature=signature)
    def train_fn(observation, prev_action, action, reward, terminated,
                 truncated, bootstrap_value, behaviour_params, core_state):
      done = tf.logical_or(terminated, truncated)
      variables = network.trainable_variables
      with tf.GradientTape() as tape:
        params, baseline = network.unroll(observation, prev_action, reward,
                                          done, core_state)
        total, metrics = loss_lib.impala_loss(
            distribution, params, baseline, action, behaviour_params,
            loss_lib.clip_rewards(reward, cfg.reward_clipping), terminated,
            truncated, bootstrap_value,
            discount=cfg.discount,
            baseline_cost=cfg.baseline_cost,
            entropy_cost=cfg.entropy_cost,
            clip_rho_threshold=cfg.clip_rho_threshold,
            clip_c_threshold=cfg.clip_c_threshold,
            clip_pg_rho_threshold=cfg.clip_pg_rho_threshold)
      gradients = tape.gradient(total, variables)
      metrics["loss/grad_norm"] = tf.linalg.global_norm(gradients)
      metrics["perf/learning_rate"] = tf.convert_to_tensor(
          optimizer.learning_rate, tf.float32)
      optimizer.apply_gradients(zip(gradients, variables))
      step_counter.assign_add(1)
      return metrics

    return train_fn

  # ---- validation --------------------------------------------------------

  def _check_unroll(self, unroll: Unroll) -> None:
    b, t1 = unroll.batch_size, self.unroll_length + 1

    def check(name, array, shape, dtype=None):
      if tuple(array.shape) != tuple(shape):
        raise ValueError(f"Unroll.{name}: shape {list(array.shape)}, expected "
                         f"{list(shape)} (batch {b}, unroll_length + 1 = {t1})")
      if dtype is not None and array.dtype != np.dtype(dtype):
        raise ValueError(f"Unroll.{name}: dtype {array.dtype.name}, expected "
                         f"{np.dtype(dtype).name}")

    check("observation", unroll.observation,
          (b, t1) + self.observation_spec.shape, self.observation_spec.dtype)
    for name in ("prev_action", "action"):
      check(name, getattr(unroll, name), (b, t1) + self.action_spec.shape,
            self.action_spec.dtype)
    for name in ("reward", "bootstrap_value"):
      check(name, getattr(unroll, name), (b, t1))
    for name in ("terminated", "truncated"):
      check(name, getattr(unroll, name), (b, t1), np.bool_)
    check("policy_version", unroll.policy_version, (b, t1))
    if BEHAVIOUR_PARAMS not in unroll.extras:
      raise ValueError(f"Unroll.extras lacks {BEHAVIOUR_PARAMS!r} (the "
                       f"behaviour policy's parameters from act()); has "
                       f"{sorted(unroll.extras)}")
    check(f"extras[{BEHAVIOUR_PARAMS!r}]", unroll.extras[BEHAVIOUR_PARAMS],
          (b, t1, self._distribution.num_params))
    expected_state = self.initial_core_state(b)
    if len(unroll.core_state) != len(expected_state):
      raise ValueError(f"Unroll.core_state has {len(unroll.core_state)} "
                       f"arrays, expected {len(expected_state)}")
    for i, (state, expected) in enumerate(
        zip(unroll.core_state, expected_state)):
      check(f"core_state[{i}]", state, expected.shape)


def create_agent(observation_spec: ArraySpec, action_spec: ArraySpec,
                 num_envs: int) -> VtraceAgent:
  """Builds the agent with the gin-bound VtraceConfig."""
  return VtraceAgent(observation_spec, action_spec, num_envs, VtraceConfig())
