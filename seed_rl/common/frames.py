"""Storing stacked frames once instead of once per stack slot (TF-free).

The runtime stacks Atari frames on the learner: the observation of step t is
[H, W, k] with channel k-1 the newest frame, channel k-1-a the frame of step
t-a, and zeros for slots older than the episode's first step. Consecutive
steps of an unroll therefore repeat k-1 of their k frames. An unroll of T+1
steps is stored as its T+1 newest frames plus the k-1 older frames of step
0, and the stacks are rebuilt from those and the episode starts (steps with
terminated or truncated set): a k-fold saving for R2D2's sequences, and for
DQN's transitions (which hold two stacks each) about 2k-fold.

`compress` / `decompress` work on whole unrolls (R2D2 replays sequences);
`FrameBlockStore` keeps compressed unrolls in a ring and rebuilds single
stacks on demand (DQN replays transitions that point into it).

The learner's unrolls come in the same layout as one array
(`Unroll.frame_stack` > 1): [B, k-1 + T+1, H, W], the k-1 older frames of
step 0 first; `stack_frames` / `stacked_unroll` rebuild their stacks for
agents that train on stacks.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Dict, Mapping, Tuple

import numpy as np

from seed_rl.common.agent_api import Unroll


def compress(observation: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """[B, T+1, H, W, k] -> newest frames [B, T+1, H, W], first stack
  [B, H, W, k-1] (the k-1 older frames of step 0)."""
  return observation[..., -1], observation[:, 0, ..., :-1]


def _last_start(done: np.ndarray, depth: int) -> np.ndarray:
  """int [B, T+1]: latest episode start at or before each step; -depth
  (older than any stack slot reaches) where the unroll has none."""
  t = np.arange(done.shape[1])
  return np.maximum.accumulate(np.where(done, t, -depth), axis=1)


def decompress(
  frames: np.ndarray, first_stack: np.ndarray, done: np.ndarray
) -> np.ndarray:
  """Rebuilds the stacked observations [B, T+1, H, W, k].

  Args:
    frames: [B, T+1, H, W] newest frame of each step (any frame shape).
    first_stack: [B, H, W, k-1] older frames of step 0 (oldest first).
    done: bool [B, T+1] step t starts a new episode (its older slots are 0).
  """
  batch, steps = frames.shape[:2]
  depth = first_stack.shape[-1] + 1
  # extended[:, j] is the frame of step j - (k - 1), for j in [0, T + k - 1).
  extended = np.concatenate([np.moveaxis(first_stack, -1, 1), frames], axis=1)
  t = np.arange(steps)
  last_start = _last_start(done, depth)
  out = np.empty((batch, steps) + frames.shape[2:] + (depth,), frames.dtype)
  frame_axes = (1,) * (frames.ndim - 2)
  for c in range(depth):
    age = depth - 1 - c
    valid = (t - age)[None, :] >= last_start  # [B, T+1]
    out[..., c] = np.where(
      valid.reshape(valid.shape + frame_axes), extended[:, c : c + steps], 0
    )
  return out


def stack_frames(
  frames: np.ndarray, done: np.ndarray, depth: int
) -> np.ndarray:
  """[B, k-1 + T+1, H, W] frames in Unroll.frame_stack's layout and done
  bool [B, T+1] (step t starts an episode) -> stacks [B, T+1, H, W, k]."""
  history = depth - 1
  return decompress(
    frames[:, history:], np.moveaxis(frames[:, :history], 1, -1), done
  )


def stacked_unroll(unroll: Unroll) -> Unroll:
  """`unroll` with stacked observations [B, T+1, H, W, k] (frame_stack 1);
  unchanged when it holds them already."""
  if unroll.frame_stack == 1:
    return unroll
  done = unroll.terminated | unroll.truncated
  return dataclasses.replace(
    unroll,
    observation=stack_frames(unroll.observation, done, unroll.frame_stack),
    frame_stack=1,
  )


def roundtrip_ok(observation: np.ndarray, done: np.ndarray) -> np.ndarray:
  """bool [B]: whether each unroll survives compress/decompress exactly."""
  frames, first_stack = compress(observation)
  rebuilt = decompress(frames, first_stack, done)
  return np.all(
    (rebuilt == observation).reshape(observation.shape[0], -1), axis=1
  )


class FrameBlockStore:
  """A ring of `capacity` compressed unrolls ("blocks") of T+1 steps.

  Block ids are absolute insert counters; a block lives in slot id %
  capacity until `capacity` newer blocks overwrite it. Whoever holds ids
  (DQN's replay) must drop them before that: size the ring so that the
  items referring to a block are evicted first (see `blocks_for`).

  Threads: one inserting thread and any number of readers. `stacks`
  refuses ids that are no longer alive, but an insert that runs while a
  reader copies may overwrite the slots it reads: whoever samples ids
  serialises that sample and its `stacks` with the inserts
  (TransitionReplay holds one lock over both).
  """

  def __init__(
    self, capacity: int, steps: int, frame_shape: Tuple[int, ...], depth: int
  ):
    if capacity < 1 or steps < 1 or depth < 1:
      raise ValueError(
        f"FrameBlockStore: capacity ({capacity}), steps ({steps}) and depth "
        f"({depth}) must be >= 1"
      )
    self.capacity, self.steps, self.depth = int(capacity), int(steps), depth
    # extended[slot, j]: frame of step j - (depth - 1) of the block.
    self._extended = np.zeros(
      (self.capacity, self.steps + depth - 1) + tuple(frame_shape), np.uint8
    )
    self._last_start = np.zeros((self.capacity, self.steps), np.int32)
    self._next_id = 0
    self._lock = threading.Lock()

  @staticmethod
  def blocks_for(item_capacity: int, items_per_block: int) -> int:
    """Blocks needed so that a FIFO of `item_capacity` items, filled
    `items_per_block` items per block, never refers to an overwritten one:
    the blocks its items can span plus one being written."""
    return -(-item_capacity // items_per_block) + 2

  @property
  def nbytes(self) -> int:
    return int(self._extended.nbytes + self._last_start.nbytes)

  def insert(self, observation: np.ndarray, done: np.ndarray) -> np.ndarray:
    """Stores unrolls [B, T+1, H, W, k] (uint8) with their episode starts
    done [B, T+1]; returns their block ids, int64 [B]."""
    batch = observation.shape[0]
    expected = (self.steps,) + self._extended.shape[2:] + (self.depth,)
    if observation.shape[1:] != expected or done.shape != (batch, self.steps):
      raise ValueError(
        f"FrameBlockStore.insert: observation {list(observation.shape)} and "
        f"done {list(done.shape)}, expected [B, {', '.join(map(str, expected))}]"
        f" and [B, {self.steps}]"
      )
    with self._lock:
      ids = self._next_id + np.arange(batch, dtype=np.int64)
      self._next_id += batch
    slots = ids % self.capacity
    frames, first_stack = compress(observation)
    self._extended[slots, : self.depth - 1] = np.moveaxis(first_stack, -1, 1)
    self._extended[slots, self.depth - 1 :] = frames
    self._last_start[slots] = _last_start(done, self.depth)
    return ids

  def state_dict(self) -> Dict[str, np.ndarray]:
    """Copies of the blocks written so far and the next block id."""
    with self._lock:
      written = min(self._next_id, self.capacity)
      return {
        "next_id": np.asarray(self._next_id, np.int64),
        "extended": self._extended[:written].copy(),
        "last_start": self._last_start[:written].copy(),
      }

  def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
    """Replaces the blocks with a `state_dict` of a store of the same
    shape; ValueError naming what differs."""
    next_id = int(state["next_id"])
    written = min(next_id, self.capacity)
    extended = np.asarray(state["extended"])
    last_start = np.asarray(state["last_start"])
    expected = (written,) + self._extended.shape[1:]
    if extended.shape != expected or last_start.shape != (written, self.steps):
      raise ValueError(
        f"the saved frame blocks are {list(extended.shape)} (and "
        f"{list(last_start.shape)}), this run's store holds "
        f"{list(expected)} after {next_id} blocks: capacity, unroll length, "
        "frame shape or stack depth differ"
      )
    with self._lock:
      self._extended[:written] = extended
      self._last_start[:written] = last_start
      self._next_id = next_id

  def oldest_alive(self) -> int:
    """The smallest block id not yet overwritten."""
    with self._lock:
      return max(0, self._next_id - self.capacity)

  def stacks(self, ids: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """The stacked observations [N, H, W, k] of step `steps[i]` of block
    `ids[i]` (both int [N])."""
    ids, steps = np.asarray(ids, np.int64), np.asarray(steps, np.int64)
    if ids.size and (
      ids.min() < self.oldest_alive() or ids.max() >= self._next_id
    ):
      raise ValueError(
        f"FrameBlockStore.stacks: block ids [{ids.min()}, {ids.max()}] are "
        f"not all alive (alive: [{self.oldest_alive()}, {self._next_id}))"
      )
    slots = ids % self.capacity
    last_start = self._last_start[slots, steps]  # [N]
    out = np.empty(
      (ids.size,) + self._extended.shape[2:] + (self.depth,), np.uint8
    )
    for c in range(self.depth):
      age = self.depth - 1 - c
      frame = self._extended[slots, steps + c]  # [N, H, W]
      valid = (steps - age >= last_start)[:, None, None]
      out[..., c] = np.where(valid, frame, 0)
    return out
