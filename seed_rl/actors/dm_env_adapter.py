"""Runs a `dm_env.Environment` behind the gymnasium.Env interface.

dm_env marks every episode end with StepType.LAST; the discount tells why:
discount 0 is a true termination, discount > 0 a cut (time limit), which is
gymnasium's truncation.
"""

from __future__ import annotations

from typing import Any, Optional

import dm_env
from dm_env import specs
import gymnasium as gym
import numpy as np


def space_from_dm_spec(spec: Any, name: str) -> gym.Space:
  """Converts one (non-nested) dm_env spec to a gymnasium space.

  DiscreteArray and scalar integer BoundedArrays -> Discrete (with `start` =
  minimum); other BoundedArrays -> Box with their bounds; unbounded float
  Arrays -> Box(-inf, inf); unbounded integer Arrays -> Box over the dtype's
  range.

  Raises:
    ValueError: for nested specs (dict, list, tuple) and StringArray.
  """
  if isinstance(spec, specs.StringArray) or not isinstance(spec, specs.Array):
    raise ValueError(
      f"{name}: unsupported dm_env spec {spec!r}; supported are a single "
      "Array, BoundedArray or DiscreteArray (not nested, not strings)"
    )
  dtype = np.dtype(spec.dtype)
  if isinstance(spec, specs.DiscreteArray):
    return gym.spaces.Discrete(int(spec.num_values))
  if isinstance(spec, specs.BoundedArray):
    if np.issubdtype(dtype, np.integer) and spec.shape == ():
      low, high = int(spec.minimum), int(spec.maximum)
      return gym.spaces.Discrete(high - low + 1, start=low)
    return gym.spaces.Box(
      np.broadcast_to(spec.minimum, spec.shape).astype(dtype),
      np.broadcast_to(spec.maximum, spec.shape).astype(dtype),
      shape=spec.shape,
      dtype=dtype,
    )
  if np.issubdtype(dtype, np.floating):
    return gym.spaces.Box(-np.inf, np.inf, shape=spec.shape, dtype=dtype)
  if np.issubdtype(dtype, np.integer):
    info = np.iinfo(dtype)
    return gym.spaces.Box(info.min, info.max, shape=spec.shape, dtype=dtype)
  raise ValueError(f"{name}: unsupported dm_env spec dtype {dtype} in {spec!r}")


class DmEnvAdapter(gym.Env):
  """gymnasium view of a dm_env.Environment.

  dm_env has no seeding API: `reset(seed=...)` seeds only this adapter's
  `np_random`; a dm_env factory that wants reproducible runs seeds itself.
  The dm_env's reward of None (FIRST steps) reads as 0.
  """

  metadata = {"render_modes": []}

  def __init__(self, env: dm_env.Environment):
    if not isinstance(env, dm_env.Environment):
      raise TypeError(
        f"DmEnvAdapter wraps a dm_env.Environment, got {type(env).__name__}"
      )
    self._env = env
    self._observation_spec = env.observation_spec()
    self._action_spec = env.action_spec()
    self.observation_space = space_from_dm_spec(
      self._observation_spec, "observation"
    )
    self.action_space = space_from_dm_spec(self._action_spec, "action")
    self._needs_reset = True

  def _observation(self, observation) -> np.ndarray:
    return np.asarray(observation, self.observation_space.dtype).reshape(
      self.observation_space.shape
    )

  def reset(
    self, *, seed: Optional[int] = None, options: Optional[dict] = None
  ):
    super().reset(seed=seed)
    del options
    timestep = self._env.reset()
    self._needs_reset = False
    return self._observation(timestep.observation), {}

  def step(self, action):
    if self._needs_reset:
      raise RuntimeError(
        "DmEnvAdapter.step called before reset() or after "
        "the episode ended; call reset() first"
      )
    action = np.asarray(action, self._action_spec.dtype).reshape(
      self._action_spec.shape
    )
    timestep = self._env.step(action)
    reward = 0.0 if timestep.reward is None else float(timestep.reward)
    terminated = truncated = False
    if timestep.last():
      self._needs_reset = True
      discount = 0.0 if timestep.discount is None else float(timestep.discount)
      terminated = discount == 0.0
      truncated = not terminated
    info = {"discount": timestep.discount}
    return (
      self._observation(timestep.observation),
      reward,
      terminated,
      truncated,
      info,
    )

  def close(self) -> None:
    self._env.close()
