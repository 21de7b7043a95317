"""A domain added from outside seed_rl, exactly as README's recipe says.

Corridor: positions 0..L-1, start at 0; action 1 moves right, 0 left; the
episode terminates with reward +1 at the right end, each step costs 0.01,
and it is truncated after `time_limit` steps (default 4L). Observations
are one-hot positions.
"""

from typing import Optional

import gin
import gymnasium as gym
import numpy as np

from seed_rl.classic.env import gym_batched_env


class Corridor(gym.Env):
  def __init__(self, length: int = 5, time_limit: Optional[int] = None):
    self.length = length
    self.time_limit = time_limit or 4 * length
    self.observation_space = gym.spaces.Box(0, 1, (length,), np.float32)
    self.action_space = gym.spaces.Discrete(2)
    self._pos = self._t = 0

  def _obs(self):
    obs = np.zeros(self.length, np.float32)
    obs[self._pos] = 1.0
    return obs

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self._pos = self._t = 0
    return self._obs(), {}

  def step(self, action):
    self._t += 1
    self._pos = max(0, self._pos + (1 if int(action) == 1 else -1))
    done = self._pos == self.length - 1
    reward = (1.0 if done else 0.0) - 0.01
    return self._obs(), reward, done, self._t >= self.time_limit, {}


@gin.configurable("toy_domain.create_environment")
def create_environment(
  num_envs: int, seed: int, length: int = 5, time_limit: Optional[int] = None
):
  return gym_batched_env(
    num_envs,
    seed,
    "tests.plugins.toy_domain.env:Corridor",
    env_kwargs={"length": length, "time_limit": time_limit},
  )
