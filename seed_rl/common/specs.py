"""Array specs and the per-step message body shared by actors and the learner.

NumPy only: actors import this module and must not pull in TensorFlow.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np


@dataclasses.dataclass(frozen=True)
class ArraySpec:
  """Shape and dtype of one environment's array (no batch dimension).

  Attributes:
    shape: per-environment shape, e.g. `(4,)` for CartPole, `(84, 84)` for an
      Atari frame, `()` for a discrete action.
    dtype: NumPy dtype name, e.g. 'float32', 'uint8', 'int32'.
    name: what the array is, used in error messages.
    minimum, maximum: bounds of a continuous (Box) space, broadcastable to
      `shape`; None when unbounded or discrete.
    num_values: number of discrete actions (values in [0, num_values)); None for
      continuous specs.
    frame_stack: k > 1 when the learner stacks the last k frames on the last
      axis (LearnerConfig.frame_stack): an agent with `trains_on_frames` then
      gets unrolls of frames (agent_api.Unroll.frame_stack); 1 otherwise.
  """

  shape: tuple
  dtype: str
  name: str = ""
  minimum: Optional[np.ndarray] = None
  maximum: Optional[np.ndarray] = None
  num_values: Optional[int] = None
  frame_stack: int = 1

  def __post_init__(self):
    object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
    object.__setattr__(self, "dtype", np.dtype(self.dtype).name)
    for field in ("minimum", "maximum"):
      value = getattr(self, field)
      if value is not None:
        object.__setattr__(
          self,
          field,
          np.broadcast_to(np.asarray(value, self.dtype), self.shape).copy(),
        )
    if self.num_values is not None and self.num_values < 1:
      raise ValueError(
        f"{self.name or 'spec'}: num_values must be >= 1, got {self.num_values}"
      )

  @property
  def is_discrete(self) -> bool:
    return self.num_values is not None

  def zeros(self, batch_size: int) -> np.ndarray:
    """Returns a zero array of shape `[batch_size, *shape]`."""
    return np.zeros((batch_size,) + self.shape, self.dtype)

  def check_batch(self, array: np.ndarray, batch_size: int, what: str) -> None:
    """Raises ValueError naming `what` unless `array` is `[batch_size, *shape]`.

    Checks dtype and shape only; value checks (finite, in bounds) belong to the
    caller, which knows which ones matter.
    """
    if array.dtype != np.dtype(self.dtype):
      raise ValueError(
        f"{what}: dtype {array.dtype.name}, expected {self.dtype}"
      )
    expected = (batch_size,) + self.shape
    if array.shape != expected:
      raise ValueError(
        f"{what}: shape {list(array.shape)}, expected {list(expected)}"
      )

  def replace(self, **kwargs) -> "ArraySpec":
    return dataclasses.replace(self, **kwargs)


@dataclasses.dataclass
class StepBatch:
  """One actor's batch of K environment steps, as sent to the learner.

  SEED semantics: `reward[i]`, `terminated[i]` and `truncated[i]` describe the
  transition caused by the previous action of env i; when either flag is set,
  `observation[i]` is already the FIRST observation of the next episode. For
  truncated envs the last observation of the ended episode travels in
  `final_observation`, in increasing env order, so the learner can bootstrap
  from its value.

  Attributes (K = envs in this actor, E = episodes finished this step):
    env_ids: int32 [K] global environment ids.
    run_ids: int64 [K] random per env per actor process; a change tells the
      learner the env restarted and its state must be reset.
    reward: float32 [K] raw (unclipped) rewards.
    terminated: bool [K].
    truncated: bool [K].
    observation: [K, *obs_shape].
    final_observation: [sum(truncated), *obs_shape].
    episode_return: float32 [E] undiscounted raw returns of finished episodes.
    episode_length: int32 [E] their lengths in agent steps.
    life_lost: bool [K] or None: the env lost a life in this transition and
      its game goes on (Atari; never set where an episode ended). None when
      no env did, or the env has no lives. A fact, not a decision: the
      learner's `LearnerConfig.terminal_on_life_loss` decides whether the
      agent's targets treat it as a terminal; episodes always count whole
      games.

  The learner does not believe `episode_return` / `episode_length`: it
  counts every episode itself from `reward` and the end flags of the steps
  it received (common/episode_stats.py) and only cross-checks the actor's
  report against that (a disagreement is counted and logged). They stay in
  the protocol for that check and for the actor's own logs.
  """

  env_ids: np.ndarray
  run_ids: np.ndarray
  reward: np.ndarray
  terminated: np.ndarray
  truncated: np.ndarray
  observation: np.ndarray
  final_observation: np.ndarray
  episode_return: np.ndarray
  episode_length: np.ndarray
  life_lost: Optional[np.ndarray] = None

  @property
  def num_envs(self) -> int:
    return int(self.env_ids.shape[0])
