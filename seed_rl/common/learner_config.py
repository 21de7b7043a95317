"""The learner runtime's settings (gin: `LearnerConfig.*`) and TensorFlow's
thread pools. TensorFlow-free: TF is imported only when the pools are sized.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import gin


@gin.configurable
@dataclasses.dataclass
class LearnerConfig:
  """Runtime settings (units in the names).

  inference_batch_size: pending envs that trigger an inference call at
    once (the call then takes every pending request); None means every
    training and eval env (one call per "tick" of all actors), and so does
    any value above that. Smaller values let actors run out of step: while
    some wait for inference, others step their envs (Atari V-trace triggers
    on one 32-env actor).
  max_inference_batch_size: most envs one inference call takes (whole
    requests, at least inference_batch_size); None: every env. With many
    actors in step an unbounded call grows to thousands of envs, holds every
    actor until it is done and costs more per env (64 actors x 32 Atari
    envs, null model: 45 -> 33 us of learner CPU per agent step, p99
    latency 2.2 s -> 0.27 s with 512; 128 and 256 measured the same).
  batch_timeout_ms: longest wait of a pending request for a fuller batch.
  frame_stack: observations stacked on the learner (4 for Atari frames).
  checkpoint_every_s: seconds between checkpoints (also saved at shutdown).
  log_every_s: seconds between TensorBoard writes and console lines.
  target_return: stop (if stop_at_target) once the mean return of the last
    100 training episodes reaches it; None never stops on return.
  max_env_steps / max_learner_steps / max_seconds: other stop conditions.
  tf_intra_op_threads / tf_inter_op_threads: TensorFlow's thread pools in
    the learner (None: TF's default, one per core). On a machine whose cores
    the actors share, fewer threads spin less.
  max_abs_reward / max_abs_observation: larger magnitudes in an actor's
    message are refused (INVALID_ARGUMENT) before they reach training.
  training_devices: devices the training step runs on, data parallel under
    tf.distribute.MirroredStrategy, e.g. ('GPU:0', 'GPU:1'): each batch is
    split along B, one equal shard per device (V-trace only; see
    seed_rl/common/devices.py). None: TensorFlow's default device.
  inference_device: where inference runs; None: the first training device
    (TensorFlow's default without training_devices).
  terminal_on_life_loss: a lost life (Atari; actors report it) ends the
    training env's episode for the agent's targets, as Baselines' and
    CleanRL's EpisodicLifeEnv do, without resetting the game. Returns,
    `episode/return`, eval envs and seed_rl.evaluate still count whole
    games with all lives. No effect on envs without lives (Pong).
  checkpoint_replay: every checkpoint also saves the agent's replay, and a
    resumed run restores it (agents that keep one: R2D2, DQN, SAC, TD3,
    ACER; seed_rl/common/replay_state.py). Costs a copy of the replay in
    memory while saving and its size on disk per kept checkpoint.
  synchronous: collect a batch, train on it, then collect the next with
    the new weights, as CleanRL's and Stable-Baselines3's PPO and A2C do:
    inference waits while a whole batch is pending or training
    (seed_rl/common/sync_gate.py). Queue-fed agents only (A2C, PPO,
    V-trace); actors idle while the learner trains, so per wall clock it
    is slower, and the policy lag is ~0 instead of one or more updates.
  """

  inference_batch_size: Optional[int] = None
  max_inference_batch_size: Optional[int] = 512
  batch_timeout_ms: float = 2.0
  frame_stack: int = 1
  checkpoint_every_s: float = 600.0
  log_every_s: float = 5.0
  target_return: Optional[float] = None
  stop_at_target: bool = True
  max_env_steps: Optional[int] = None
  max_learner_steps: Optional[int] = None
  max_seconds: Optional[float] = None
  tf_intra_op_threads: Optional[int] = None
  tf_inter_op_threads: Optional[int] = None
  max_abs_reward: float = 1e6
  max_abs_observation: float = 1e6
  training_devices: Optional[Tuple[str, ...]] = None
  inference_device: Optional[str] = None
  terminal_on_life_loss: bool = False
  checkpoint_replay: bool = False
  synchronous: bool = False

  def __post_init__(self):
    if self.training_devices is not None:
      if isinstance(self.training_devices, str) or not all(
        isinstance(d, str) for d in self.training_devices
      ):
        raise ValueError(
          "LearnerConfig.training_devices must be a tuple of device names, "
          f"e.g. ('GPU:0', 'GPU:1'), or None; got {self.training_devices!r}"
        )
      self.training_devices = tuple(self.training_devices) or None
    if (
      self.max_inference_batch_size is not None
      and self.max_inference_batch_size < 1
    ):
      raise ValueError(
        "LearnerConfig.max_inference_batch_size must be >= 1 or None (every "
        f"env), got {self.max_inference_batch_size}"
      )
    if self.inference_batch_size is not None and self.inference_batch_size < 1:
      raise ValueError(
        "LearnerConfig.inference_batch_size must be >= 1 or "
        f"None (all envs), got {self.inference_batch_size}"
      )
    if self.batch_timeout_ms < 0:
      raise ValueError(
        "LearnerConfig.batch_timeout_ms must be >= 0, got "
        f"{self.batch_timeout_ms}"
      )
    if self.frame_stack < 1:
      raise ValueError(
        f"LearnerConfig.frame_stack must be >= 1, got {self.frame_stack}"
      )
    for name in (
      "checkpoint_every_s",
      "log_every_s",
      "max_abs_reward",
      "max_abs_observation",
    ):
      if getattr(self, name) <= 0:
        raise ValueError(f"LearnerConfig.{name} must be > 0")
    for name in ("tf_intra_op_threads", "tf_inter_op_threads"):
      value = getattr(self, name)
      if value is not None and value < 1:
        raise ValueError(
          f"LearnerConfig.{name} must be >= 1 or None (TF's "
          f"default), got {value}"
        )


def configure_tf_threads(config: LearnerConfig) -> None:
  """Sizes TensorFlow's thread pools; call before TF runs its first op."""
  import tensorflow as tf

  if config.tf_intra_op_threads:
    tf.config.threading.set_intra_op_parallelism_threads(
      config.tf_intra_op_threads
    )
  if config.tf_inter_op_threads:
    tf.config.threading.set_inter_op_parallelism_threads(
      config.tf_inter_op_threads
    )
