"""Hyperparameters of TD3, and of DDPG as TD3 with its three tricks off."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Tuple

import gin
import keras

from seed_rl.agents.off_policy import check_off_policy
from seed_rl.networks import mlp_torso
from seed_rl.agents import config_checks as checks


@gin.configurable
@dataclasses.dataclass
class TD3Config:
  """TD3 agent settings; validated on construction.

  Defaults are CleanRL's td3_continuous_action.py (Fujimoto et al. 2018,
  arXiv 1802.09477); the gin files under seed_rl/<domain>/gin/{td3,ddpg}.gin
  set per-domain values with their sources. DDPG (Lillicrap et al. 2016,
  as for-ai/rl's DDPG with a Gaussian instead of an Ornstein-Uhlenbeck
  exploration noise) is `twin_critics=False, policy_noise=0,
  policy_delay=1` (the ddpg.gin files).

  Noise scales are in units of half the action range: the networks work on
  actions normalised to [-1, 1] (the agent maps them to the Box), so 0.1 on
  a Box of [-2, 2] is a std of 0.2 in the env's units (CleanRL multiplies by
  action_scale the same way).

  Attributes:
    unroll_length, batch_size, replay_capacity, min_replay_size,
    samples_per_insert, rate_limiter_error_buffer, random_steps: as in
      SACConfig (learner steps per env step = samples_per_insert /
      batch_size; random_steps is CleanRL's learning_starts).
    discount: gamma per env step.
    n_step: rewards per transition (1 in the paper).
    tau: target smoothing coefficient of the Polyak average, applied to the
      target actor and target critics on every actor update.
    policy_noise: std of the target policy smoothing noise added to the
      target actor's action; 0 turns smoothing off (DDPG).
    noise_clip: that noise is clipped to [-noise_clip, noise_clip].
    policy_delay: the actor and the targets are updated on learner steps
      divisible by it (critics on every step); 1 for DDPG.
    twin_critics: clipped double Q, y = r + gamma min(Q'_1, Q'_2); False
      trains one critic (DDPG).
    learning_rate: Adam step size of the critics.
    actor_learning_rate: Adam step size of the actor; None means
      learning_rate.
    optimizer_epsilon: Adam's denominator epsilon.
    max_grad_norm: global-norm gradient clip per network; None or 0 is off.
    torso: factory of the MLP torso of each network (actor, critics; critics
      see [observation, action] concatenated).
    head_hidden: hidden layer widths between torso and output layer.
    exploration_noise: std of the Gaussian noise the learner adds to the
      actor's action for training envs at inference (evaluation envs act
      with the noise-free action).
    seed: seeds exploration noise, random actions, smoothing noise and
      replay sampling.
  """

  # data / replay
  unroll_length: int = 8
  batch_size: int = 256
  replay_capacity: int = 1_000_000
  min_replay_size: int = 25_000
  samples_per_insert: float = 256.0
  rate_limiter_error_buffer: Optional[float] = None
  random_steps: int = 25_000
  # returns
  discount: float = 0.99
  n_step: int = 1
  # losses
  tau: float = 0.005
  policy_noise: float = 0.2
  noise_clip: float = 0.5
  policy_delay: int = 2
  twin_critics: bool = True
  # optimizer
  learning_rate: float = 3e-4
  actor_learning_rate: Optional[float] = None
  optimizer_epsilon: float = 1e-8
  max_grad_norm: Optional[float] = None
  # network
  torso: Callable[[], keras.layers.Layer] = mlp_torso
  head_hidden: Tuple[int, ...] = ()
  # exploration
  exploration_noise: float = 0.1
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

  @property
  def is_ddpg(self) -> bool:
    """True when all three TD3 changes are off."""
    return (
      not self.twin_critics
      and self.policy_noise == 0
      and self.policy_delay == 1
    )

  def __post_init__(self):
    self.head_hidden = checks.layer_widths(self)
    check_off_policy(self)
    checks.non_negative(
      self, "policy_noise", why="a std; 0 turns target smoothing off"
    )
    if self.policy_noise > 0:
      checks.positive(
        self,
        "noise_clip",
        why="the smoothing noise is clipped to [-noise_clip, noise_clip]",
      )
    checks.non_negative(
      self, "exploration_noise", why="a std, in half action ranges"
    )
