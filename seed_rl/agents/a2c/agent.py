"""The A2C agent as the learner runtime drives it.

Data flow: `act` (inference thread) samples from the current policy (the
mode for evaluation envs) and reports V(x), kept by the runtime as the
bootstrap value of truncated episodes; `add_unrolls` puts unrolls on a
bounded queue (back-pressure keeps the data on-policy up to a learner step
or two); `train_step` (training thread) takes `batch_size` unrolls and runs
one gradient step of loss.a2c_loss on them, in one compiled graph call.

Continuous actions: the Gaussian's raw sample (before clip / tanh) is stored
in the unroll as extras['raw_action'], so the loss re-evaluates exactly the
density the action was drawn from (see common/distributions.py).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import numpy as np
import tensorflow as tf

from seed_rl.agents.a2c import loss as loss_lib
from seed_rl.agents.a2c import networks
from seed_rl.agents.a2c.config import A2CConfig
from seed_rl.common import agent_api
from seed_rl.common import diagnostics
from seed_rl.common import distributions
from seed_rl.common import optimizers
from seed_rl.common.agent_api import ActInputs, ActOutputs, Agent, Unroll
from seed_rl.common.specs import ArraySpec
from seed_rl.common.unroll_queue import UnrollQueue

# Name in ActOutputs.extras / Unroll.extras (continuous actions only):
# float32 [B, D] the Gaussian sample before clip / tanh.
RAW_ACTION = "raw_action"


class A2CAgent(Agent):
  """Synchronous advantage actor-critic on a bounded unroll queue."""

  unroll_overlap = 1

  def __init__(
    self,
    observation_spec: ArraySpec,
    action_spec: ArraySpec,
    num_envs: int,
    config: Optional[A2CConfig] = None,
  ):
    super().__init__(observation_spec, action_spec, num_envs)
    cfg = self.config = config if config is not None else A2CConfig()
    self.unroll_length = cfg.unroll_length
    self._distribution = distributions.for_action_spec(
      action_spec, cfg.bound_handling
    )
    self._continuous = not action_spec.is_discrete
    self._network = networks.make_network(
      cfg, self._distribution, observation_spec
    )
    self._step_counter = optimizers.learner_step_counter()
    self._optimizer = optimizers.make_optimizer(
      cfg.optimizer,
      optimizers.learning_rate_schedule(
        cfg.learning_rate,
        decay_steps=(
          cfg.total_learner_steps if cfg.lr_schedule == "linear" else None
        ),
      ),
      epsilon=cfg.optimizer_epsilon,
      max_grad_norm=cfg.max_grad_norm,
      rmsprop_decay=cfg.rmsprop_decay,
      variables=self._network.trainable_variables,
      clock=self._step_counter,
    )
    self._generator = tf.random.Generator.from_seed(cfg.seed)
    self._queue = UnrollQueue(
      cfg.queue_capacity or cfg.batch_size, cfg.batch_size
    )
    self._act_fn = self._make_act_fn()
    self._train_fn = self._make_train_fn()

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

  def act(self, inputs: ActInputs) -> ActOutputs:
    inputs = agent_api.check_act_inputs(inputs, self.observation_spec)
    action, raw_action, value = self._act_fn(
      inputs.observation, inputs.eval_mask
    )
    extras = {RAW_ACTION: raw_action.numpy()} if self._continuous else {}
    return ActOutputs(
      action=action.numpy().astype(self.action_spec.dtype, copy=False),
      value=value.numpy(),
      extras=extras,
      core_state=(),
    )

  def add_unrolls(self, unrolls: Unroll) -> None:
    agent_api.check_unroll(
      unrolls,
      self.unroll_length,
      self.observation_spec,
      self.action_spec,
      required_extras=(
        {RAW_ACTION: self.action_spec.shape} if self._continuous else None
      ),
    )
    self._queue.put(unrolls)

  def train_step(self) -> Mapping[str, float]:
    batch = self._queue.get_batch()
    if batch is None:
      return {}
    cfg, t = self.config, self.unroll_length
    # Steps 0..T-1 are trained on (step T only bootstraps).
    policy_lag = agent_api.policy_lag(
      self._step_counter.numpy(), batch.policy_version[:, :t]
    )
    time_major = agent_api.time_major
    raw_action = batch.extras[RAW_ACTION] if self._continuous else batch.action
    # SEED's layout puts a transition's reward and episode-end flags on the
    # step it leads to, hence [1:] for the T transitions t -> t+1.
    metrics = self._train_fn(
      time_major(batch.observation),
      time_major(raw_action)[:t],
      time_major(batch.reward, np.float32)[1:],
      time_major(batch.terminated, np.bool_)[1:],
      time_major(batch.truncated, np.bool_)[1:],
      time_major(batch.bootstrap_value, np.float32)[1:],
    )
    result = {name: float(value) for name, value in metrics.items()}
    result["perf/policy_lag"] = policy_lag
    result[agent_api.SAMPLES_METRIC] = float(t * cfg.batch_size)
    return result

  def checkpoint_objects(self) -> Dict[str, Any]:
    return {
      "network": self._network,
      "optimizer": self._optimizer,
      "step": self._step_counter,
    }

  def stop(self) -> None:
    self._queue.stop()

  # ---- compiled functions ------------------------------------------------

  def _raw_action_spec(self, leading) -> tf.TensorSpec:
    if self._continuous:
      return tf.TensorSpec(leading + self.action_spec.shape, tf.float32)
    return tf.TensorSpec(leading, self.action_spec.dtype)

  def _make_act_fn(self):
    obs_spec = self.observation_spec
    network, distribution = self._network, self._distribution
    generator = self._generator

    @tf.function(
      input_signature=[
        tf.TensorSpec((None,) + obs_spec.shape, obs_spec.dtype),
        tf.TensorSpec([None], tf.bool),
      ]
    )
    def act_fn(observation, eval_mask):
      """-> env action [B, ...], raw action [B, ...], V(x) [B]."""
      params, value = network(observation)
      sampled, sampled_raw = distribution.sample(params, generator)
      greedy, greedy_raw = distribution.mode(params)
      mask = tf.reshape(eval_mask, [-1] + [1] * (sampled.shape.rank - 1))
      action = tf.where(mask, greedy, sampled)
      raw_action = tf.where(mask, greedy_raw, sampled_raw)
      return action, raw_action, value

    return act_fn

  def _make_train_fn(self):
    cfg = self.config
    obs_spec = self.observation_spec
    t, b = cfg.unroll_length, cfg.batch_size
    network, distribution = self._network, self._distribution
    optimizer, step_counter = self._optimizer, self._step_counter
    num_params = distribution.num_params

    @tf.function(
      input_signature=[
        tf.TensorSpec((t + 1, b) + obs_spec.shape, obs_spec.dtype),
        self._raw_action_spec((t, b)),
        tf.TensorSpec([t, b], tf.float32),
        tf.TensorSpec([t, b], tf.bool),
        tf.TensorSpec([t, b], tf.bool),
        tf.TensorSpec([t, b], tf.float32),
      ]
    )
    def train_fn(
      observation, raw_action, rewards, terminated, truncated, bootstrap_value
    ):
      """One gradient step on observation [T+1, B, ...] and the T
      transitions' raw_action [T, B, ...] and rewards / flags [T, B]."""
      if cfg.reward_clipping == "abs_one":
        rewards = tf.clip_by_value(rewards, -1.0, 1.0)
      flat_obs = tf.reshape(observation, ((t + 1) * b,) + obs_spec.shape)
      variables = network.trainable_variables
      with tf.GradientTape() as tape:
        params, values = network(flat_obs)
        total, metrics = loss_lib.a2c_loss(
          distribution,
          tf.reshape(params, [t + 1, b, num_params]),
          tf.reshape(values, [t + 1, b]),
          raw_action,
          rewards,
          terminated,
          truncated,
          bootstrap_value,
          discount=cfg.discount,
          gae_lambda=cfg.gae_lambda,
          entropy_cost=cfg.entropy_cost,
          value_cost=cfg.value_cost,
          normalize_advantages=cfg.normalize_advantages,
        )
      gradients = tape.gradient(total, variables)
      metrics.update(diagnostics.gradient_norms(gradients, variables))
      optimizer.apply_gradients(zip(gradients, variables))
      metrics["opt/learning_rate"] = tf.convert_to_tensor(
        optimizer.learning_rate
      )
      metrics["errors/nonfinite_updates"] = tf.cast(
        optimizer.nonfinite_updates, tf.float32
      )
      step_counter.assign_add(1)
      return metrics

    return train_fn


def create_agent(
  observation_spec: ArraySpec, action_spec: ArraySpec, num_envs: int
) -> A2CAgent:
  """Builds the agent with the gin-bound A2CConfig.

  Discrete action specs get a Categorical policy; float32 vector specs a
  Gaussian (clipped or squashed into the Box when the spec has bounds).
  """
  return A2CAgent(observation_spec, action_spec, num_envs, A2CConfig())
