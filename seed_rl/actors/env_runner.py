"""One gymnasium env stepped with SEED autoreset and spec conversions.

Shared by the in-process batched env and the subprocess workers so that both
convert observations and actions identically.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple, Union

import gymnasium as gym
import numpy as np

from seed_rl.actors.batched_env import discrete_offset
from seed_rl.actors.batched_env import spec_from_space
from seed_rl.common.specs import ArraySpec

EnvFn = Callable[[], gym.Env]


class EnvRunner:
  """Wraps one gymnasium env.

  Observations are cast to the observation spec's dtype (float64 -> float32)
  and shifted so Discrete values start at 0. Actions arrive in the action
  spec's dtype; a continuous action is clipped to the Box bounds (agents
  sample from unbounded distributions, the env's bounds are the physical
  limits), then cast to the Box's dtype. Discrete actions are shifted back by
  the space's `start`.
  """

  def __init__(self, env: gym.Env):
    self.env = env
    self.observation_spec = spec_from_space(
      env.observation_space, "observation"
    )
    self.action_spec = spec_from_space(env.action_space, "action")
    self._obs_offset = discrete_offset(env.observation_space)
    self._action_offset = discrete_offset(env.action_space)
    self._action_dtype = env.action_space.dtype
    spec = self.action_spec
    self._clip = (
      not spec.is_discrete
      and spec.minimum is not None
      and spec.maximum is not None
    )

  def _observation(self, obs) -> np.ndarray:
    obs = np.asarray(obs)
    if self._obs_offset:
      obs = obs - self._obs_offset
    return obs.astype(self.observation_spec.dtype, copy=False)

  def reset(self, seed: Optional[int] = None) -> np.ndarray:
    obs, _ = self.env.reset(seed=seed)
    return self._observation(obs)

  def step(
    self, action: np.ndarray
  ) -> Tuple[np.ndarray, float, bool, bool, Optional[np.ndarray]]:
    """Steps with `action` (one env's action, action-spec dtype).

    Returns:
      (observation, reward, terminated, truncated, final_observation) where
      `observation` already starts the next episode if this one ended, and
      `final_observation` is the ended episode's last observation when
      truncated (None otherwise). Terminated wins over truncated.
    """
    env_action: Union[int, np.ndarray]
    if self.action_spec.is_discrete:
      env_action = int(action) + self._action_offset
    else:
      continuous = np.asarray(action)
      if self._clip:
        continuous = np.clip(
          continuous, self.action_spec.minimum, self.action_spec.maximum
        )
      env_action = continuous.astype(self._action_dtype, copy=False)
    obs, reward, terminated, truncated, _ = self.env.step(env_action)
    terminated = bool(terminated)
    truncated = bool(truncated) and not terminated
    final = None
    if terminated or truncated:
      if truncated:
        final = self._observation(obs)
      obs, _ = self.env.reset()
    return self._observation(obs), float(reward), terminated, truncated, final

  def close(self) -> None:
    self.env.close()


def check_same_specs(runners, what: str) -> Tuple[ArraySpec, ArraySpec]:
  """Returns the specs shared by `runners`; ValueError naming the odd one."""
  first = runners[0]
  for index, runner in enumerate(runners[1:], start=1):
    for field in ("observation_spec", "action_spec"):
      if not specs_equal(getattr(first, field), getattr(runner, field)):
        raise ValueError(
          f"{what}: env {index} has {field} {getattr(runner, field)}, env 0 "
          f"has {getattr(first, field)}; all envs of an actor must match"
        )
  return first.observation_spec, first.action_spec


def specs_equal(a: ArraySpec, b: ArraySpec) -> bool:
  """Field-wise ArraySpec equality (dataclass == fails on array bounds)."""
  if (a.shape, a.dtype, a.name, a.num_values) != (
    b.shape,
    b.dtype,
    b.name,
    b.num_values,
  ):
    return False
  for field in ("minimum", "maximum"):
    x, y = getattr(a, field), getattr(b, field)
    if (x is None) != (y is None):
      return False
    if x is not None and not np.array_equal(x, y):
      return False
  return True
