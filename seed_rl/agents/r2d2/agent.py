"""The R2D2 agent (Kapturowski et al. 2019) as the learner runtime drives it.

Acting: one batched LSTM step of the online network per inference call, then
per-env epsilon-greedy. Storing: each completed unroll becomes one replay
sequence with the LSTM state at its step 0 and an initial priority computed
from the behaviour Q-values (SEED RL's realistic initial priorities).
Training: prioritized sequence sampling under a samples-per-insert rate
limit, burn-in, n-step double-Q with value rescaling, priorities written back,
and a target network synced every `target_update_period` learner steps.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf

from seed_rl.agents import exploration
from seed_rl.agents import learning
from seed_rl.agents import multi_device
from seed_rl.agents import frame_stacks
from seed_rl.common import frames as frames_lib
from seed_rl.agents.r2d2 import loss as loss_lib
from seed_rl.agents.r2d2 import networks
from seed_rl.agents.r2d2 import targets as targets_lib
from seed_rl.agents.r2d2.config import R2D2Config
from seed_rl.common import agent_api
from seed_rl.common import devices
from seed_rl.common import optimizers
from seed_rl.agents import target_network
from seed_rl.common.agent_api import ActInputs, ActOutputs, Agent, Unroll
from seed_rl.common.replay import PrioritizedReplay, RateLimiter
from seed_rl.common.replay import sub_state as replay_sub_state
from seed_rl.common.specs import ArraySpec

# ActOutputs.extras / Unroll.extras name of Q(s_t, a_t) for the action taken
# (after exploration), used for the initial priority of a sequence.
Q_ACTION = "q_action"

# Trains on several devices when LearnerConfig.training_devices is set: the
# sampled sequences are split along B (seed_rl/agents/multi_device.py,
# `run_sharded`).
SUPPORTS_TRAINING_DEVICES = True


class R2D2Agent(Agent):
  """Recurrent replay distributed DQN on the central-inference runtime.

  `num_envs` is the number of training envs N; env i explores with
  epsilon_base ** (1 + epsilon_alpha * i / (N - 1)), from 1 at first if
  `epsilon_warmup_steps` (exploration.warmed_up). Rows flagged by
  `ActInputs.eval_mask` use `eval_epsilon` instead.
  """

  def __init__(
    self,
    observation_spec: ArraySpec,
    action_spec: ArraySpec,
    num_envs: int,
    config: Optional[R2D2Config] = None,
  ):
    super().__init__(observation_spec, action_spec, num_envs)
    self._num_actions = learning.num_discrete_actions(action_spec, "R2D2")
    self.config = cfg = config if config is not None else R2D2Config()
    self.unroll_length = cfg.unroll_length
    self.unroll_overlap = cfg.unroll_overlap
    # The learner's devices (default: TF's one device, no strategy).
    self._placement = devices.current()
    strategy = self._placement.strategy
    if strategy is not None:
      devices.shard_size(
        cfg.batch_size, self._placement, "R2D2Config.batch_size"
      )
    make_net = lambda name: networks.R2D2Network(
      cfg.torso, self._num_actions, cfg.lstm_units, cfg.head_hidden, name=name
    )
    # Both networks, the optimizer's slots and the step counter are mirrored
    # on every training device under a strategy.
    with multi_device.training_scope(strategy):
      self._online = make_net("r2d2_online")
      self._target = make_net("r2d2_target")
      networks.build_network(self._online, observation_spec)
      networks.build_network(self._target, observation_spec)
      target_network.hard_update(self._online.weights, self._target.weights)
      self._optimizer = learning.adam(
        cfg, cfg.learning_rate, self._online.trainable_variables
      )
      self._step_counter = optimizers.learner_step_counter()
    self._epsilons = exploration.per_env_epsilons(
      num_envs, cfg.epsilon_base, cfg.epsilon_alpha
    )
    self._rng = np.random.default_rng(cfg.seed)
    self._replay = PrioritizedReplay(
      cfg.replay_capacity,
      cfg.priority_exponent,
      cfg.importance_sampling_exponent,
      seed=None if cfg.seed is None else cfg.seed + 1,
    )
    self._limiter = RateLimiter(
      cfg.samples_per_insert, cfg.min_replay_size, cfg.error_buffer
    )
    shape = observation_spec.shape
    self._store_frames_once = (
      cfg.store_frames_once
      and observation_spec.dtype == "uint8"
      and len(shape) == 3
      and shape[-1] > 1
    )
    # Unrolls of frames (the learner stacks frames) go to replay as they
    # are; their stacks are rebuilt in the training step.
    self.trains_on_frames = (
      self._store_frames_once and observation_spec.frame_stack > 1
    )
    self._dropped_sequences = 0
    self._act_fn = self._make_act_fn()
    self._priority_fn = self._make_priority_fn()
    self._train_fn = self._make_train_fn()

  # ---- Agent API ---------------------------------------------------------

  @property
  def step_counter(self) -> tf.Variable:
    return self._step_counter

  @property
  def online_network(self) -> networks.R2D2Network:
    return self._online

  @property
  def target_network(self) -> networks.R2D2Network:
    return self._target

  @property
  def optimizer(self):
    return self._optimizer

  @property
  def replay(self) -> PrioritizedReplay:
    return self._replay

  @property
  def epsilons(self) -> np.ndarray:
    """float64 [num_envs] exploration epsilon of each training env."""
    return self._epsilons

  def initial_core_state(self, batch_size: int):
    units = self.config.lstm_units
    return (
      np.zeros([batch_size, units], np.float32),
      np.zeros([batch_size, units], np.float32),
    )

  def act(self, inputs: ActInputs) -> ActOutputs:
    inputs = agent_api.check_act_inputs(
      inputs, self.observation_spec, self.action_spec, num_core_arrays=2
    )
    batch_size = int(inputs.observation.shape[0])
    q, h, c = self._act_fn(
      inputs.observation,
      inputs.prev_action,
      inputs.reward,
      inputs.done,
      *inputs.core_state,
    )
    q = q.numpy()
    table = self._epsilons
    if self.config.epsilon_warmup_steps:
      table = exploration.warmed_up(
        table,
        int(self._step_counter.numpy()),
        self.config.epsilon_warmup_steps,
      )
    epsilon = exploration.env_epsilons(
      table, inputs.env_ids, inputs.eval_mask, self.config.eval_epsilon
    )
    action = exploration.epsilon_greedy(
      np.argmax(q, axis=-1), self._num_actions, epsilon, self._rng
    )
    return ActOutputs(
      action=action.astype(self.action_spec.dtype),
      value=q.max(axis=-1).astype(np.float32),
      extras={Q_ACTION: q[np.arange(batch_size), action].astype(np.float32)},
      core_state=(h.numpy(), c.numpy()),
    )

  def greedy_policy(self) -> Tuple[agent_api.GreedyStep, bool]:
    """argmax of the recurrent online Q-network: `act` for evaluation rows
    without its eval_epsilon."""
    online, action_dtype = self._online, self.action_spec.dtype

    def step(observation, prev_action, reward, done, core):
      q, core = online.step(observation, prev_action, reward, done, core)
      return tf.cast(tf.argmax(q, axis=-1), action_dtype), tuple(core)

    return step, True

  def add_unrolls(self, unrolls: Unroll) -> None:
    units = self.config.lstm_units
    agent_api.check_unroll(
      unrolls,
      self.unroll_length,
      self.observation_spec,
      self.action_spec,
      required_extras={Q_ACTION: ()},
      core_state_shapes=[(units,), (units,)],
      trains_on_frames=self.trains_on_frames,
    )
    done = unrolls.terminated | unrolls.truncated
    items = {
      "reward": unrolls.reward.astype(np.float32),
      "terminated": unrolls.terminated,
      "truncated": unrolls.truncated,
      "bootstrap_value": unrolls.bootstrap_value.astype(np.float32),
      "prev_action": unrolls.prev_action,
      "action": unrolls.action,
      "core_h": unrolls.core_state[0].astype(np.float32),
      "core_c": unrolls.core_state[1].astype(np.float32),
      "policy_version": unrolls.policy_version.mean(axis=1),
    }
    if unrolls.frame_stack > 1:
      items["frames"] = unrolls.observation  # [B, k-1 + T+1, H, W]
    elif self._store_frames_once:
      items["frames"], items["first_stack"] = frames_lib.compress(
        unrolls.observation
      )
      ok = frames_lib.roundtrip_ok(unrolls.observation, done)
      if not ok.all():
        # Stacks that do not follow the runtime's layout (zeros before an
        # episode start) would be rebuilt wrongly: skip them, loudly.
        self._dropped_sequences += int((~ok).sum())
        logging.warning(
          "R2D2: dropped %d sequences (env ids %s) whose frame stacks do "
          "not follow the [older..newest, zeros before episode start] "
          "layout; set R2D2Config.store_frames_once = False to store full "
          "stacks",
          int((~ok).sum()),
          unrolls.env_ids[~ok].tolist(),
        )
        items = {k: v[ok] for k, v in items.items()}
        unrolls = agent_api.unroll_rows(unrolls, ok)
    else:
      items["observation"] = unrolls.observation
    count = int(items["reward"].shape[0])
    if count == 0:
      return
    priorities = self.initial_priorities(unrolls)
    # Insert first, then count: the sampler never sees uninserted items.
    self._replay.insert(items, priorities)
    self._limiter.await_insert(count)

  def initial_priorities(self, unrolls: Unroll) -> np.ndarray:
    """float32 [B] priorities of new sequences from their behaviour values."""
    return self._priority_fn(
      *(
        agent_api.time_major(x)
        for x in (
          unrolls.reward.astype(np.float32),
          unrolls.terminated,
          unrolls.truncated,
          unrolls.bootstrap_value.astype(np.float32),
          unrolls.value.astype(np.float32),
          unrolls.extras[Q_ACTION].astype(np.float32),
        )
      )
    ).numpy()

  def train_step(self) -> Mapping[str, float]:
    cfg = self.config
    if not self._limiter.await_sample(cfg.batch_size):
      return {}
    step = int(self._step_counter.numpy())
    beta = cfg.importance_sampling_exponent_at(step)
    self._replay.set_importance_sampling_exponent(beta)
    indices, items, weights = self._replay.sample(cfg.batch_size)
    if self.trains_on_frames:
      observation = items["frames"]  # stacked in the training step
    elif self._store_frames_once:
      observation = frames_lib.decompress(
        items["frames"],
        items["first_stack"],
        items["terminated"] | items["truncated"],
      )
    else:
      observation = items["observation"]
    tm = agent_api.time_major
    loss, priorities, metrics = self._train_fn(
      tm(observation),
      tm(items["prev_action"]),
      tm(items["action"]),
      tm(items["reward"]),
      tm(items["terminated"]),
      tm(items["truncated"]),
      tm(items["bootstrap_value"]),
      (items["core_h"], items["core_c"]),
      weights,
    )
    priorities = priorities.numpy()
    self._replay.update_priorities(indices, priorities)
    if (step + 1) % cfg.target_update_period == 0:
      # Outside a replica context: every device's copy is written.
      target_network.hard_update(self._online.weights, self._target.weights)
    result = {name: float(value) for name, value in metrics.items()}
    result.update(
      {
        "loss/td": float(loss),
        "loss/total": float(loss),
        "replay/size": float(len(self._replay)),
        "replay/mean_priority": float(np.mean(priorities)),
        "replay/importance_sampling_exponent": beta,
        "replay/dropped_sequences": float(self._dropped_sequences),
        "perf/policy_lag": agent_api.policy_lag(step, items["policy_version"]),
      }
    )
    result.update(self._limiter.metrics())
    # Transitions trained on: the learning part of each sequence.
    result[agent_api.SAMPLES_METRIC] = float(
      cfg.batch_size * (self.unroll_length + 1 - cfg.burn_in)
    )
    return result

  keeps_replay = True

  def replay_state(self) -> Dict[str, Any]:
    state = {f"replay/{k}": v for k, v in self._replay.state_dict().items()}
    state.update(
      {f"limiter/{k}": v for k, v in self._limiter.state_dict().items()}
    )
    state["dropped_sequences"] = np.asarray(self._dropped_sequences, np.int64)
    return state

  def load_replay_state(self, state: Mapping[str, Any]) -> None:
    state = dict(state)
    self._replay.load_state_dict(replay_sub_state(state, "replay"))
    self._limiter.load_state_dict(replay_sub_state(state, "limiter"))
    self._dropped_sequences = int(state["dropped_sequences"])

  def checkpoint_objects(self) -> Dict[str, Any]:
    return {
      "online_network": self._online,
      "target_network": self._target,
      "optimizer": self._optimizer,
      "step": self._step_counter,
    }

  def stop(self) -> None:
    self._limiter.stop()

  # ---- compiled functions ------------------------------------------------

  def _make_act_fn(self):
    obs_spec, act_spec = self.observation_spec, self.action_spec
    units = self.config.lstm_units
    signature = [
      tf.TensorSpec((None,) + obs_spec.shape, obs_spec.dtype),
      tf.TensorSpec([None], act_spec.dtype),
      tf.TensorSpec([None], tf.float32),
      tf.TensorSpec([None], tf.bool),
      tf.TensorSpec([None, units], tf.float32),
      tf.TensorSpec([None, units], tf.float32),
    ]
    network = self._online
    device = self._placement.inference_device

    @tf.function(input_signature=signature)
    def act_fn(observation, prev_action, reward, done, h, c):
      with multi_device.device_scope(device):
        q, (h, c) = network.step(observation, prev_action, reward, done, (h, c))
        return q, h, c

    return act_fn

  def _make_priority_fn(self):
    """Initial priorities [B] from behaviour values of batch-major unrolls.

    The behaviour network's max-Q (Unroll.value) stands in for the double-Q
    bootstrap and Q(s_t, a_t) at acting time for the online estimate, as in
    SEED RL, so no network runs at insert time.
    """
    cfg = self.config
    t1 = cfg.unroll_length + 1
    spec = lambda dtype: tf.TensorSpec([t1, None], dtype)
    signature = [
      spec(tf.float32),
      spec(tf.bool),
      spec(tf.bool),
      spec(tf.float32),
      spec(tf.float32),
      spec(tf.float32),
    ]

    @tf.function(input_signature=signature)
    def priority_fn(
      reward, terminated, truncated, bootstrap_value, value, q_action
    ):
      b = cfg.burn_in
      y = targets_lib.n_step_targets(
        reward[b:],
        terminated[b:],
        truncated[b:],
        bootstrap_value[b:],
        value[b:],
        cfg.discount,
        cfg.n_step,
        cfg.value_rescaling_epsilon,
      )
      td = y - q_action[b : b + cfg.num_learning_steps]
      return targets_lib.sequence_priorities(tf.abs(td), cfg.priority_eta)

    return priority_fn

  def _make_train_fn(self):
    """The compiled learner step on sampled sequences (split along B over
    the training devices when there are several)."""
    signature = self._train_signature()
    online = self._online
    optimizer, step_counter = self._optimizer, self._step_counter
    strategy = self._placement.strategy
    loss_and_gradients = self._make_loss_and_gradients()
    # Time-major [T+1, B] fields split along axis 1; the start core states
    # and the weights, [B, ...], along axis 0.
    batch_axes = (1,) * (len(signature) - 2) + (0, 0)

    obs_spec = self.observation_spec if self.trains_on_frames else None

    @tf.function(input_signature=signature)
    def train_fn(*args):
      """One update on the fields of loss_lib.Sequences (observations as
      frames when the agent trains on frames), then weights [B]; -> loss,
      priorities [B] (in batch order), metrics."""
      if obs_spec is not None:
        # Fields 4 and 5: terminated, truncated [T+1, B].
        observation = frame_stacks.observations(
          obs_spec, args[0], args[4][1:], args[5][1:]
        )
        args = (observation,) + args[1:]
      with multi_device.training_scope(strategy):
        variables = online.trainable_variables
        gradients, norm_gradients, metrics, priorities = (
          multi_device.run_sharded(
            strategy, loss_and_gradients, args, variables, batch_axes
          )
        )
        learning.apply_update(
          optimizer, gradients, variables, metrics, step_counter, norm_gradients
        )
        return metrics["loss/td"], priorities, metrics

    return train_fn

  def _train_signature(self):
    """Input signature of the update: the fields of loss_lib.Sequences
    (time-major [T+1, B] steps, then the start core states [B, units]),
    then the importance weights [B]."""
    cfg = self.config
    obs_spec, act_spec = self.observation_spec, self.action_spec
    t1, b, units = cfg.unroll_length + 1, cfg.batch_size, cfg.lstm_units
    return [
      (
        frame_stacks.frames_spec(obs_spec, t1, b)
        if self.trains_on_frames
        else tf.TensorSpec((t1, b) + obs_spec.shape, obs_spec.dtype)
      ),
      tf.TensorSpec([t1, b], act_spec.dtype),
      tf.TensorSpec([t1, b], act_spec.dtype),
      tf.TensorSpec([t1, b], tf.float32),
      tf.TensorSpec([t1, b], tf.bool),
      tf.TensorSpec([t1, b], tf.bool),
      tf.TensorSpec([t1, b], tf.float32),
      (tf.TensorSpec([b, units], tf.float32),) * 2,
      tf.TensorSpec([b], tf.float32),
    ]

  def _make_loss_and_gradients(self):
    """The per-shard sequence loss and its gradients (what `run_sharded`
    runs on each device's shard of the batch)."""
    cfg = self.config
    online, target = self._online, self._target

    def loss_and_gradients(*args):
      """Gradients of the importance-weighted mean loss over these
      sequences (one device's shard of them with training devices),
      metrics with the loss as 'loss/td', priorities [B]."""
      seq, weights = loss_lib.Sequences(*args[:-1]), args[-1]
      variables = online.trainable_variables
      with tf.GradientTape() as tape:
        loss, priorities, metrics = loss_lib.r2d2_loss(
          online,
          target,
          seq,
          weights,
          burn_in=cfg.burn_in,
          n_step=cfg.n_step,
          discount=cfg.discount,
          eta=cfg.priority_eta,
          rescaling_epsilon=cfg.value_rescaling_epsilon,
        )
      metrics["loss/td"] = loss
      return tape.gradient(loss, variables), metrics, priorities

    return loss_and_gradients


def create_agent(
  observation_spec: ArraySpec, action_spec: ArraySpec, num_envs: int
) -> R2D2Agent:
  """Builds the agent with the gin-bound R2D2Config."""
  return R2D2Agent(observation_spec, action_spec, num_envs, R2D2Config())
