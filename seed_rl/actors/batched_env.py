"""The batched-environment interface actors step, and space -> spec conversion.

SEED autoreset semantics: `step` returns, for an env whose episode just ended,
the FIRST observation of its next episode (the env was reset within the same
call), together with the reward and end flags of the transition that ended
the episode. The ended episode's last observation is kept only for truncated
episodes (the learner bootstraps from it), in `final_observation`.

NumPy and gymnasium only: actors must not import TensorFlow.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Optional, Tuple

import gymnasium as gym
import numpy as np

from seed_rl.common.specs import ArraySpec

SUPPORTED_SPACES = "Discrete and Box"


@dataclasses.dataclass
class StepResult:
  """Result of stepping K environments once (K = num_envs, E = truncated).

  Attributes:
    observation: [K, *obs_shape] observation after the step; for envs whose
      episode ended, the first observation of the next episode.
    reward: float32 [K] raw reward of the transition.
    terminated: bool [K] the episode ended in a terminal state.
    truncated: bool [K] the episode was cut (time limit) in a non-terminal
      state. Never set together with `terminated`: an episode that is both is
      reported as terminated, since no bootstrapping is needed.
    final_observation: [E, *obs_shape] last observation of each truncated
      episode, in increasing env order (E = sum(truncated)).
    life_lost: bool [K] the env lost a life and its game goes on (never set
      with an end flag); None for envs without lives.
  """

  observation: np.ndarray
  reward: np.ndarray
  terminated: np.ndarray
  truncated: np.ndarray
  final_observation: np.ndarray
  life_lost: Optional[np.ndarray] = None


class BatchedEnv(abc.ABC):
  """K environments stepped together with SEED autoreset semantics.

  Specs describe one env (no batch dimension). Usable as a context manager,
  which closes the envs (and any worker processes) on exit.
  """

  num_envs: int
  observation_spec: ArraySpec
  action_spec: ArraySpec

  @abc.abstractmethod
  def reset(self) -> np.ndarray:
    """Resets all envs; returns observations [K, *obs_shape].

    The first call seeds the envs; later calls continue their random streams.
    """

  @abc.abstractmethod
  def step(self, actions: np.ndarray) -> StepResult:
    """Steps all envs with `actions` [K, *action_shape] (action_spec dtype)."""

  @abc.abstractmethod
  def close(self) -> None:
    """Releases the envs. Idempotent."""

  def render(self) -> Optional[np.ndarray]:
    """An RGB frame [H, W, 3] uint8 of env 0, or None if it cannot render
    (see `seed_rl.actors.factory.rendering`)."""
    return None

  def __enter__(self) -> "BatchedEnv":
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()


def spec_from_space(space: gym.Space, name: str) -> ArraySpec:
  """Converts a gymnasium space of ONE env into an ArraySpec.

  Discrete(n) -> shape (), int32, num_values=n (values are shifted to start at
  0 when the space has a nonzero `start`, see `discrete_offset`). Box -> its
  shape in float32 with its bounds (per-element infinite bounds are kept as
  +-inf; a bound that is infinite everywhere becomes None), except uint8 Boxes
  (images), which stay uint8.

  Raises:
    ValueError: for any other space (Dict, Tuple, MultiDiscrete, ...).
  """
  if isinstance(space, gym.spaces.Discrete):
    return ArraySpec((), "int32", name, num_values=int(space.n))
  if isinstance(space, gym.spaces.Box):
    dtype = "uint8" if space.dtype == np.uint8 else "float32"
    return ArraySpec(
      space.shape,
      dtype,
      name,
      minimum=_bound_or_none(space.low, dtype),
      maximum=_bound_or_none(space.high, dtype),
    )
  raise ValueError(
    f"{name}: unsupported gymnasium space {space!r} "
    f"({type(space).__name__}); supported spaces are {SUPPORTED_SPACES} "
    "(flatten Dict/Tuple/MultiDiscrete spaces with a wrapper first)"
  )


def discrete_offset(space: gym.Space) -> int:
  """`start` of a Discrete space (0 for any other space)."""
  if isinstance(space, gym.spaces.Discrete):
    return int(space.start)
  return 0


def _bound_or_none(bound: np.ndarray, dtype: str):
  bound = np.asarray(bound)
  if np.issubdtype(bound.dtype, np.floating) and not np.isfinite(bound).any():
    return None
  return bound.astype(dtype)


class EpisodeTracker:
  """Running raw return and length (in agent steps) of each of K envs."""

  def __init__(self, num_envs: int):
    self._returns = np.zeros(num_envs, np.float64)
    self._lengths = np.zeros(num_envs, np.int64)

  def update(
    self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
  ) -> Tuple[np.ndarray, np.ndarray]:
    """Accounts one step of all envs (each [K]).

    Returns:
      (episode_return float32 [E], episode_length int32 [E]) for the episodes
      that ended in this step, in increasing env order.
    """
    self._returns += reward
    self._lengths += 1
    ended = np.logical_or(terminated, truncated)
    returns = self._returns[ended].astype(np.float32)
    lengths = self._lengths[ended].astype(np.int32)
    self._returns[ended] = 0.0
    self._lengths[ended] = 0
    return returns, lengths
