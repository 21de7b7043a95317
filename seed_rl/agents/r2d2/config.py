"""Hyperparameters of the R2D2 agent (Kapturowski et al. 2019)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Tuple

import gin
import keras

from seed_rl.networks import mlp_torso
from seed_rl.agents import config_checks as checks
from seed_rl.agents import schedules


@gin.configurable
@dataclasses.dataclass
class R2D2Config:
  """R2D2 settings; validated on construction.

  Defaults are the R2D2 paper's (Table 2) and SEED RL's r2d2 learner flags
  where those exist; the gin files pick per-domain sizes.

  Sequence layout: the runtime hands over unrolls of `unroll_length + 1`
  steps. The first `burn_in` steps only warm the LSTM up from the stored
  state; steps [burn_in, unroll_length - n_step] are learning steps, each with
  a full n-step target; the last `n_step` steps only serve as bootstrap
  states. Consecutive unrolls of one env overlap by burn_in + n_step steps, so
  every step of an env's stream is a learning step in exactly one sequence.

  Attributes, grouped in the same order in every agent's config:
    Data:
      unroll_length: T, steps per sequence minus one (burn-in included).
      batch_size: sequences per learner step.
      burn_in: leading steps that only warm up the recurrent state.
      replay_capacity: sequences kept in replay (FIFO).
      min_replay_size: sequences inserted before training starts.
      samples_per_insert: sampled sequences per inserted sequence (the replay
        ratio: how often each learning step is replayed on average).
      rate_limiter_error_buffer: tolerated deviation from samples_per_insert,
        in sampled sequences; None means 2 * batch_size.
      priority_exponent: alpha; sequences are drawn with p^alpha.
      importance_sampling_exponent: beta at learner step 0.
      importance_sampling_exponent_final: beta reached linearly at
        `total_learner_steps` (set it equal to the first for a fixed beta).
      priority_eta: eta in eta * max|delta| + (1 - eta) * mean|delta|.
      store_frames_once: for stacked uint8 frames [H, W, k], store each frame
        once per sequence instead of k times (k-fold less replay memory).
    Returns and targets:
      discount: gamma per agent step.
      n_step: length of the n-step return.
      value_rescaling_epsilon: eps of h(x) = sign(x)(sqrt(|x|+1)-1) + eps x.
      target_update_period: learner steps between target-network syncs.
    Optimizer (Adam):
      learning_rate: Adam learning rate.
      total_learner_steps: the run's length in learner steps; the horizon of
        the beta annealing.
      optimizer_epsilon: Adam's denominator epsilon.
      max_grad_norm: global-norm gradient clip; None or 0 disables it.
    Network:
      torso: factory of the observation torso (@mlp_torso, @atari_torso).
      head_hidden: hidden layer widths of each dueling stream (value,
        advantage); () puts the output layers right on the LSTM output.
      lstm_units: LSTM size.
    Exploration:
      epsilon_base, epsilon_alpha: training env i of N explores with
        epsilon_base ** (1 + epsilon_alpha * i / (N - 1)) (Ape-X, R2D2).
      epsilon_warmup_steps: learner steps over which each training env's
        epsilon goes linearly from 1 to its Ape-X value (0: none, as the
        paper, whose hundreds of actors cover the spectrum).
      eval_epsilon: fixed epsilon of evaluation envs.
    Misc:
      seed: seeds exploration and replay sampling; None draws one.
  """

  # Data.
  unroll_length: int = 80
  batch_size: int = 64
  burn_in: int = 40
  replay_capacity: int = 100_000
  min_replay_size: int = 5000
  samples_per_insert: float = 0.75
  rate_limiter_error_buffer: Optional[float] = None
  priority_exponent: float = 0.9
  importance_sampling_exponent: float = 0.6
  importance_sampling_exponent_final: float = 1.0
  priority_eta: float = 0.9
  store_frames_once: bool = True
  # Returns and targets.
  discount: float = 0.997
  n_step: int = 5
  value_rescaling_epsilon: float = 1e-3
  target_update_period: int = 2500
  # Optimizer.
  learning_rate: float = 1e-4
  total_learner_steps: int = 1_000_000
  optimizer_epsilon: float = 1e-3
  max_grad_norm: Optional[float] = 40.0
  # Network.
  torso: Callable[[], keras.layers.Layer] = mlp_torso
  head_hidden: Tuple[int, ...] = (512,)
  lstm_units: int = 512
  # Exploration.
  epsilon_base: float = 0.4
  epsilon_alpha: float = 7.0
  epsilon_warmup_steps: int = 0
  eval_epsilon: float = 1e-3
  # Misc.
  seed: Optional[int] = None

  @property
  def unroll_overlap(self) -> int:
    """Steps shared by consecutive unrolls of one env (burn_in + n_step)."""
    return self.burn_in + self.n_step

  @property
  def num_learning_steps(self) -> int:
    """Steps per sequence that get a TD error (unroll_length + 1 - overlap)."""
    return self.unroll_length + 1 - self.burn_in - self.n_step

  @property
  def error_buffer(self) -> float:
    if self.rate_limiter_error_buffer is None:
      return 2.0 * self.batch_size
    return float(self.rate_limiter_error_buffer)

  def importance_sampling_exponent_at(self, step: int) -> float:
    """Beta annealed linearly from the first to the final value."""
    return schedules.linear(
      self.importance_sampling_exponent,
      self.importance_sampling_exponent_final,
      self.total_learner_steps,
    )(step)

  def __post_init__(self):
    checks.positive_ints(
      self,
      "unroll_length",
      "n_step",
      "replay_capacity",
      "batch_size",
      "target_update_period",
      "min_replay_size",
      "lstm_units",
      "total_learner_steps",
    )
    self.head_hidden = checks.layer_widths(self, "head_hidden")
    if (
      isinstance(self.burn_in, bool)
      or not isinstance(self.burn_in, int)
      or (self.burn_in < 0)
    ):
      checks.fail(
        self, f"burn_in must be an integer >= 0, got {self.burn_in!r}"
      )
    if self.burn_in + self.n_step >= self.unroll_length:
      checks.fail(
        self,
        f"burn_in ({self.burn_in}) + n_step ({self.n_step}) must "
        f"be < unroll_length ({self.unroll_length}): a sequence of "
        f"unroll_length + 1 steps learns on unroll_length + 1 - burn_in - "
        f"n_step steps (the rest warm the LSTM or only bootstrap), so there "
        f"would be fewer than 2 steps left to learn from",
      )
    checks.min_replay_size(self)
    checks.discount(self)
    checks.non_negative(self, "priority_exponent", why="0 is uniform sampling")
    checks.in_unit_interval(
      self,
      "importance_sampling_exponent",
      "importance_sampling_exponent_final",
      "priority_eta",
      "epsilon_base",
      "eval_epsilon",
    )
    checks.non_negative(
      self,
      "epsilon_alpha",
      why="a negative slope gives epsilons above epsilon_base",
    )
    if (
      isinstance(self.epsilon_warmup_steps, bool)
      or not isinstance(self.epsilon_warmup_steps, int)
      or self.epsilon_warmup_steps < 0
    ):
      checks.fail(
        self,
        "epsilon_warmup_steps must be an integer >= 0 (learner steps; 0: "
        f"no warm-up), got {self.epsilon_warmup_steps!r}",
      )
    checks.positive(self, "learning_rate")
    checks.optimizer_epsilon(self, "optimizer_epsilon")
    checks.max_grad_norm(self)
    checks.positive(
      self, "samples_per_insert", why="else training never samples"
    )
    checks.rate_limiter_error_buffer(self, self.error_buffer)
    checks.positive(
      self,
      "value_rescaling_epsilon",
      why="it keeps h invertible with a Lipschitz inverse",
    )
    checks.torso_factory(self)
