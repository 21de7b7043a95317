"""Hyperparameters of the synchronous advantage actor-critic (A2C)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import gin
import keras

from seed_rl.agents import config_checks as checks

_OPTIMIZERS = ("rmsprop", "adam")
_LOG_STD_MODES = ("state_independent", "state_dependent")
_BOUND_HANDLING = ("tanh", "clip")


@gin.configurable
@dataclasses.dataclass
class A2CConfig:
  """A2C agent settings; validated on construction.

  Defaults are Stable-Baselines3's A2C (n_steps 5, gamma 0.99, lambda 1,
  RMSProp lr 7e-4, vf_coef 0.5, max_grad_norm 0.5), which is the A2C of
  OpenAI Baselines and the synchronous form of Mnih et al. 2016's A3C, except
  entropy_cost (0.01 as Baselines and the A3C paper; SB3: 0). The gin files
  under seed_rl/<domain>/gin/a2c.gin set per-domain values with sources.
  One learner step is one gradient update on batch_size unrolls.

  Attributes, grouped in the same order in every agent's config:
    Data:
      unroll_length: T, transitions per unroll (unrolls hold T+1 steps); the
        "n" of the n-step returns.
      batch_size: unrolls per gradient update (A2C's number of envs).
    Returns and targets:
      discount: gamma per agent step.
      gae_lambda: lambda of the returns: 1 gives A3C's n-step returns
        (every step bootstraps from V at the unroll end, or stops at an
        episode end), < 1 GAE(lambda) (Schulman et al. 2016).
      reward_clipping: 'none', or 'abs_one' to clip raw rewards to [-1, 1]
        before the returns (Atari; Mnih et al. 2015).
      normalize_advantages: standardise advantages over each batch (SB3's
        normalize_advantage; off in A2C/A3C).
    Loss weights:
      entropy_cost: weight of the entropy bonus (loss/entropy = -cost * H).
      value_cost: weight of the value loss 0.5 * mean (V(x_t) - R_t)^2.
    Optimizer:
      learning_rate: step size at the start.
      lr_schedule: 'constant', or 'linear' to decay it to 0 at
        total_learner_steps.
      total_learner_steps: the horizon of the 'linear' schedule in learner
        steps (needed by it, else unused).
      optimizer_epsilon: the optimizer's denominator epsilon (RMSProp here
        adds it inside the square root, as TF1 / IMPALA; PyTorch's outside).
      max_grad_norm: global-norm gradient clip; None or 0 disables it.
      optimizer: 'rmsprop' (A3C, Baselines, SB3) or 'adam'.
      rmsprop_decay: RMSProp's moving-average decay (alpha in PyTorch).
    Network (agents/actor_critic.py's FeedForwardActorCritic, shared with PPO):
      torso: factory returning a Keras layer [B, *obs] -> [B, F] (e.g.
        @mlp_torso, @atari_torso); None picks atari_torso for uint8 images
        and mlp_torso otherwise.
      shared_torso: one torso for policy and value (A3C's Atari network);
        False gives each its own.
      log_std: 'state_independent' (a learned vector) or 'state_dependent'
        (a head output) for Gaussian policies.
      init_log_std: initial log standard deviation of Gaussian policies.
      bound_handling: 'tanh' (squash into the Box) or 'clip' (the env gets
        the clipped sample; densities are of the unclipped one).
    Misc:
      seed: seeds action sampling.
      queue_capacity: unrolls buffered before add_unrolls blocks the actors;
        None means batch_size (at most one update's data waits, which bounds
        the policy lag of this on-policy algorithm).
  """

  # Data.
  unroll_length: int = 5
  batch_size: int = 16
  # Returns and targets.
  discount: float = 0.99
  gae_lambda: float = 1.0
  reward_clipping: str = "none"
  normalize_advantages: bool = False
  # Loss weights.
  entropy_cost: float = 0.01
  value_cost: float = 0.5
  # Optimizer.
  learning_rate: float = 7e-4
  lr_schedule: str = "constant"
  total_learner_steps: Optional[int] = None
  optimizer_epsilon: float = 1e-5
  max_grad_norm: Optional[float] = 0.5
  optimizer: str = "rmsprop"
  rmsprop_decay: float = 0.99
  # Network.
  torso: Optional[Callable[[], keras.layers.Layer]] = None
  shared_torso: bool = False
  log_std: str = "state_independent"
  init_log_std: float = 0.0
  bound_handling: str = "clip"
  # Misc.
  seed: int = 0
  queue_capacity: Optional[int] = None

  def __post_init__(self):
    checks.positive_ints(self, "unroll_length", "batch_size")
    checks.discount(self)
    checks.in_unit_interval(self, "gae_lambda")
    checks.choice(self, "reward_clipping", checks.REWARD_CLIPPING)
    checks.non_negative(
      self,
      "entropy_cost",
      "value_cost",
      why="a negative weight flips the objective",
    )
    checks.scheduled_optimizer(self, _OPTIMIZERS)
    checks.torso_factory(self, allow_none=True)
    checks.choice(self, "log_std", _LOG_STD_MODES)
    checks.choice(self, "bound_handling", _BOUND_HANDLING)
    if not -20 < self.init_log_std < 2:
      checks.fail(
        self,
        f"init_log_std must be in (-20, 2), the clamp of the Gaussian's "
        f"log std; got {self.init_log_std}",
      )
    checks.queue_capacity(self)
