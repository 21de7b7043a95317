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

With LearnerConfig.training_devices the update is data parallel and equals
the one-device update (update.py): targets per device on a shard of the B
unrolls, every minibatch split into equal shards, gradients averaged.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

import numpy as np
import tensorflow as tf

from seed_rl.agents import frame_stacks
from seed_rl.agents import learning
from seed_rl.agents import multi_device
from seed_rl.agents import queue_fed
from seed_rl.agents import rewards as rewards_lib
from seed_rl.agents.actor_critic import FeedForwardActorCritic
from seed_rl.agents.ppo import loss as loss_lib
from seed_rl.agents.ppo import networks
from seed_rl.agents.ppo import update as update_lib
from seed_rl.agents.ppo.config import PPOConfig
from seed_rl.common import agent_api
from seed_rl.common import devices
from seed_rl.agents import schedules
from seed_rl.agents import normalizers
from seed_rl.common import optimizers
from seed_rl.common.agent_api import ActInputs, ActOutputs, Unroll
from seed_rl.common.specs import ArraySpec

# Names in ActOutputs.extras / Unroll.extras.
LOG_PROB = "log_prob"  # float32 [B] log mu(a|s) of the raw action.
RAW_ACTION = queue_fed.RAW_ACTION  # float32 [B, D] sample before clip/tanh.

# Trains on several devices when LearnerConfig.training_devices is set (see
# seed_rl/common/devices.py and seed_rl/agents/multi_device.py).
SUPPORTS_TRAINING_DEVICES = True


class TimeMajorBatch(NamedTuple):
  """An update's inputs: T transitions t -> t+1 of B unrolls (NumPy).

  The outcome of a transition is stored at step t+1 (SEED's layout), so
  rewards and flags start at step 1 and the action at step 0.
  """

  observation: np.ndarray  # [T+1, B, ...]
  raw_action: np.ndarray  # [T, B, ...]
  rewards: np.ndarray  # float32 [T, B]
  terminated: np.ndarray  # bool [T, B]
  truncated: np.ndarray  # bool [T, B]
  bootstrap_value: np.ndarray  # float32 [T, B]
  behaviour_log_prob: np.ndarray  # float32 [T, B] log mu(a_t|x_t)


