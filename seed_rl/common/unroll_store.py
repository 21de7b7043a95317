"""Per-environment unroll assembly.

Each env appends one step per inference call; once it holds `length` steps
(T+1) the unroll is emitted and its last `overlap` steps stay as the first
steps of the env's next unroll (overlap=1 is SEED RL's layout; R2D2 overlaps
by its burn-in). Everything is vectorised over the envs of a batch because it
runs on the inference thread for every step of every env.
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np


class UnrollStore:
  """Buffers `[num_envs, length, ...]` per field, filled step by step.

  Args:
    num_envs: global env ids served.
    length: steps per unroll (T+1).
    overlap: steps shared by consecutive unrolls of one env, in [1, length).
  """

  def __init__(self, num_envs: int, length: int, overlap: int = 1):
    if length < 2:
      raise ValueError(f"an unroll needs >= 2 steps, got length={length}")
    if not 1 <= overlap < length:
      raise ValueError(
        f"overlap must be in [1, {length}), got {overlap}: "
        "consecutive unrolls must share at least the boundary "
        "step and must advance"
      )
    self.num_envs = num_envs
    self.length = length
    self.overlap = overlap
    self._pos = np.zeros(num_envs, np.int64)
    self._buffers: Optional[Dict[str, np.ndarray]] = None

  def _allocate(self, step: Dict[str, np.ndarray]) -> None:
    self._buffers = {
      name: np.zeros(
        (self.num_envs, self.length) + value.shape[1:], value.dtype
      )
      for name, value in step.items()
    }

  def reset(self, env_ids: np.ndarray) -> int:
    """Drops the partial unrolls of `env_ids` (e.g. after an actor restart).

    Returns:
      How many of these envs held steps (partial unrolls now discarded).
    """
    discarded = int(np.count_nonzero(self._pos[env_ids]))
    self._pos[env_ids] = 0
    return discarded

  def append(
    self, env_ids: np.ndarray, step: Dict[str, np.ndarray]
  ) -> Optional[Dict[str, np.ndarray]]:
    """Appends one step per env; returns completed unrolls or None.

    Args:
      env_ids: int [B] distinct env ids.
      step: field -> [B, ...]; the same fields and shapes at every call.

    Returns:
      None, or field -> [C, length, ...] plus 'env_ids' [C] for the C envs
      whose unroll completed with this step.
    """
    if self._buffers is None:
      self._allocate(step)
    assert self._buffers is not None  # set by _allocate
    pos = self._pos[env_ids]
    for name, buffer in self._buffers.items():
      buffer[env_ids, pos] = step[name]
    pos += 1
    self._pos[env_ids] = pos
    full = env_ids[pos == self.length]
    if full.size == 0:
      return None
    keep = self.overlap
    out = {"env_ids": full.astype(np.int32)}
    for name, buffer in self._buffers.items():
      rows = buffer[full]
      out[name] = rows
      buffer[full, :keep] = rows[:, self.length - keep :]
    self._pos[full] = keep
    return out
