"""Bounded FIFO of unrolls that regroups pieces into fixed-size batches.

The runtime hands over unrolls in pieces of any batch size; training wants
exactly `batch_size` of them. A full queue blocks the producer (back-pressure
keeps the policy lag bounded, as SEED's learner queue does).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Any, Deque, Dict, List, Optional

import numpy as np

from seed_rl.common.agent_api import Unroll, unroll_rows


def slice_unroll(unroll: Unroll, start: int, stop: int) -> Unroll:
  """Unrolls [start, stop) along the batch axis (views, no copies)."""
  return unroll_rows(unroll, slice(start, stop))


def concat_unrolls(unrolls: List[Unroll]) -> Unroll:
  """Concatenates unrolls along the batch axis."""
  if len(unrolls) == 1:
    return unrolls[0]
  fields: Dict[str, Any] = {}
  for field in dataclasses.fields(Unroll):
    values = [getattr(unroll, field.name) for unroll in unrolls]
    if field.name == "extras":
      fields[field.name] = {
        name: np.concatenate([v[name] for v in values]) for name in values[0]
      }
    elif field.name == "core_state":
      fields[field.name] = tuple(
        np.concatenate(parts) for parts in zip(*values)
      )
    elif field.name == "frame_stack":
      if len(set(values)) > 1:
        raise ValueError(f"concat_unrolls: frame_stack differs: {values}")
      fields[field.name] = values[0]
    else:
      fields[field.name] = np.concatenate(values)
  return Unroll(**fields)


class UnrollQueue:
  """Thread-safe queue counted in unrolls (batch rows), not in pieces."""

  def __init__(self, capacity: int, batch_size: int):
    if batch_size < 1 or capacity < batch_size:
      raise ValueError(
        f"UnrollQueue needs 1 <= batch_size <= capacity, got "
        f"batch_size={batch_size}, capacity={capacity}"
      )
    self.capacity = capacity
    self.batch_size = batch_size
    self._pieces: Deque[Unroll] = collections.deque()
    self._size = 0
    self._stopped = False
    self._cond = threading.Condition()
    # For the learner's diagnostics: seconds get_batch has waited for data
    # (since the queue was made), and the fill when the last batch was taken.
    self.consumer_wait_s = 0.0
    self.fill_at_last_get = 0.0

  def __len__(self) -> int:
    with self._cond:
      return self._size

  def put(self, unroll: Unroll) -> bool:
    """Enqueues, blocking while full; returns False (dropped) once stopped.

    A piece is accepted whenever the queue is below capacity, so a piece
    larger than the capacity cannot deadlock the producer.
    """
    if unroll.batch_size == 0:
      return True
    with self._cond:
      while self._size >= self.capacity and not self._stopped:
        self._cond.wait()
      if self._stopped:
        return False
      self._pieces.append(unroll)
      self._size += unroll.batch_size
      self._cond.notify_all()
      return True

  def get_batch(self) -> Optional[Unroll]:
    """Dequeues exactly `batch_size` unrolls; None once stopped."""
    with self._cond:
      if self._size < self.batch_size and not self._stopped:
        start = time.perf_counter()
        while self._size < self.batch_size and not self._stopped:
          self._cond.wait()
        self.consumer_wait_s += time.perf_counter() - start
      if self._stopped:
        return None
      # Near 1 while the trainer is what binds (the actors wait on a full
      # queue and the policy lag grows with the capacity); near
      # batch_size / capacity while the actors are.
      self.fill_at_last_get = self._size / self.capacity
      parts, needed = [], self.batch_size
      while needed:
        piece = self._pieces.popleft()
        if piece.batch_size > needed:
          self._pieces.appendleft(slice_unroll(piece, needed, piece.batch_size))
          piece = slice_unroll(piece, 0, needed)
        parts.append(piece)
        needed -= piece.batch_size
      self._size -= self.batch_size
      self._cond.notify_all()
    return concat_unrolls(parts)

  def stop(self) -> None:
    with self._cond:
      self._stopped = True
      self._cond.notify_all()