class PPOAgent(queue_fed.RawActionAgent):
  """PPO (clipped or adaptive-KL) actor-critic on a bounded unroll queue."""

  _act_log_prob = True  # stored as extras[LOG_PROB], mu of the ratio

  def __init__(
    self,
    observation_spec: ArraySpec,
    action_spec: ArraySpec,
    num_envs: int,
    config: Optional[PPOConfig] = None,
  ):
    super().__init__(observation_spec, action_spec, num_envs)
    cfg = self.config = config if config is not None else PPOConfig()
    self.unroll_length = cfg.unroll_length
    self._init_policy(cfg.bound_handling)
    self._init_placement()
    if self._placement.strategy is not None:
      self._check_shards()
    self._init_normalizers()
    # Frame stacks are rebuilt in the update (agents/frame_stacks.py), unless
    # observations are normalised: their statistics are taken from the
    # unrolls' stacks in NumPy.
    self.trains_on_frames = self._obs_normalizer is None
    self._train_obs_spec = (
      observation_spec
      if self.trains_on_frames
      else observation_spec.replace(frame_stack=1)
    )
    # Weights, optimizer slots and the step counter are mirrored on every
    # training device (the normalizer statistics and kl_coef, set between
    # updates, are single variables every device reads).
    with multi_device.training_scope(self._placement.strategy):
      self._network = networks.make_network(
        cfg,
        self._distribution,
        observation_spec,
        "float32" if self._obs_normalizer is not None else None,
      )
      # The rate is a variable set before every update from step_counter: it
      # is annealed per PPO update, not per minibatch (the optimizer's own
      # iteration count varies with early stopping).
      self._optimizer = learning.adam(
        cfg, cfg.learning_rate, self._network.trainable_variables
      )
      self._step_counter = optimizers.learner_step_counter()
    self._kl_coef = tf.Variable(
      cfg.initial_kl_coef, dtype=tf.float32, trainable=False, name="kl_coef"
    )
    with multi_device.device_scope(self._placement.inference_device):
      self._generator = tf.random.Generator.from_seed(cfg.seed)
    self._shuffle_rng = np.random.default_rng(cfg.seed)
    self._init_queue(cfg.queue_capacity or cfg.batch_size, cfg.batch_size)
    self._act_fn = self._make_act_fn()
    update = update_lib.PPOUpdate(
      cfg,
      self._network,
      self._distribution,
      self._optimizer,
      self._kl_coef,
      self._preprocess,
      self._time_major_signature(),
      self._placement.strategy,
      observations=functools.partial(
        frame_stacks.observations, self._train_obs_spec
      ),
    )
    self._targets_fn, self._update_fn = update.targets_fn, update.update_fn

  def _check_shards(self) -> None:
    """With training devices: the B unrolls (targets) and every minibatch
    of transitions split into equal shards, one per device."""
    cfg = self.config
    devices.shard_size(cfg.batch_size, self._placement, "PPOConfig.batch_size")
    steps = cfg.unroll_length * cfg.batch_size
    if steps % cfg.num_minibatches:
      raise ValueError(
        f"PPOConfig.unroll_length * batch_size ({steps}) must be divisible "
        f"by num_minibatches ({cfg.num_minibatches}) with "
        "LearnerConfig.training_devices: each minibatch splits into equal "
        "shards, one per device"
      )
    devices.shard_size(
      steps // cfg.num_minibatches,
      self._placement,
      "PPOConfig.unroll_length * batch_size / num_minibatches",
    )

  def _init_normalizers(self) -> None:
    """The observation normalizer and reward scaler the config asks for."""
    cfg, observation_spec = self.config, self.observation_spec
    float_obs = np.issubdtype(np.dtype(observation_spec.dtype), np.floating)
    if cfg.normalize_observations and not float_obs:
      raise ValueError(
        f"PPOConfig.normalize_observations needs float observations; the "
        f"observation spec is {observation_spec.dtype} "
        f"{observation_spec.shape} (image frames are scaled by their torso "
        f"instead)"
      )
    self._obs_normalizer = None
    if cfg.normalize_observations:
      self._obs_normalizer = normalizers.RunningMeanStd(
        observation_spec.shape,
        clip=cfg.observation_clip,
        name="observation_normalizer",
      )
    self._reward_scaler = None
    if cfg.scale_rewards:
      self._reward_scaler = normalizers.RewardScaler(
        self.num_envs, cfg.discount, clip=cfg.reward_clip
      )
    # act() reads the observation statistics while train_step() may update
    # them; the lock makes every act call see one consistent (mean, var).
    self._stats_lock = threading.Lock()

  # ---- Agent API ---------------------------------------------------------

  @property
  def network(self) -> FeedForwardActorCritic:
    return self._network

  @property
  def observation_normalizer(self) -> Optional[normalizers.RunningMeanStd]:
    return self._obs_normalizer

  @property
  def reward_scaler(self) -> Optional[normalizers.RewardScaler]:
    return self._reward_scaler

  def act(self, inputs: ActInputs) -> ActOutputs:
    inputs = agent_api.check_act_inputs(inputs, self.observation_spec)
    with self._stats_lock:
      action, raw_action, value, log_prob = self._act_fn(
        inputs.observation, inputs.eval_mask
      )
    return self._act_outputs(
      action, raw_action, value, {LOG_PROB: log_prob.numpy()}
    )

  def add_unrolls(self, unrolls: Unroll) -> None:
    extras: Dict[str, Tuple[int, ...]] = {LOG_PROB: ()}
    extras.update(self._required_extras())
    agent_api.check_unroll(
      unrolls,
      self.unroll_length,
      self.observation_spec,
      self.action_spec,
      required_extras=extras,
      trains_on_frames=self.trains_on_frames,
    )
    env_ids = unrolls.env_ids
    if (
      env_ids.size
      and self._reward_scaler is not None
      and (np.min(env_ids) < 0 or np.max(env_ids) >= self.num_envs)
    ):
      # The reward scaler keeps one running return per env.
      raise ValueError(
        f"Unroll.env_ids must be in [0, {self.num_envs}), got "
        f"{np.min(env_ids)}..{np.max(env_ids)}"
      )
    self._queue.put(unrolls)

  def train_step(self) -> Mapping[str, float]:
    cfg = self.config
    t, b = cfg.unroll_length, cfg.batch_size
    # Steps 0..T-1 are the ones this update trains on (step T bootstraps).
    taken = self._next_batch(trained_steps=t)
    if taken is None:
      return {}
    batch, policy_lag = taken
    step = int(self._step_counter.numpy())
    inputs = self._time_major(batch)
    inputs = inputs._replace(rewards=self._prepare(inputs, batch.env_ids))
    learning_rate, clip_ratio = self._annealed(step)
    # NumPy scalars: eager TensorFlow caches every distinct Python number it
    # converts, for good (see metrics.SummaryWriter.write).
    self._optimizer.learning_rate.assign(np.float32(learning_rate))

    # One shuffled order of the T*B transitions per epoch; the update runs
    # all epochs and minibatches in one graph call (4x faster than a Python
    # loop of per-minibatch calls for a HalfCheetah update on CPU: 0.1 s vs
    # 0.4 s for 320 minibatches).
    order = np.stack(
      [self._shuffle_rng.permutation(t * b) for _ in range(cfg.num_epochs)]
    ).astype(np.int32)
    out = self._update_fn(*inputs, order, np.float32(clip_ratio))
    if cfg.loss == "kl_penalty":
      self._kl_coef.assign(
        np.float32(
          loss_lib.adapt_kl_coef(
            float(self._kl_coef.numpy()),
            float(out["ppo/update_kl_final"]),
            cfg.kl_target,
          )
        )
      )
    self._step_counter.assign_add(1)
    result = self._step_result(
      out, policy_lag, float(t * b) * float(out["ppo/epochs"])
    )
    result["opt/learning_rate"] = learning_rate
    result["errors/nonfinite_updates"] = float(
      self._optimizer.nonfinite_updates.numpy()
    )
    result["ppo/clip_ratio"] = clip_ratio
    if self._reward_scaler is not None:
      result["ppo/reward_scale"] = float(
        self._reward_scaler.return_stats.std.numpy()
      )
    return result

  def _prepare(self, inputs: TimeMajorBatch, env_ids: np.ndarray) -> np.ndarray:
    """Moves the observation statistics and the reward scale with a batch
    (env_ids [B]); returns the rewards [T, B] to train on (clipped,
    scaled)."""
    observation, rewards = inputs.observation, inputs.rewards
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
          observation[1:].reshape((-1,) + self.observation_spec.shape)
        )
    rewards = rewards_lib.clip_rewards(rewards, self.config.reward_clipping)
    if self._reward_scaler is not None:
      done = inputs.terminated | inputs.truncated
      self._reward_scaler.update(rewards, done, env_ids)
      rewards = self._reward_scaler.scale(rewards).numpy()
    return rewards

  def _annealed(self, step: int) -> Tuple[float, float]:
    """(learning rate, clip ratio) of the update after `step` updates."""
    cfg = self.config
    remaining = 1.0
    if cfg.total_learner_steps:
      remaining = schedules.linear(1.0, 0.0, cfg.total_learner_steps)(step)
    learning_rate = cfg.learning_rate * (
      remaining if cfg.lr_schedule == "linear" else 1.0
    )
    clip_ratio = cfg.clip_ratio * (remaining if cfg.anneal_clip_ratio else 1.0)
    return learning_rate, clip_ratio

  def _time_major(self, batch: Unroll) -> TimeMajorBatch:
    """Unroll [B, T+1, ...] -> the update's time-major inputs."""
    log_prob = agent_api.time_major(batch.extras[LOG_PROB], np.float32)
    return TimeMajorBatch(
      *self._transition_batch(batch), log_prob[: self.unroll_length]
    )

  def checkpoint_objects(self) -> Dict[str, Any]:
    objects = super().checkpoint_objects()
    objects["kl_coef"] = self._kl_coef
    if self._obs_normalizer is not None:
      objects["observation_normalizer"] = self._obs_normalizer
    if self._reward_scaler is not None:
      objects["reward_scaler"] = self._reward_scaler
    return objects

  # ---- compiled functions ------------------------------------------------

  def _preprocess(self, observation: tf.Tensor) -> tf.Tensor:
    if self._obs_normalizer is None:
      return observation  # torsos cast (and scale frames) themselves
    return self._obs_normalizer.normalize(observation)

  def _time_major_signature(self):
    return [
      frame_stacks.frames_spec(self._train_obs_spec, None, None),
      self._raw_action_spec((None, None)),
      tf.TensorSpec([None, None], tf.float32),
      tf.TensorSpec([None, None], tf.bool),
      tf.TensorSpec([None, None], tf.bool),
      tf.TensorSpec([None, None], tf.float32),
    ]


def create_agent(
  observation_spec: ArraySpec, action_spec: ArraySpec, num_envs: int
) -> PPOAgent:
  """Builds the agent with the gin-bound PPOConfig.

  Discrete action specs get a Categorical policy; float32 vector specs a
  Gaussian (squashed or clipped into the Box when the spec has bounds).
  """
  return PPOAgent(observation_spec, action_spec, num_envs, PPOConfig())
