"""Hyperparameters of ACER (actor-critic with experience replay)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Tuple

import gin
import keras

from seed_rl.networks import mlp_torso
from seed_rl.agents import config_checks as checks

_OPTIMIZERS = ("rmsprop", "adam")
REPLAY_DRAWS = ("poisson", "fixed")


@gin.configurable
@dataclasses.dataclass
class ACERConfig:
  """ACER agent settings (discrete actions); validated on construction.

  Defaults follow Wang et al. 2017 (arXiv 1611.01224, Atari: c_bar 10,
  lambda 1 in the traces, replay ratio 4 drawn from a Poisson distribution,
  trust region with alpha 0.99 and delta 1, entropy 0.01) and OpenAI
  Baselines' ACER where the paper gives no number (RMSProp lr 7e-4, decay
  0.99, epsilon 1e-5, value weight q_coef 0.5, max_grad_norm 10). The gin
  files under seed_rl/<domain>/gin/acer.gin set per-domain values.

  One learner step is one gradient update on batch_size unrolls: either the
  next unrolls from the actors (on-policy), which then go into replay, or
  unrolls sampled uniformly from replay. Each on-policy update is followed
  by n replay updates, n ~ Poisson(replay_ratio) ('poisson', the paper's
  Algorithm 1) or the running floor of replay_ratio ('fixed': ratio 0.5
  alternates 0 and 1), once replay holds min_replay_size unrolls.

  Attributes, grouped in the same order in every agent's config:
    Data:
      unroll_length: T, transitions per unroll (unrolls hold T+1 steps).
      batch_size: unrolls per gradient update (on-policy or replayed).
      replay_capacity: unrolls kept in replay (FIFO beyond it); the paper
        keeps 50,000 frames per actor-learner thread.
      min_replay_size: unrolls in replay before replay updates start.
      replay_ratio: replay updates per on-policy update (mean); 0 gives
        on-policy ACER (Retrace and truncation still correct the lag).
      replay_draw: 'poisson' or 'fixed' (see above).
    Returns and targets:
      discount: gamma per agent step.
      retrace_lambda: lambda of the Retrace traces c = lambda min(1, rho).
      reward_clipping: 'none', or 'abs_one' to clip raw rewards to [-1, 1]
        before the targets (Atari; Mnih et al. 2015).
    Loss weights and truncation:
      entropy_cost: weight of the entropy bonus.
      value_cost: weight of the Q loss 0.5 * mean (Q_ret - Q(x, a))^2.
      truncation_threshold: c_bar, the importance-weight truncation of the
        policy gradient (the bias correction covers the rest).
      trust_region: ACER's efficient trust-region update against an
        average policy network.
      trust_region_delta: delta, the bound on the linearised KL step.
      average_policy_decay: alpha of the average network's Polyak update
        theta_avg <- alpha theta_avg + (1 - alpha) theta after each update.
    Optimizer:
      learning_rate: step size at the start.
      lr_schedule: 'constant', or 'linear' to decay it to 0 at
        total_learner_steps.
      total_learner_steps: the horizon of the 'linear' schedule in learner
        steps (gradient updates, on-policy and replayed).
      optimizer_epsilon: the optimizer's denominator epsilon (RMSProp here
        adds it inside the square root, as TF1).
      max_grad_norm: global-norm gradient clip; None or 0 disables it.
      optimizer: 'rmsprop' (paper, Baselines) or 'adam'.
      rmsprop_decay: RMSProp's moving-average decay.
    Network:
      torso: factory returning a Keras layer [B, *obs] -> [B, F] (e.g.
        @mlp_torso, @atari_torso).
      head_hidden: hidden ReLU layer widths between a torso and each head.
      shared_torso: one torso for the policy and Q heads (the paper's Atari
        network); False gives each its own.
    Misc:
      seed: seeds action sampling and replay sampling.
      queue_capacity: unrolls buffered before add_unrolls blocks the actors;
        None means batch_size.
  """

  # Data.
  unroll_length: int = 20
  batch_size: int = 16
  replay_capacity: int = 2500
  min_replay_size: int = 64
  replay_ratio: float = 4.0
  replay_draw: str = "poisson"
  # Returns and targets.
  discount: float = 0.99
  retrace_lambda: float = 1.0
  reward_clipping: str = "none"
  # Loss weights and truncation.
  entropy_cost: float = 0.01
  value_cost: float = 0.5
  truncation_threshold: float = 10.0
  trust_region: bool = True
  trust_region_delta: float = 1.0
  average_policy_decay: float = 0.99
  # Optimizer.
  learning_rate: float = 7e-4
  lr_schedule: str = "constant"
  total_learner_steps: Optional[int] = None
  optimizer_epsilon: float = 1e-5
  max_grad_norm: Optional[float] = 10.0
  optimizer: str = "rmsprop"
  rmsprop_decay: float = 0.99
  # Network.
  torso: Callable[[], keras.layers.Layer] = mlp_torso
  head_hidden: Tuple[int, ...] = ()
  shared_torso: bool = False
  # Misc.
  seed: int = 0
  queue_capacity: Optional[int] = None

  def __post_init__(self):
    checks.positive_ints(
      self, "unroll_length", "batch_size", "replay_capacity", "min_replay_size"
    )
    checks.min_replay_size(self)
    if self.min_replay_size < self.batch_size:
      checks.fail(
        self,
        f"min_replay_size ({self.min_replay_size}) must be >= batch_size "
        f"({self.batch_size}) so a replay batch is not mostly duplicates",
      )
    checks.non_negative(
      self, "replay_ratio", why="replay updates per on-policy update"
    )
    checks.choice(self, "replay_draw", REPLAY_DRAWS)
    checks.discount(self)
    checks.in_unit_interval(self, "retrace_lambda")
    checks.choice(self, "reward_clipping", checks.REWARD_CLIPPING)
    checks.non_negative(
      self,
      "entropy_cost",
      "value_cost",
      why="a negative weight flips the objective",
    )
    checks.positive(
      self,
      "truncation_threshold",
      why="a non-positive c_bar zeroes the truncated policy gradient",
    )
    checks.positive(
      self, "trust_region_delta", why="the trust region would forbid any step"
    )
    if not 0 <= self.average_policy_decay < 1:
      checks.fail(
        self,
        f"average_policy_decay must be in [0, 1) (1 would freeze the "
        f"average policy at its initial weights), got "
        f"{self.average_policy_decay}",
      )
    checks.scheduled_optimizer(self, _OPTIMIZERS)
    checks.torso_factory(self)
    self.head_hidden = checks.layer_widths(self)
    checks.queue_capacity(self)
