"""MovingDot: a tiny Atari-shaped task that checks the image pipeline.

Each step the agent sees one 84x84 uint8 frame (like Atari after
preprocessing) holding a bright square; the learner stacks the last 4 frames.
Every step the square jumps `step_px` pixels left or right at random, and the
agent must name the direction of the move that led to the current frame:
action 0 = left, 1 = right. The reward of action a_t (delivered with the next
observation, as every env does) is +1 if it names that move, else -1; the
first step of an episode has no visible move and pays 0 whatever the action.

What makes it a pipeline check:
  - the answer is in the two newest frames only (the move before the newest
    one is independent), so a stack that drops or delays the newest frame,
    or mixes frames of different steps, cannot beat chance;
  - each step is a separate question (the move is random), so with discount
    0 a reward credited to the wrong action (off by one step) carries no
    signal at all;
  - chance is 0 per step, a perfect agent gets `episode_length - 1`.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

SIZE = 84


class MovingDot(gym.Env):
  """See the module docstring."""

  metadata = {"render_modes": []}

  def __init__(
    self, episode_length: int = 20, step_px: int = 6, dot_px: int = 6
  ):
    if episode_length < 2:
      raise ValueError(f"episode_length must be >= 2, got {episode_length}")
    if dot_px < 1 or step_px < 1:
      raise ValueError("dot_px and step_px must be positive")
    self.episode_length = episode_length
    self.step_px, self.dot_px = int(step_px), int(dot_px)
    self.observation_space = gym.spaces.Box(0, 255, (SIZE, SIZE), np.uint8)
    self.action_space = gym.spaces.Discrete(2)
    self._row = self._col = self._t = 0
    self._move = -1  # direction of the move into the current frame; -1: none

  def _frame(self) -> np.ndarray:
    frame = np.zeros((SIZE, SIZE), np.uint8)
    frame[
      self._row : self._row + self.dot_px, self._col : self._col + self.dot_px
    ] = 255
    return frame

  def _jump(self) -> None:
    right = bool(self.np_random.integers(2))
    low, high = 0, SIZE - self.dot_px
    # At a wall the square must move away from it.
    if self._col - self.step_px < low:
      right = True
    elif self._col + self.step_px > high:
      right = False
    self._col += self.step_px if right else -self.step_px
    self._move = int(right)

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self._t = 0
    self._row = int(self.np_random.integers(0, SIZE - self.dot_px + 1))
    self._col = int(self.np_random.integers(0, SIZE - self.dot_px + 1))
    self._move = -1
    return self._frame(), {}

  def step(self, action):
    action = int(action)
    if action not in (0, 1):
      raise ValueError(f"MovingDot: action must be 0 or 1, got {action}")
    reward = 0.0 if self._move < 0 else (1.0 if action == self._move else -1.0)
    self._t += 1
    self._jump()
    truncated = self._t >= self.episode_length
    return self._frame(), reward, False, truncated, {}
