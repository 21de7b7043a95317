"""A CartPole that raises once, mid-episode, in whichever actor gets there
first (a marker file makes it crash only once per test run). Used through the
`module:callable` env factory by test_end_to_end.py."""

import os
import time

import gymnasium as gym


class CrashOnce(gym.Wrapper):
  def __init__(self, env, crash_after: int):
    super().__init__(env)
    self._steps = 0
    self._crash_after = crash_after

  def step(self, action):
    self._steps += 1
    marker = os.environ.get("SEED_RL_TEST_CRASH_MARKER")
    if marker and self._steps >= self._crash_after:
      try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL)
      except FileExistsError:
        pass  # crashed once already
      else:
        os.close(fd)
        raise RuntimeError("simulated environment crash")
    return self.env.step(action)


def make():
  return CrashOnce(gym.make("CartPole-v1"), crash_after=200)


class HangOnce(gym.Wrapper):
  """Hangs forever in step() the first time any actor gets there (marker
  file): a deadlocked simulator, for the env-step watchdog test."""

  def __init__(self, env, hang_after: int):
    super().__init__(env)
    self._steps = 0
    self._hang_after = hang_after

  def step(self, action):
    self._steps += 1
    marker = os.environ.get("SEED_RL_TEST_HANG_MARKER")
    if marker and self._steps >= self._hang_after:
      try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL)
      except FileExistsError:
        pass
      else:
        os.close(fd)
        while True:
          time.sleep(3600)
    return self.env.step(action)


def make_hanging():
  return HangOnce(gym.make("CartPole-v1"), hang_after=50)
