"""The DQN-family agent (double, dueling, n-step, prioritized, NoisyNet) as the
learner runtime drives it.

Data flow: `act` (inference thread) picks epsilon-greedy actions from the
online network; `add_unrolls` (inference thread) cuts the unrolls into n-step
transitions, stores them in replay at the current max priority and applies
the rate limiter's back-pressure; `train_step` (training thread) samples,
minimises the importance-weighted TD loss, writes |TD error| back as
priorities and syncs the target network every `target_update_period` steps.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf

from seed_rl.agents import exploration
from seed_rl.agents import learning
from seed_rl.agents import multi_device
from seed_rl.agents import off_policy
from seed_rl.agents import rewards as rewards_lib
from seed_rl.agents.dqn import loss as loss_lib
from seed_rl.agents.dqn import networks
from seed_rl.agents.dqn import targets as targets_lib
from seed_rl.agents.dqn.config import DQNConfig
from seed_rl.common import agent_api
from seed_rl.common import devices
from seed_rl.common import optimizers
from seed_rl.common import replay as replay_lib
from seed_rl.agents import schedules
from seed_rl.agents import target_network
from seed_rl.common import transitions
from seed_rl.agents import value_rescaling
from seed_rl.common.agent_api import ActInputs, ActOutputs, Agent, Unroll
from seed_rl.common.specs import ArraySpec

# Trains on several devices when LearnerConfig.training_devices is set: the
# sampled batch is split along B (seed_rl/agents/multi_device.py,
# `run_sharded`).
SUPPORTS_TRAINING_DEVICES = True


class DQNAgent(Agent):
  """DQN with the Rainbow options minus distributional RL, on replay."""

  def __init__(
    self,
    observation_spec: ArraySpec,
    action_spec: ArraySpec,
    num_envs: int,
    config: Optional[DQNConfig] = None,
  ):
    super().__init__(observation_spec, action_spec, num_envs)
    self.num_actions = learning.num_discrete_actions(action_spec, "DQN")
    cfg = self.config = config if config is not None else DQNConfig()
    self.unroll_length = cfg.unroll_length
    self.unroll_overlap = cfg.unroll_overlap
    # The learner's devices (default: TF's one device, no strategy).
    self._placement = devices.current()
    strategy = self._placement.strategy
    if strategy is not None:
      devices.shard_size(
        cfg.batch_size, self._placement, "DQNConfig.batch_size"
      )
    # Both networks (NoisyNet noise included), the optimizer's slots and the
    # step counter are mirrored on every training device under a strategy.
    with multi_device.training_scope(strategy):
      self._online = self._make_network("dqn_online")
      self._target = self._make_network("dqn_target")
      self._optimizer = learning.adam(
        cfg, cfg.learning_rate, self._online.trainable_variables
      )
      self._step_counter = optimizers.learner_step_counter()
    frame_stack_shape = None
    if cfg.store_frames_once:
      shape = observation_spec.shape
      if observation_spec.dtype != "uint8" or len(shape) != 3:
        raise ValueError(
          "DQNConfig.store_frames_once needs stacked uint8 frames [H, W, k] "
          f"(Atari, LearnerConfig.frame_stack), got "
          f"{np.dtype(observation_spec.dtype).name} {list(shape)}"
        )
      frame_stack_shape = tuple(shape)
    self._data = off_policy.transition_replay(
      cfg,
      num_envs,
      prioritized=cfg.prioritized,
      priority_exponent=cfg.priority_exponent,
      importance_sampling_exponent=cfg.importance_sampling_exponent,
      frame_stack_shape=frame_stack_shape,
    )
    self._rng = np.random.default_rng(cfg.seed)
    self._act_fn = self._make_act_fn()
    self._train_fn = self._make_train_fn()
    self._sync_target()

  def _make_network(self, name: str) -> networks.QNetwork:
    cfg = self.config
    network = networks.QNetwork(
      cfg.torso,
      self.num_actions,
      head_hidden=cfg.head_hidden,
      dueling=cfg.dueling,
      noisy=cfg.noisy,
      noisy_sigma0=cfg.noisy_sigma0,
      name=name,
    )
    networks.build_q_network(network, self.observation_spec)
    return network

  # ---- Agent API ---------------------------------------------------------

  @property
  def step_counter(self) -> tf.Variable:
    return self._step_counter

  @property
  def online_network(self) -> networks.QNetwork:
    return self._online

  @property
  def target_network(self) -> networks.QNetwork:
    return self._target

  @property
  def replay(self) -> replay_lib.PrioritizedReplay:
    return self._data.replay

  def epsilon(self, learner_step: Optional[int] = None) -> float:
    """Exploration epsilon, linear in learner steps."""
    cfg = self.config
    if learner_step is None:
      learner_step = int(self._step_counter.numpy())
    return schedules.linear(
      cfg.epsilon_start, cfg.epsilon_end, cfg.epsilon_decay_steps
    )(learner_step)

  def importance_sampling_exponent(self, learner_step: int) -> float:
    """beta, linear from its initial value to 1 at total_learner_steps."""
    cfg = self.config
    return schedules.linear(
      cfg.importance_sampling_exponent, 1.0, cfg.total_learner_steps
    )(learner_step)

  def act(self, inputs: ActInputs) -> ActOutputs:
    inputs = agent_api.check_act_inputs(inputs, self.observation_spec)
    eval_mask = inputs.eval_mask
    q_explore, q_greedy = (q.numpy() for q in self._act_fn(inputs.observation))
    # Evaluation rows act on the noise-free Q (identical without NoisyNet).
    q = np.where(eval_mask[:, None], q_greedy, q_explore)
    # Evaluation rows never explore.
    epsilon = np.where(eval_mask, 0.0, self.epsilon())
    action = exploration.epsilon_greedy(
      np.argmax(q, axis=-1), self.num_actions, epsilon, self._rng
    )
    value = q.max(axis=-1)
    if self.config.value_rescaling:
      # The runtime bootstraps truncated episodes from this value, so it is
      # given in return units, like the n-step returns it is added to.
      value = value_rescaling.h_inv(value, self.config.value_rescaling_epsilon)
    return ActOutputs(
      action=action.astype(self.action_spec.dtype),
      value=np.asarray(value, np.float32),
      extras={},
      core_state=(),
    )

  def greedy_policy(self) -> Tuple[agent_api.GreedyStep, bool]:
    """argmax of the online Q-network (noisy layers at their mean), as
    `act` for evaluation rows."""
    online, noisy = self._online, self.config.noisy is not None
    action_dtype = self.action_spec.dtype

    def step(observation, prev_action, reward, done, core):
      del prev_action, reward, done
      q = (
        online(observation, deterministic=True)
        if noisy
        else online(observation)
      )
      return tf.cast(tf.argmax(q, axis=-1), action_dtype), core

    return step, False

  def add_unrolls(self, unrolls: Unroll) -> None:
    agent_api.check_unroll(
      unrolls, self.unroll_length, self.observation_spec, self.action_spec
    )
    self._data.add(
      unrolls, action=self._stored_action(unrolls), reward=self._reward(unrolls)
    )

  def _stored_action(self, unrolls: Unroll) -> np.ndarray:
    return np.asarray(unrolls.action).astype(np.int32)

  def _reward(self, unrolls: Unroll) -> np.ndarray:
    return rewards_lib.clip_rewards(
      np.asarray(unrolls.reward, np.float32), self.config.reward_clipping
    )

  def unrolls_to_transitions(self, unrolls: Unroll) -> Dict[str, np.ndarray]:
    """The n-step transitions starting at steps 0..T-n of each unroll, as
    `transitions.unroll_transitions` cuts them (observations included)."""
    return transitions.unroll_transitions(
      unrolls,
      self.config.discount,
      self.config.n_step,
      action=self._stored_action(unrolls),
      reward=self._reward(unrolls),
    )

  def train_step(self) -> Mapping[str, float]:
    cfg = self.config
    step = int(self._step_counter.numpy())
    beta = self.importance_sampling_exponent(step)
    self._data.replay.set_importance_sampling_exponent(beta)
    sampled = self._data.sample_with_keys()
    if sampled is None:
      return {}
    keys, items, weights = sampled
    td_error, metrics = self._train_fn(
      items["observation"],
      items["action"],
      items["return"],
      items["discount"],
      items["next_observation"],
      weights,
    )
    td_error = td_error.numpy()
    if cfg.prioritized:
      self._data.replay.update_priorities(
        keys, np.abs(td_error) + cfg.priority_epsilon
      )
    if (step + 1) % cfg.target_update_period == 0:
      self._sync_target()
    result = {name: float(value) for name, value in metrics.items()}
    result[agent_api.SAMPLES_METRIC] = float(cfg.batch_size)
    result.update(self._data.metrics())
    result.update(
      {
        "replay/importance_sampling_exponent": beta,
        "replay/priority_max": self._data.replay.max_priority,
        "policy/epsilon": self.epsilon(step),
        # With replay this is the age of the sampled data in learner steps
        # (about replay_capacity / 2 / env steps per learner step when full).
        "perf/policy_lag": agent_api.policy_lag(step, items["policy_version"]),
      }
    )
    return result

  keeps_replay = True

  def replay_state(self) -> Dict[str, Any]:
    return self._data.state_dict()

  def load_replay_state(self, state: Mapping[str, Any]) -> None:
    self._data.load_state_dict(dict(state))

  def checkpoint_objects(self) -> Dict[str, Any]:
    # Replay contents go to checkpoints only with
    # LearnerConfig.checkpoint_replay; else a restored run refills replay
    # (min_replay_size transitions) before training resumes.
    # The variable lists are explicit because tf.train.Checkpoint does not
    # follow Keras 3 layers kept in Python lists: the built-in torsos avoid
    # them, but with a custom torso that uses one the target network (which
    # no optimizer references) would otherwise restore only partly.
    return {
      "online_network": self._online,
      "target_network": self._target,
      "online_variables": list(self._online.variables),
      "target_variables": list(self._target.trainable_variables),
      "optimizer": self._optimizer,
      "step": self._step_counter,
    }

  def stop(self) -> None:
    self._data.stop()

  # ---- compiled functions ------------------------------------------------

  def _sync_target(self) -> None:
    """Copies the online weights (not the NoisyNet noise) to the target
    (every device's copy: an assignment outside a replica context)."""
    target_network.hard_update(
      self._online.trainable_variables, self._target.trainable_variables
    )

  def _make_act_fn(self):
    obs_spec = self.observation_spec
    online, noisy = self._online, self.config.noisy is not None
    device = self._placement.inference_device

    @tf.function(
      input_signature=[tf.TensorSpec((None,) + obs_spec.shape, obs_spec.dtype)]
    )
    def act_fn(observation):
      with multi_device.device_scope(device):
        q = online(observation)
        q_greedy = online(observation, deterministic=True) if noisy else q
        return q, q_greedy

    return act_fn

  def _make_train_fn(self):
    """The compiled learner step on a sampled batch (split along B over the
    training devices when there are several)."""
    online, target = self._online, self._target
    optimizer, step_counter = self._optimizer, self._step_counter
    noisy = self.config.noisy is not None
    strategy = self._placement.strategy
    loss_and_gradients = self._make_loss_and_gradients()

    @tf.function(input_signature=self._train_signature())
    def train_fn(*batch):
      """observation, action, return, discount, next_observation and
      importance weights [B] -> TD errors [B] (in batch order), metrics."""
      with multi_device.training_scope(strategy):
        if noisy:
          # Fresh noise per learner step, independent for the two networks
          # (drawn once, outside the replicas: every copy gets the same).
          online.reset_noise()
          target.reset_noise()
        variables = online.trainable_variables
        gradients, norm_gradients, metrics, td_error = multi_device.run_sharded(
          strategy, loss_and_gradients, batch, variables
        )
        learning.apply_update(
          optimizer, gradients, variables, metrics, step_counter, norm_gradients
        )
        return td_error, metrics

    return train_fn

  def _make_loss_and_gradients(self):
    """The per-shard TD loss and its gradients (what `run_sharded` runs on
    each device's shard of the batch)."""
    cfg = self.config
    online, target = self._online, self._target

    def loss_and_gradients(
      observation, action, returns, discount, next_observation, weights
    ):
      """Gradients of the importance-weighted mean TD loss over this batch
      (one device's shard of it with training devices), metrics, TD
      errors [B]."""
      n = tf.shape(observation)[0]
      variables = online.trainable_variables
      target_q_next = target(next_observation)
      with tf.GradientTape() as tape:
        # One pass over s and s' (same noise sample, half the calls).
        q_all = online(tf.concat([observation, next_observation], axis=0))
        q, online_q_next = q_all[:n], q_all[n:]
        target_value = targets_lib.transition_targets(
          returns,
          discount,
          tf.stop_gradient(online_q_next),
          target_q_next,
          double_q=cfg.double_q,
          rescale=cfg.value_rescaling,
          eps=cfg.value_rescaling_epsilon,
        )
        loss, td_error, metrics = loss_lib.dqn_loss(
          q,
          action,
          target_value,
          weights,
          huber_delta=cfg.huber_delta if cfg.huber_loss else None,
        )
      return tape.gradient(loss, variables), metrics, td_error

    return loss_and_gradients

  def _train_signature(self):
    """Input signature of the update: observation, action, return,
    discount, next_observation and importance weights, each [B, ...]."""
    obs_spec, b = self.observation_spec, self.config.batch_size
    obs_signature = tf.TensorSpec((b,) + obs_spec.shape, obs_spec.dtype)
    return [
      obs_signature,
      tf.TensorSpec([b], tf.int32),
      tf.TensorSpec([b], tf.float32),
      tf.TensorSpec([b], tf.float32),
      obs_signature,
      tf.TensorSpec([b], tf.float32),
    ]


def create_agent(
  observation_spec: ArraySpec, action_spec: ArraySpec, num_envs: int
) -> DQNAgent:
  """Builds the agent with the gin-bound DQNConfig."""
  return DQNAgent(observation_spec, action_spec, num_envs, DQNConfig())
