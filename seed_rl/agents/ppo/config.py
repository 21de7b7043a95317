"""Hyperparameters of the PPO agent."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import gin
import keras

from seed_rl.agents.ppo.loss import LOSS_TYPES
from seed_rl.common import config_checks as checks

_LOG_STD_MODES = ("state_independent", "state_dependent")
_BOUND_HANDLING = ("tanh", "clip")
_REWARD_CLIPPING = ("none", "abs_one")


@gin.configurable
@dataclasses.dataclass
class PPOConfig:
  """PPO agent settings; validated on construction.

  Defaults are CleanRL's `ppo.py` (discrete, classic control) except that
  nothing is annealed (annealing needs total_learner_steps, the run's length);
  the gin files under seed_rl/<domain>/gin/ppo.gin set per-domain values with
  their sources.
  One learner step (step_counter += 1) is one PPO update: num_epochs passes
  over batch_size * unroll_length transitions in num_minibatches minibatches.

  Attributes:
    unroll_length: T, transitions per unroll (unrolls hold T+1 steps).
    batch_size: unrolls per PPO update.
    num_epochs: passes over each update's batch.
    num_minibatches: minibatches per epoch (of shuffled single transitions).
    learning_rate: Adam step size at the start.
    anneal_learning_rate: decay the step size linearly to 0 at
      total_learner_steps.
    clip_ratio: eps of the clipped surrogate, in ratio units.
    anneal_clip_ratio: decay eps linearly to 0 at total_learner_steps.
    loss: 'clip' (eq. 7 of Schulman et al. 2017) or 'kl_penalty' (eq. 8,
      adaptive beta as in BatchPPO).
    kl_target: d_targ of the adaptive KL penalty, in nats per step.
    initial_kl_coef: beta at the start.
    kl_cutoff_factor: BatchPPO's extra quadratic penalty beyond
      factor * kl_target; None disables.
    kl_cutoff_coef: weight of that cutoff penalty.
    value_clip: None, or clip the value change per update to +-value_clip
      (in units of the (scaled) returns), Baselines' PPO2 style.
    gamma: discount per step.
    gae_lambda: GAE's lambda.
    entropy_cost: weight of the entropy bonus.
    value_cost: weight of the 0.5 * squared value error.
    max_grad_norm: global-norm gradient clip; None or 0 disables it.
    adam_epsilon: Adam's epsilon (CleanRL and Baselines use 1e-5).
    normalize_advantages: standardise advantages per minibatch.
    recompute_advantages_each_epoch: recompute values and GAE with the
      current weights before every epoch (Andrychowicz et al. 2021), not only
      once per update.
    early_stop_kl: None, or stop an update's remaining minibatches once the
      KL from the policy at the start of the update exceeds it (nats).
    normalize_observations: running mean/std observation normalisation.
    observation_clip: normalised observations are clipped to +-this.
    reward_clipping: 'none', or 'abs_one' to clip raw rewards to [-1, 1]
      before any scaling (Atari; Mnih et al. 2015).
    scale_rewards: divide rewards by the running std of discounted returns.
    reward_clip: scaled rewards are clipped to +-this.
    log_std: 'state_independent' (a learned vector) or 'state_dependent'
      (a head output) for Gaussian policies.
    bound_handling: 'tanh' (squash into the Box) or 'clip' (the env gets the
      clipped sample; densities are of the unclipped one).
    init_log_std: initial log standard deviation of Gaussian policies.
    shared_torso: one torso for policy and value; False gives each its own.
    torso: factory returning a Keras layer [B, *obs] -> [B, F] (e.g.
      @mlp_torso, @atari_torso); None picks atari_torso for uint8 images and
      mlp_torso otherwise.
    total_learner_steps: PPO updates in the whole run; the annealing horizon.
    queue_capacity: unrolls buffered before add_unrolls blocks the actors;
      None means batch_size (at most one update's data waits, which bounds
      the policy lag of on-policy data).
    seed: seeds action sampling and minibatch shuffling.
  """

  unroll_length: int = 128
  batch_size: int = 4
  num_epochs: int = 4
  num_minibatches: int = 4
  learning_rate: float = 2.5e-4
  anneal_learning_rate: bool = False
  clip_ratio: float = 0.2
  anneal_clip_ratio: bool = False
  loss: str = "clip"
  kl_target: float = 0.01
  initial_kl_coef: float = 1.0
  kl_cutoff_factor: Optional[float] = None
  kl_cutoff_coef: float = 1000.0
  value_clip: Optional[float] = None
  gamma: float = 0.99
  gae_lambda: float = 0.95
  entropy_cost: float = 0.01
  value_cost: float = 0.5
  max_grad_norm: Optional[float] = 0.5
  adam_epsilon: float = 1e-5
  normalize_advantages: bool = True
  recompute_advantages_each_epoch: bool = False
  early_stop_kl: Optional[float] = None
  normalize_observations: bool = False
  observation_clip: float = 10.0
  reward_clipping: str = "none"
  scale_rewards: bool = False
  reward_clip: float = 10.0
  log_std: str = "state_independent"
  bound_handling: str = "clip"
  init_log_std: float = 0.0
  shared_torso: bool = False
  torso: Optional[Callable[[], keras.layers.Layer]] = None
  total_learner_steps: Optional[int] = None
  queue_capacity: Optional[int] = None
  seed: int = 0

  def __post_init__(self):
    def fail(message):
      checks.fail(self, message)

    checks.positive_ints(
      self, "unroll_length", "batch_size", "num_epochs", "num_minibatches"
    )
    steps = self.unroll_length * self.batch_size
    if self.num_minibatches > steps:
      fail(
        f"num_minibatches ({self.num_minibatches}) exceeds the "
        f"{steps} transitions of an update (unroll_length * batch_size); "
        f"some minibatches would be empty"
      )
    checks.positive(self, "learning_rate")
    if not 0 < self.clip_ratio < 1:
      fail(
        f"clip_ratio must be in (0, 1): the ratio is clipped to "
        f"[1 - eps, 1 + eps], got {self.clip_ratio}"
      )
    if self.anneal_learning_rate or self.anneal_clip_ratio:
      if (
        self.total_learner_steps is None
        or isinstance(self.total_learner_steps, bool)
        or self.total_learner_steps < 1
      ):
        fail(
          f"total_learner_steps must be a positive number of PPO updates "
          f"when annealing (it is the horizon where the learning rate / "
          f"clip ratio reach 0), got {self.total_learner_steps!r}"
        )
    checks.choice(self, "loss", LOSS_TYPES)
    checks.positive(self, "kl_target", why="nats; beta is adapted around it")
    checks.positive(
      self,
      "initial_kl_coef",
      why="beta = 0 never grows back under multiplicative adaptation",
    )
    if self.kl_cutoff_factor is not None and not self.kl_cutoff_factor > 1:
      fail(
        f"kl_cutoff_factor must be > 1 (the cutoff sits above the target) "
        f"or None, got {self.kl_cutoff_factor}"
      )
    checks.non_negative(self, "kl_cutoff_coef")
    if self.value_clip is not None and not self.value_clip > 0:
      fail(
        f"value_clip must be > 0 or None; 0 would freeze the value "
        f"function, got {self.value_clip}"
      )
    checks.discount(self, "gamma")
    checks.in_unit_interval(self, "gae_lambda")
    checks.non_negative(
      self,
      "entropy_cost",
      "value_cost",
      why="a negative weight flips the objective",
    )
    checks.max_grad_norm(self)
    checks.optimizer_epsilon(self, "adam_epsilon")
    if self.early_stop_kl is not None and not self.early_stop_kl > 0:
      fail(
        f"early_stop_kl must be > 0 nats or None; 0 would stop every "
        f"update after its first minibatch, got {self.early_stop_kl}"
      )
    checks.positive(self, "observation_clip", "reward_clip")
    checks.choice(self, "reward_clipping", _REWARD_CLIPPING)
    checks.choice(self, "log_std", _LOG_STD_MODES)
    checks.choice(self, "bound_handling", _BOUND_HANDLING)
    if not -20 < self.init_log_std < 2:
      fail(
        f"init_log_std must be in (-20, 2), the clamp of the Gaussian's "
        f"log std; got {self.init_log_std}"
      )
    checks.torso_factory(self, allow_none=True)
    checks.queue_capacity(self)

  @property
  def steps_per_update(self) -> int:
    """Transitions per PPO update (batch_size * unroll_length)."""
    return self.batch_size * self.unroll_length
