"""The slice of the legacy `gym` API that gfootball imports, on gymnasium.

gfootball 2.10 imports `gym` and uses its pre-0.26 API: `reset()` returns the
observation alone, `step()` returns (obs, reward, done, info), and its
wrappers subclass `gym.Wrapper`, `gym.ObservationWrapper` and
`gym.RewardWrapper` with those semantics. The `gym` package itself is a dead
end here (0.26 breaks on NumPy 2, and its API differs from the one gfootball
was written for), so `install()` registers this module as `gym` in the
process that builds Football envs: spaces are gymnasium's, the classes keep
the old signatures, and gym's env registry is a no-op (seed_rl builds the
envs itself). `seed_rl.football.env` adapts the result to gymnasium.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import gymnasium
from gymnasium import spaces

__all__ = ["Env", "ObservationWrapper", "RewardWrapper", "Wrapper", "install"]


class Env:
  """gym.Env before 0.26: reset() -> obs; step() -> (obs, r, done, info)."""

  metadata: dict = {}
  reward_range = (-float("inf"), float("inf"))
  spec = None
  action_space: Any = None
  observation_space: Any = None

  @property
  def unwrapped(self) -> "Env":
    return self

  def close(self) -> None:
    pass

  def seed(self, seed=None):
    del seed
    return []


class Wrapper(Env):
  """Forwards to `env`; subclasses override what they change."""

  def __init__(self, env: Env):
    self.env = env
    self.action_space = env.action_space
    self.observation_space = env.observation_space
    self.reward_range = getattr(env, "reward_range", Env.reward_range)
    self.metadata = getattr(env, "metadata", {})

  def __getattr__(self, name: str) -> Any:
    # Only reached for attributes this wrapper lacks (as gym's Wrapper).
    if name.startswith("__") or name == "env":
      raise AttributeError(name)
    return getattr(self.env, name)

  @property
  def unwrapped(self) -> Env:
    return self.env.unwrapped

  def step(self, action):
    return self.env.step(action)

  def reset(self, **kwargs):
    return self.env.reset(**kwargs)

  def render(self, *args, **kwargs):
    return self.env.render(*args, **kwargs)

  def close(self) -> None:
    self.env.close()


class ObservationWrapper(Wrapper):
  def reset(self, **kwargs):
    return self.observation(self.env.reset(**kwargs))

  def step(self, action):
    observation, reward, done, info = self.env.step(action)
    return self.observation(observation), reward, done, info

  def observation(self, observation):
    raise NotImplementedError(
      f"{type(self).__name__}: define observation(observation)"
    )


class RewardWrapper(Wrapper):
  def step(self, action):
    observation, reward, done, info = self.env.step(action)
    return observation, self.reward(reward), done, info

  def reward(self, reward):
    raise NotImplementedError(f"{type(self).__name__}: define reward(reward)")


def _register(*args, **kwargs) -> None:
  """gym.envs.registration.register: gfootball registers its ids with gym
  at import; seed_rl builds Football envs directly, so nothing is kept."""
  del args, kwargs


def _make(*args, **kwargs):
  raise RuntimeError(
    "gym.make is not available in seed_rl's gym compatibility layer; build "
    "Football envs with seed_rl.football.env.create_environment"
  )


def install() -> None:
  """Makes `import gym` (and `gym.spaces`, `gym.envs.registration`) give
  this layer in this process, unless it already does."""
  existing = sys.modules.get("gym")
  if existing is not None and getattr(existing, "_seed_rl_compat", False):
    return
  gym = types.ModuleType("gym", __doc__)
  registration = types.ModuleType("gym.envs.registration")
  registration.register = _register  # type: ignore[attr-defined]
  envs = types.ModuleType("gym.envs")
  envs.registration = registration  # type: ignore[attr-defined]
  for name, value in {
    "Env": Env,
    "Wrapper": Wrapper,
    "ObservationWrapper": ObservationWrapper,
    "RewardWrapper": RewardWrapper,
    "spaces": spaces,
    "envs": envs,
    "make": _make,
    "__version__": f"seed_rl-compat (gymnasium {gymnasium.__version__})",
    "_seed_rl_compat": True,
  }.items():
    setattr(gym, name, value)
  sys.modules.update(
    {
      "gym": gym,
      "gym.spaces": spaces,
      "gym.envs": envs,
      "gym.envs.registration": registration,
    }
  )
