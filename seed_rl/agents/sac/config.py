"""Hyperparameters of Soft Actor-Critic (automatic temperature)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Tuple

import gin
import keras

from seed_rl.agents.off_policy import check_off_policy
from seed_rl.networks import mlp_torso
from seed_rl.agents import config_checks as checks

__all__ = ["SACConfig"]


@gin.configurable
@dataclasses.dataclass
class SACConfig:
  """SAC agent settings; validated on construction.

  Defaults are CleanRL's sac_continuous_action.py (Haarnoja et al. 2018,
  arXiv 1812.05905, with learned temperature) except `policy_delay` (1, the
  paper's one actor step per critic step; CleanRL: 2); the gin files under
  seed_rl/<domain>/gin/sac.gin set per-domain values with their sources.

  Units: an "env step" is one action of one training env; a "learner step"
  is one `train_step` (one critic update). The rate limiter holds
  samples_per_insert sampled transitions per inserted one, so there are
  samples_per_insert / batch_size learner steps per env step (CleanRL: one
  update of 256 per env step, samples_per_insert = 256).

  Attributes:
    unroll_length: T; unrolls of T+1 steps overlap by n_step steps, so each
      adds T+1-n_step transitions per env to replay. Small T keeps the data
      reaching replay fresh; it does not change what is learned.
    batch_size: transitions per learner step.
    replay_capacity: stored transitions (FIFO beyond it).
    min_replay_size: transitions in replay before the first learner step.
    samples_per_insert: sampled transitions per inserted one (replay ratio);
      learner steps per env step = samples_per_insert / batch_size.
    rate_limiter_error_buffer: allowed drift from that ratio, in sampled
      transitions; None picks max(batch_size, samples_per_insert * one round
      of unrolls from every env).
    random_steps: env steps (counted as transitions inserted into replay,
      summed over envs, checkpointed) during which training envs act
      uniformly at random over the action Box (CleanRL learning_starts).
    discount: gamma per env step.
    n_step: rewards per transition (1 in the paper; n > 1 is uncorrected
      for the policy's change, like Rainbow's DQN).
    tau: target smoothing coefficient of the Polyak average
      target <- tau * online + (1 - tau) * target, every learner step.
    policy_delay: actor and temperature updates run on learner steps
      divisible by it, then `policy_delay` of them on the same batch
      (CleanRL's policy_frequency: as many actor updates in all, in bursts).
    target_entropy: the entropy the temperature steers the policy to, in
      nats of the squashed action in [-1, 1]^A; None means -|A| (the paper).
    initial_temperature: alpha at the start.
    learn_temperature: learn alpha against target_entropy; False keeps
      alpha at initial_temperature (the 2018 SAC v1).
    learning_rate: Adam step size of the critics and the temperature.
    actor_learning_rate: Adam step size of the policy; None means
      learning_rate.
    optimizer_epsilon: Adam's denominator epsilon.
    max_grad_norm: global-norm gradient clip per network; None or 0 is off.
    torso: factory of the MLP torso of each network (policy, both critics;
      critics see [observation, action] concatenated).
    head_hidden: hidden layer widths between torso and output layer.
    min_log_std, max_log_std: the policy's log std is squashed into this
      range with a tanh (CleanRL: -5, 2).
    seed: seeds action sampling, random actions and replay sampling.
  """

  # data / replay
  unroll_length: int = 8
  batch_size: int = 256
  replay_capacity: int = 1_000_000
  min_replay_size: int = 5_000
  samples_per_insert: float = 256.0
  rate_limiter_error_buffer: Optional[float] = None
  random_steps: int = 5_000
  # returns
  discount: float = 0.99
  n_step: int = 1
  # losses
  tau: float = 0.005
  policy_delay: int = 1
  target_entropy: Optional[float] = None
  initial_temperature: float = 1.0
  learn_temperature: bool = True
  # optimizer
  learning_rate: float = 1e-3
  actor_learning_rate: Optional[float] = 3e-4
  optimizer_epsilon: float = 1e-8
  max_grad_norm: Optional[float] = None
  # network
  torso: Callable[[], keras.layers.Layer] = mlp_torso
  head_hidden: Tuple[int, ...] = ()
  min_log_std: float = -5.0
  max_log_std: float = 2.0
  seed: Optional[int] = None

  @property
  def unroll_overlap(self) -> int:
    """Steps shared by consecutive unrolls of an env (see DQNConfig)."""
    return self.n_step

  @property
  def policy_learning_rate(self) -> float:
    if self.actor_learning_rate is None:
      return self.learning_rate
    return self.actor_learning_rate

  def __post_init__(self):
    self.head_hidden = checks.layer_widths(self)
    check_off_policy(self)
    checks.positive(
      self, "initial_temperature", why="alpha = exp(log alpha) is learned"
    )
    if not self.min_log_std < self.max_log_std:
      checks.fail(
        self,
        f"min_log_std ({self.min_log_std}) must be < max_log_std "
        f"({self.max_log_std})",
      )
