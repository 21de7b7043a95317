"""Hyperparameters of the DQN family (double, dueling, n-step, PER, noisy)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Tuple

import gin
import keras

from seed_rl.networks import mlp_torso
from seed_rl.agents import config_checks as checks
from seed_rl.agents import noisy as noisy_lib

_NOISY = (None,) + noisy_lib.NOISE_TYPES


@gin.configurable
@dataclasses.dataclass
class DQNConfig:
  """DQN agent settings; validated on construction.

  Defaults target CartPole-v1 with 16 envs on 2 CPU cores (Rainbow-lite:
  double + dueling + 3-step + prioritized replay, a 64-64 MLP, Adam at 5e-4).
  Schedules (epsilon, beta) run in LEARNER steps: the step counter is
  checkpointed, and the rate limiter ties learner steps to env steps
  (env steps per learner step = batch_size / samples_per_insert).

  Attributes, grouped in the same order in every agent's config:
    Data:
      unroll_length: T; the runtime hands unrolls of T+1 steps overlapping by
        n_step steps, so each holds T+1-n_step new n-step transitions.
      batch_size: transitions per learner step.
      replay_capacity: stored transitions (FIFO beyond it).
      min_replay_size: transitions inserted before training starts.
      samples_per_insert: sampled transitions per inserted one (replay
        ratio); the rate limiter throttles acting or training to hold it.
      rate_limiter_error_buffer: allowed drift from that ratio, in sampled
        transitions; None picks max(batch_size, samples_per_insert * one
        round of unrolls from every env).
      prioritized: proportional prioritized replay; False samples uniformly.
      priority_exponent: alpha.
      importance_sampling_exponent: beta at step 0, linearly annealed to 1 at
        total_learner_steps.
      priority_epsilon: added to |TD error| so no priority is 0.
      store_frames_once: for stacked uint8 frames [H, W, k], store each
        unroll's frames once and rebuild the stacks of sampled transitions
        (~1.1-1.3 frames per transition instead of 2k).
    Returns and targets:
      discount: gamma per agent step.
      n_step: transitions span n rewards.
      reward_clipping: 'none', or 'abs_one' to clip each reward to [-1, 1]
        before summing n-step returns (DQN on Atari, Mnih et al. 2015); value
        rescaling is the alternative.
      value_rescaling: regress h(target) (Pohlen et al. 2018).
      value_rescaling_epsilon: eps of h(x) = sign(x)(sqrt(|x|+1)-1) + eps x.
      double_q: bootstrap with Q_target(s', argmax_a Q_online(s', a)).
      target_update_period: learner steps between target-network syncs.
    Loss:
      huber_loss: Huber (delta huber_delta) instead of squared TD error.
      huber_delta: Huber threshold, in target units.
    Optimizer (Adam):
      learning_rate: Adam learning rate.
      total_learner_steps: the run's length in learner steps; the horizon of
        the beta schedule.
      optimizer_epsilon: Adam's denominator epsilon.
      max_grad_norm: global-norm gradient clip; None or 0 disables it.
    Network:
      torso: factory of the observation torso (mlp_torso, atari_torso).
      head_hidden: hidden layer widths of the Q head (of each stream when
        dueling); () puts the output layer right on the torso features.
      dueling: V(s) + A(s, a) - mean_a A(s, a) head (Wang et al. 2016).
      noisy: None, 'ig' or 'fg' NoisyNet head layers (Fortunato et al.
        2017); exploration then comes from the noise and epsilon must be 0.
      noisy_sigma0: noise scale; None for the paper's default of the type.
    Exploration:
      epsilon_start, epsilon_end: epsilon-greedy exploration, linear in
        learner steps from start to end over epsilon_decay_steps (evaluation
        envs act greedily).
      epsilon_decay_steps: learner steps of the epsilon decay.
    Misc:
      seed: seed of the replay sampler and the exploration generator.
  """

  # Data.
  unroll_length: int = 16
  batch_size: int = 64
  replay_capacity: int = 50_000
  min_replay_size: int = 1_000
  samples_per_insert: float = 8.0
  rate_limiter_error_buffer: Optional[float] = None
  prioritized: bool = True
  priority_exponent: float = 0.5
  importance_sampling_exponent: float = 0.4
  priority_epsilon: float = 1e-6
  store_frames_once: bool = False
  # Returns and targets.
  discount: float = 0.99
  n_step: int = 3
  reward_clipping: str = "none"
  value_rescaling: bool = False
  value_rescaling_epsilon: float = 1e-3
  double_q: bool = True
  target_update_period: int = 250
  # Loss.
  huber_loss: bool = True
  huber_delta: float = 1.0
  # Optimizer.
  learning_rate: float = 5e-4
  total_learner_steps: int = 20_000
  optimizer_epsilon: float = 1e-5
  max_grad_norm: Optional[float] = 10.0
  # Network.
  torso: Callable[[], keras.layers.Layer] = mlp_torso
  head_hidden: Tuple[int, ...] = (64,)
  dueling: bool = True
  noisy: Optional[str] = None
  noisy_sigma0: Optional[float] = None
  # Exploration.
  epsilon_start: float = 1.0
  epsilon_end: float = 0.01
  epsilon_decay_steps: int = 4_000
  # Misc.
  seed: Optional[int] = None

  @property
  def unroll_overlap(self) -> int:
    """Steps shared by consecutive unrolls of an env: the n_step steps whose
    transitions could not be completed in the previous unroll."""
    return self.n_step

  def __post_init__(self):
    """Validates every field (one check per field, in field order).

    The checks run group by group (`_check_*`, each a flat checklist in
    field order); the shared checks live in seed_rl/agents/config_checks.py.
    """
    self._check_sizes()
    self._check_td_loss()
    self._check_replay()
    self._check_optimizer()
    self._check_exploration()
    checks.torso_factory(self)

  def _check_sizes(self) -> None:
    """The positive integer sizes, the head's layer widths and the unroll
    length against n_step."""
    checks.positive_ints(
      self,
      "n_step",
      "replay_capacity",
      "total_learner_steps",
      "min_replay_size",
      "batch_size",
      "target_update_period",
      "epsilon_decay_steps",
      "unroll_length",
    )
    self.head_hidden = checks.layer_widths(self, "head_hidden")
    if self.unroll_length < self.n_step:
      checks.fail(
        self,
        f"unroll_length ({self.unroll_length}) must be >= n_step "
        f"({self.n_step}): an unroll of unroll_length + 1 steps overlapping "
        f"the previous one by n_step steps would hold no new transition",
      )

  def _check_td_loss(self) -> None:
    """The TD targets (discount, reward clipping, value rescaling) and the
    Huber loss."""
    checks.discount(self)
    checks.choice(self, "reward_clipping", checks.REWARD_CLIPPING)
    checks.non_negative(
      self, "value_rescaling_epsilon", why="h is not invertible otherwise"
    )
    checks.positive(self, "huber_delta")

  def _check_replay(self) -> None:
    """Replay warm-up, prioritisation and the rate limiter."""
    checks.min_replay_size(self)
    if self.min_replay_size < self.batch_size:
      checks.fail(
        self,
        f"min_replay_size ({self.min_replay_size}) must be >= "
        f"batch_size ({self.batch_size}) so the first batch is not mostly "
        f"duplicates",
      )
    checks.non_negative(self, "priority_exponent")
    checks.in_unit_interval(self, "importance_sampling_exponent")
    checks.positive(
      self,
      "priority_epsilon",
      why="so a perfectly fit transition can still be sampled",
    )
    checks.positive(self, "samples_per_insert", why="0 would never train")
    checks.rate_limiter_error_buffer(self, self.rate_limiter_error_buffer)

  def _check_optimizer(self) -> None:
    """Learning rate, Adam's epsilon and gradient clipping."""
    checks.positive(self, "learning_rate")
    checks.optimizer_epsilon(self, "optimizer_epsilon")
    checks.max_grad_norm(self)

  def _check_exploration(self) -> None:
    """Epsilon-greedy and NoisyNet exploration, which exclude each other."""
    checks.in_unit_interval(self, "epsilon_start", "epsilon_end")
    if self.noisy not in _NOISY:
      checks.fail(self, f"noisy must be one of {_NOISY}, got {self.noisy!r}")
    if self.noisy is not None and (self.epsilon_start or self.epsilon_end):
      checks.fail(
        self,
        "epsilon_start and epsilon_end must be 0 with noisy layers: "
        "exploration comes from the noise; set epsilon_start = epsilon_end "
        f"= 0 (Fortunato et al. 2017), got {self.epsilon_start} -> "
        f"{self.epsilon_end}",
      )
    if self.noisy_sigma0 is not None and not self.noisy_sigma0 > 0:
      checks.fail(self, f"noisy_sigma0 must be > 0, got {self.noisy_sigma0}")
    if self.noisy is None and self.noisy_sigma0 is not None:
      checks.fail(
        self,
        "noisy_sigma0 is set but noisy is None; pick 'ig' or "
        "'fg' or drop noisy_sigma0",
      )
