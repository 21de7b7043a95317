"""Storing stacked frames once per sequence instead of once per stack slot.

The runtime stacks Atari frames on the learner: the observation of step t is
[H, W, k] with channel k-1 the newest frame, channel k-1-a the frame of step
t-a, and zeros for slots older than the episode's first step. Consecutive
steps of a sequence therefore repeat k-1 of their k frames. A sequence of
T+1 steps is stored as its T+1 newest frames plus the k-1 older frames of
step 0, and the stacks are rebuilt from those and the episode starts (steps
with terminated or truncated set), a k-fold saving of replay memory.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np


def compress(observation: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """[B, T+1, H, W, k] -> newest frames [B, T+1, H, W], first stack
  [B, H, W, k-1] (the k-1 older frames of step 0)."""
  return observation[..., -1], observation[:, 0, ..., :-1]


def decompress(
  frames: np.ndarray, first_stack: np.ndarray, done: np.ndarray
) -> np.ndarray:
  """Rebuilds the stacked observations [B, T+1, H, W, k].

  Args:
    frames: [B, T+1, H, W] newest frame of each step.
    first_stack: [B, H, W, k-1] older frames of step 0 (oldest first).
    done: bool [B, T+1] step t starts a new episode (its older slots are 0).
  """
  batch, steps = frames.shape[:2]
  depth = first_stack.shape[-1] + 1
  # extended[:, j] is the frame of step j - (k - 1), for j in [0, T + k - 1).
  extended = np.concatenate([np.moveaxis(first_stack, -1, 1), frames], axis=1)
  t = np.arange(steps)
  # Latest episode start at or before t; -depth (never binding) if none.
  last_start = np.maximum.accumulate(np.where(done, t, -depth), axis=1)
  out = np.empty((batch, steps) + frames.shape[2:] + (depth,), frames.dtype)
  for c in range(depth):
    age = depth - 1 - c
    valid = (t - age)[None, :] >= last_start  # [B, T+1]
    out[..., c] = np.where(
      valid[:, :, None, None], extended[:, c : c + steps], 0
    )
  return out


def roundtrip_ok(observation: np.ndarray, done: np.ndarray) -> np.ndarray:
  """bool [B]: whether each sequence survives compress/decompress exactly."""
  frames, first_stack = compress(observation)
  rebuilt = decompress(frames, first_stack, done)
  return np.all(
    (rebuilt == observation).reshape(observation.shape[0], -1), axis=1
  )
