"""Hyperparameters of the PPO agent."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import gin
import keras

from seed_rl.agents.ppo.loss import LOSS_TYPES
from seed_rl.agents import config_checks as checks
from seed_rl.common.optimizers import ADAM_EPSILON_FORMS

_LOG_STD_MODES = ("state_independent", "state_dependent")
_BOUND_HANDLING = ("tanh", "clip")


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

  Attributes, grouped in the same order in every agent's config:
    Data:
      unroll_length: T, transitions per unroll (unrolls hold T+1 steps).
      batch_size: unrolls per PPO update.
      num_epochs: passes over each update's batch.
      num_minibatches: minibatches per epoch (of shuffled single
        transitions).
    Returns and targets:
      discount: gamma per agent step.
      gae_lambda: GAE's lambda.
      reward_clipping: 'none', or 'abs_one' to clip raw rewards to [-1, 1]
        before any scaling (Atari; Mnih et al. 2015).
      scale_rewards: divide rewards by the running std of discounted
        returns.
      reward_clip: scaled rewards are clipped to +-this.
      normalize_advantages: standardise advantages per minibatch.
      recompute_advantages_each_epoch: recompute values and GAE with the
        current weights before every epoch (Andrychowicz et al. 2021), not
        only once per update.
    Loss weights and clipping:
      loss: 'clip' (eq. 7 of Schulman et al. 2017) or 'kl_penalty' (eq. 8,
        adaptive beta as in BatchPPO).
      surrogate_anchor: where 'clip' anchors its trust region: 'behaviour'
        (the paper's r = pi / mu, mu the policy that acted) or 'proximal'
        (Hilton et al. 2021's decoupled objective: r = pi / pi_prox with
        pi_prox the weights at the start of the update, weighted by
        pi_prox / mu), which lets each update move clip_ratio however far
        the asynchronous learner's data lag behind.
      entropy_cost: weight of the entropy bonus.
      value_cost: weight of the value loss 0.5 * mean (V - return)^2 (the
        clipped variant's with value_clip).
      clip_ratio: eps of the clipped surrogate, in ratio units.
      anneal_clip_ratio: decay eps linearly to 0 at total_learner_steps.
      value_clip: None, or clip the value change per update to +-value_clip
        (in units of the (scaled) returns), Baselines' PPO2 style.
      kl_target: d_targ of the adaptive KL penalty, in nats per step.
      initial_kl_coef: beta at the start.
      kl_cutoff_factor: BatchPPO's extra quadratic penalty beyond
        factor * kl_target; None disables.
      kl_cutoff_coef: weight of that cutoff penalty.
      early_stop_kl: None, or stop an update's remaining minibatches once the
        KL from the policy at the start of the update exceeds it (nats).
    Optimizer (Adam):
      learning_rate: step size at the start.
      lr_schedule: 'constant', or 'linear' to decay the step size to 0 at
        total_learner_steps.
      total_learner_steps: PPO updates in the whole run; the horizon of the
        'linear' schedules (needed by them, else unused).
      optimizer_epsilon: Adam's denominator epsilon (CleanRL and Baselines
        use 1e-5).
      optimizer_epsilon_form: 'tensorflow' (epsilon added to sqrt(v) before
        bias correction, as TensorFlow's kernel) or 'paper' (to the
        bias-corrected sqrt(v), Kingma & Ba's Algorithm 1 and PyTorch's, so
        CleanRL's and SB3's); see seed_rl/common/optimizers.py.
      max_grad_norm: global-norm gradient clip; None or 0 disables it.
    Network:
      torso: factory returning a Keras layer [B, *obs] -> [B, F] (e.g.
        @mlp_torso, @atari_torso); None picks atari_torso for uint8 images
        and mlp_torso otherwise.
      shared_torso: one torso for policy and value; False gives each its
        own.
      log_std: 'state_independent' (a learned vector) or 'state_dependent'
        (a head output) for Gaussian policies.
      init_log_std: initial log standard deviation of Gaussian policies.
      bound_handling: 'tanh' (squash into the Box) or 'clip' (the env gets
        the clipped sample; densities are of the unclipped one).
      normalize_observations: running mean/std observation normalisation.
      observation_clip: normalised observations are clipped to +-this.
    Misc:
      seed: seeds action sampling and minibatch shuffling.
      queue_capacity: unrolls buffered before add_unrolls blocks the actors;
        None means batch_size (at most one update's data waits, which bounds
        the policy lag of on-policy data).
  """

  # Data.
  unroll_length: int = 128
  batch_size: int = 4
  num_epochs: int = 4
  num_minibatches: int = 4
  # Returns and targets.
  discount: float = 0.99
  gae_lambda: float = 0.95
  reward_clipping: str = "none"
  scale_rewards: bool = False
  reward_clip: float = 10.0
  normalize_advantages: bool = True
  recompute_advantages_each_epoch: bool = False
  # Loss weights and clipping.
  loss: str = "clip"
  surrogate_anchor: str = "behaviour"
  entropy_cost: float = 0.01
  value_cost: float = 0.5
  clip_ratio: float = 0.2
  anneal_clip_ratio: bool = False
  value_clip: Optional[float] = None
  kl_target: float = 0.01
  initial_kl_coef: float = 1.0
  kl_cutoff_factor: Optional[float] = None
  kl_cutoff_coef: float = 1000.0
  early_stop_kl: Optional[float] = None
  # Optimizer.
  learning_rate: float = 2.5e-4
  lr_schedule: str = "constant"
  total_learner_steps: Optional[int] = None
  optimizer_epsilon: float = 1e-5
  optimizer_epsilon_form: str = "tensorflow"
  max_grad_norm: Optional[float] = 0.5
  # Network.
  torso: Optional[Callable[[], keras.layers.Layer]] = None
  shared_torso: bool = False
  log_std: str = "state_independent"
  init_log_std: float = 0.0
  bound_handling: str = "clip"
  normalize_observations: bool = False
  observation_clip: float = 10.0
  # Misc.
  seed: int = 0
  queue_capacity: Optional[int] = None

  def __post_init__(self):
    """Validates every field (one check per field, in field order).

    The checks run group by group (`_check_*`, each a flat checklist in
    field order); the shared checks live in seed_rl/agents/config_checks.py.
    """
    self._check_data()
    self._check_annealing()
    self._check_loss()
    self._check_targets()
    self._check_optimizer()
    self._check_preprocessing()
    self._check_network()
    checks.queue_capacity(self)

  def _check_data(self) -> None:
    """Unroll and batch sizes, epochs and minibatches of an update."""
    checks.positive_ints(
      self, "unroll_length", "batch_size", "num_epochs", "num_minibatches"
    )
    steps = self.unroll_length * self.batch_size
    if self.num_minibatches > steps:
      checks.fail(
        self,
        f"num_minibatches ({self.num_minibatches}) exceeds the "
        f"{steps} transitions of an update (unroll_length * batch_size); "
        f"some minibatches would be empty",
      )

  def _check_annealing(self) -> None:
    """The learning rate and clip ratio, and the horizon they anneal over."""
    checks.positive(self, "learning_rate")
    checks.choice(self, "lr_schedule", checks.LR_SCHEDULES)
    if not 0 < self.clip_ratio < 1:
      checks.fail(
        self,
        f"clip_ratio must be in (0, 1): the ratio is clipped to "
        f"[1 - eps, 1 + eps], got {self.clip_ratio}",
      )
    if self.lr_schedule == "linear" or self.anneal_clip_ratio:
      if (
        self.total_learner_steps is None
        or isinstance(self.total_learner_steps, bool)
        or self.total_learner_steps < 1
      ):
        checks.fail(
          self,
          f"total_learner_steps must be a positive number of PPO updates "
          f"when annealing (it is the horizon where the learning rate / "
          f"clip ratio reach 0), got {self.total_learner_steps!r}",
        )

  def _check_loss(self) -> None:
    """The surrogate loss: its type, the KL penalty and the value clip."""
    checks.choice(self, "loss", LOSS_TYPES)
    checks.surrogate_anchor(self, "loss")
    checks.positive(self, "kl_target", why="nats; beta is adapted around it")
    checks.positive(
      self,
      "initial_kl_coef",
      why="beta = 0 never grows back under multiplicative adaptation",
    )
    if self.kl_cutoff_factor is not None and not self.kl_cutoff_factor > 1:
      checks.fail(
        self,
        f"kl_cutoff_factor must be > 1 (the cutoff sits above the target) "
        f"or None, got {self.kl_cutoff_factor}",
      )
    checks.non_negative(self, "kl_cutoff_coef")
    if self.value_clip is not None and not self.value_clip > 0:
      checks.fail(
        self,
        f"value_clip must be > 0 or None; 0 would freeze the value "
        f"function, got {self.value_clip}",
      )

  def _check_targets(self) -> None:
    """The GAE advantages' discount and lambda."""
    checks.discount(self)
    checks.in_unit_interval(self, "gae_lambda")

  def _check_optimizer(self) -> None:
    """The loss weights and the update step: gradient clipping, Adam's
    epsilon and the KL early stop."""
    checks.non_negative(
      self,
      "entropy_cost",
      "value_cost",
      why="a negative weight flips the objective",
    )
    checks.max_grad_norm(self)
    checks.optimizer_epsilon(self, "optimizer_epsilon")
    checks.choice(self, "optimizer_epsilon_form", ADAM_EPSILON_FORMS)
    if self.early_stop_kl is not None and not self.early_stop_kl > 0:
      checks.fail(
        self,
        f"early_stop_kl must be > 0 nats or None; 0 would stop every "
        f"update after its first minibatch, got {self.early_stop_kl}",
      )

  def _check_preprocessing(self) -> None:
    """Observation and reward clipping."""
    checks.positive(self, "observation_clip", "reward_clip")
    checks.choice(self, "reward_clipping", checks.REWARD_CLIPPING)

  def _check_network(self) -> None:
    """The Gaussian head's log std and bound handling, and the torso."""
    checks.choice(self, "log_std", _LOG_STD_MODES)
    checks.choice(self, "bound_handling", _BOUND_HANDLING)
    if not -20 < self.init_log_std < 2:
      checks.fail(
        self,
        f"init_log_std must be in (-20, 2), the clamp of the Gaussian's "
        f"log std; got {self.init_log_std}",
      )
    checks.torso_factory(self, allow_none=True)
