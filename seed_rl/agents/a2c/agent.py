"""The A2C agent as the learner runtime drives it.

Data flow: `act` (inference thread) samples from the current policy (the
mode for evaluation envs) and reports V(x), kept by the runtime as the
bootstrap value of truncated episodes; `add_unrolls` puts unrolls on a
bounded queue (back-pressure keeps the data on-policy up to a learner step
or two); `train_step` (training thread) takes `batch_size` unrolls and runs
one gradient step of loss.a2c_loss on them, in one compiled graph call.

Continuous actions: the Gaussian's raw sample (before clip / tanh) is stored
in the unroll as extras['raw_action'], so the loss re-evaluates exactly the
density the action was drawn from (see agents/distributions.py). The queue,
raw-action plumbing and checkpoint are shared with PPO (agents/queue_fed.py);
the update step with every agent (agents/learning.py).

With LearnerConfig.training_devices the update is data parallel
(agents/multi_device.py): the batch is split along B, one shard per device,
the shard gradients are averaged, and normalize_advantages uses the moments
of the whole batch; the update equals the one-device update.
"""

from __future__ import annotations

from typing import Mapping, Optional

import tensorflow as tf

from seed_rl.agents import learning
from seed_rl.agents import multi_device
from seed_rl.agents import queue_fed
from seed_rl.agents import rewards as rewards_lib
from seed_rl.agents.a2c import loss as loss_lib
from seed_rl.agents.actor_critic import FeedForwardActorCritic
from seed_rl.agents.a2c import networks
from seed_rl.agents.a2c.config import A2CConfig
from seed_rl.common import agent_api
from seed_rl.common import devices
from seed_rl.common import optimizers
from seed_rl.common.agent_api import ActInputs, ActOutputs, Unroll
from seed_rl.common.specs import ArraySpec

# Name in ActOutputs.extras / Unroll.extras (continuous actions only):
# float32 [B, D] the Gaussian sample before clip / tanh.
RAW_ACTION = queue_fed.RAW_ACTION

# Trains on several devices when LearnerConfig.training_devices is set (see
# seed_rl/common/devices.py and seed_rl/agents/multi_device.py).
SUPPORTS_TRAINING_DEVICES = True


class A2CAgent(queue_fed.RawActionAgent):
  """Synchronous advantage actor-critic on a bounded unroll queue."""

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
    self._init_policy(cfg.bound_handling)
    self._init_placement()
    if self._placement.strategy is not None:
      devices.shard_size(
        cfg.batch_size, self._placement, "A2CConfig.batch_size"
      )
    with multi_device.training_scope(self._placement.strategy):
      self._network = networks.make_network(
        cfg, self._distribution, observation_spec
      )
      self._step_counter = optimizers.learner_step_counter()
      self._optimizer = learning.scheduled_optimizer(
        cfg, self._network.trainable_variables, self._step_counter
      )
    with multi_device.device_scope(self._placement.inference_device):
      self._generator = tf.random.Generator.from_seed(cfg.seed)
    self._init_queue(cfg.queue_capacity or cfg.batch_size, cfg.batch_size)
    self._act_fn = self._make_act_fn()
    self._train_fn = self._make_train_fn()

  # ---- Agent API ---------------------------------------------------------

  @property
  def network(self) -> FeedForwardActorCritic:
    return self._network

  def act(self, inputs: ActInputs) -> ActOutputs:
    inputs = agent_api.check_act_inputs(inputs, self.observation_spec)
    action, raw_action, value = self._act_fn(
      inputs.observation, inputs.eval_mask
    )
    return self._act_outputs(action, raw_action, value)

  def add_unrolls(self, unrolls: Unroll) -> None:
    agent_api.check_unroll(
      unrolls,
      self.unroll_length,
      self.observation_spec,
      self.action_spec,
      required_extras=self._required_extras(),
    )
    self._queue.put(unrolls)

  def train_step(self) -> Mapping[str, float]:
    t = self.unroll_length
    # Steps 0..T-1 are trained on (step T only bootstraps).
    taken = self._next_batch(trained_steps=t)
    if taken is None:
      return {}
    batch, policy_lag = taken
    metrics = self._train_fn(*self._transition_batch(batch))
    return self._step_result(metrics, policy_lag, t * self.config.batch_size)

  # ---- compiled functions ------------------------------------------------

  def _make_train_fn(self):
    cfg = self.config
    obs_spec = self.observation_spec
    t, b = cfg.unroll_length, cfg.batch_size
    network, distribution = self._network, self._distribution
    num_params = distribution.num_params

    def loss_and_gradients(
      observation, raw_action, rewards, terminated, truncated, bootstrap_value
    ):
      """Gradients of the A2C loss on observation [T+1, B, ...] and the T
      transitions' raw_action [T, B, ...] and rewards / flags [T, B] (B is
      a device's shard of the batch under training devices)."""
      b = observation.shape[1]
      rewards = rewards_lib.clip_rewards(rewards, cfg.reward_clipping)
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
      return tape.gradient(total, variables), metrics

    signature = [
      tf.TensorSpec((t + 1, b) + obs_spec.shape, obs_spec.dtype),
      self._raw_action_spec((t, b)),
      tf.TensorSpec([t, b], tf.float32),
      tf.TensorSpec([t, b], tf.bool),
      tf.TensorSpec([t, b], tf.bool),
      tf.TensorSpec([t, b], tf.float32),
    ]
    compile_args = (
      signature,
      loss_and_gradients,
      network,
      self._optimizer,
      self._step_counter,
    )
    strategy = self._placement.strategy
    if strategy is not None:
      return multi_device.compile_train_fn(strategy, *compile_args)
    return learning.compile_train_fn(*compile_args)


def create_agent(
  observation_spec: ArraySpec, action_spec: ArraySpec, num_envs: int
) -> A2CAgent:
  """Builds the agent with the gin-bound A2CConfig.

  Discrete action specs get a Categorical policy; float32 vector specs a
  Gaussian (clipped or squashed into the Box when the spec has bounds).
  """
  return A2CAgent(observation_spec, action_spec, num_envs, A2CConfig())
