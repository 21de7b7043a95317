"""Per-environment state the learner keeps for every env of every actor.

SEED RL keeps all of it on the learner, indexed by global env id, so actors
stay stateless env steppers: the run id (a change means the actor restarted
and the env's state is stale), the recurrent core state, the previous action,
and, for Atari, the frame stack (actors send one 84x84 frame per step).
"""

from __future__ import annotations

import os
import sys
from typing import Callable, List, Optional, Tuple, Union

import numpy as np

from seed_rl.common.agent_api import CoreState
from seed_rl.common.specs import ArraySpec


def _load_native():
  """The compiled one-pass push (seed_rl/common/_frame_push.c), or None
  where it was not built or SEED_RL_NATIVE=0 turns it off (NumPy's passes
  give the same bytes)."""
  if os.environ.get("SEED_RL_NATIVE", "1") == "0":
    return None
  try:
    from seed_rl.common import _frame_push
  except ImportError:
    return None
  return _frame_push


_NATIVE = _load_native()

# Envs per run of consecutive ids, on average, from which `stacked` pushes
# packed stacks run by run in place rather than by gather and scatter.
_MIN_RUN = 4

# Rows of per-env tables: env ids int [B], or slice(a, a + B) when they are
# exactly a, ..., a + B - 1 (one actor's envs, the usual batch), which reads
# and writes the tables through views instead of gathers and scatters.
EnvIndex = Union[slice, np.ndarray]


def env_index(env_ids: np.ndarray) -> EnvIndex:
  """`env_ids` (int [B], distinct) as a slice when they are consecutive and
  increasing, else unchanged."""
  n = env_ids.shape[0]
  if n == 0:
    return env_ids
  first = int(env_ids[0])
  if n > 1 and (
    int(env_ids[-1]) - first != n - 1
    or np.count_nonzero(env_ids[1:] > env_ids[:-1]) != n - 1
  ):
    return env_ids
  return slice(first, first + n)


def runs(env_ids: EnvIndex) -> List[Tuple[int, int, int]]:
  """(lo, hi, env_ids[lo]) for the index ranges [lo, hi) of `env_ids`
  holding consecutive increasing ids, in order (one per actor in a batch
  merged from several)."""
  if isinstance(env_ids, slice):
    return [(0, env_ids.stop - env_ids.start, env_ids.start)]
  if not len(env_ids):
    return []
  bounds = [
    0,
    *(np.flatnonzero(np.diff(env_ids) != 1) + 1).tolist(),
    len(env_ids),
  ]
  return [(lo, hi, int(env_ids[lo])) for lo, hi in zip(bounds[:-1], bounds[1:])]


def index_ids(index: EnvIndex) -> np.ndarray:
  """The env ids int [B] of `index`."""
  if isinstance(index, slice):
    return np.arange(index.start, index.stop)
  return index


def index_size(index: EnvIndex) -> int:
  if isinstance(index, slice):
    return index.stop - index.start
  return int(index.shape[0])


def _rows(table: np.ndarray, index: EnvIndex) -> np.ndarray:
  """`table[index]` as a copy (a slice would give a view of the table)."""
  rows = table[index]
  return rows.copy() if isinstance(index, slice) else rows


class EnvStateTable:
  """Arrays of per-env state, `[num_envs, ...]` each.

  Args:
    num_envs: global env ids served, [0, num_envs).
    action_spec: per-env action spec (for the previous action).
    initial_core_state: `n -> CoreState` of zeros for n envs.
    frame_stack: k > 1 stacks the last k observations on a new last axis
      (older slots are zero at an episode start); 1 passes observations on.
    observation_spec: the wire's per-env observation spec.
  """

  def __init__(
    self,
    num_envs: int,
    observation_spec: ArraySpec,
    action_spec: ArraySpec,
    initial_core_state: Callable[[int], CoreState],
    frame_stack: int = 1,
  ):
    if frame_stack < 1:
      raise ValueError(f"frame_stack must be >= 1, got {frame_stack}")
    self.num_envs = num_envs
    self.frame_stack = frame_stack
    # 0 never comes from an actor's random non-zero run ids, so every env's
    # first message counts as a restart.
    self.run_ids = np.zeros(num_envs, np.int64)
    self._initial_core_state = initial_core_state
    self.core_state = tuple(np.array(s) for s in initial_core_state(num_envs))
    self.prev_action = action_spec.zeros(num_envs)
    self.stacked_spec = stacked_observation_spec(observation_spec, frame_stack)
    self.stack = self.stacked_spec.zeros(num_envs) if frame_stack > 1 else None
    # Four uint8 frames per pixel are one little-endian uint32 whose high
    # byte is the newest frame, so the table's bytes are the agent's layout
    # (oldest frame first) as they lie: pushing a frame is a shift of a
    # [N, H, W] uint32 view (~10x faster than moving channels) and one
    # strided write of the frame into channel k-1, and one actor's stacks
    # are read where they are.
    self._packed = (
      frame_stack == 4
      and self.stack is not None
      and self.stack.dtype == np.uint8
      and sys.byteorder == "little"
    )
    if self._packed and self.stack is not None:
      self._words = self.stack.view(np.uint32)[..., 0]  # [N, H, W], a view
      self._pixels = int(np.prod(self._words.shape[1:]))  # H * W

  @property
  def push_kind(self) -> Optional[str]:
    """How frames are pushed onto packed stacks: 'compiled' (one pass,
    seed_rl/common/_frame_push.c), 'numpy' (three passes: the extension
    was not built or SEED_RL_NATIVE=0), or None (no packed stacks)."""
    if not self._packed:
      return None
    return "numpy" if _NATIVE is None else "compiled"

  def refresh_run_ids(
    self, env_ids: EnvIndex, run_ids: np.ndarray
  ) -> Optional[np.ndarray]:
    """Records run ids; returns bool [B]: envs whose run id changed, or
    None when none did."""
    changed = self.run_ids[env_ids] != run_ids
    if not np.count_nonzero(changed):  # ~4x faster than .any()
      return None
    self.run_ids[index_ids(env_ids)[changed]] = run_ids[changed]
    return changed

  def reset(self, env_ids: EnvIndex) -> None:
    """Starts a new episode for `env_ids` (core state, prev action, stack)."""
    size = index_size(env_ids)
    if size == 0:
      return
    for table, init in zip(self.core_state, self._initial_core_state(size)):
      table[env_ids] = init
    self.prev_action[env_ids] = 0
    if self.stack is not None:
      self.stack[env_ids] = 0

  def gather(self, env_ids: EnvIndex) -> Tuple[CoreState, np.ndarray]:
    """Returns (core_state, prev_action) rows for `env_ids` (copies)."""
    return (
      tuple(_rows(t, env_ids) for t in self.core_state),
      _rows(self.prev_action, env_ids),
    )

  def scatter(
    self, env_ids: EnvIndex, core_state: CoreState, action: np.ndarray
  ) -> None:
    for table, value in zip(self.core_state, core_state):
      table[env_ids] = value
    self.prev_action[env_ids] = action

  def stacked(
    self,
    env_ids: EnvIndex,
    frames: np.ndarray,
    commit: bool = True,
    out: Optional[np.ndarray] = None,
    view: bool = False,
  ) -> np.ndarray:
    """Returns `[B, *stacked_shape]` observations with `frames` newest:
    `out` when given and of their dtype (then written there), else a new
    array (or `frames` themselves when nothing is stacked).

    commit=False computes the stack without storing it (for the final
    observation of a truncated episode, which no later frame follows).
    view=True (with commit) may instead return a read-only view of the
    table's rows when `env_ids` is one run of envs: no copy, but valid
    only until these envs' next step.
    """
    spans = runs(env_ids) if self._packed and commit else []
    if self.stack is None:
      stacked = frames
    elif spans and len(spans) * _MIN_RUN <= max(len(frames), _MIN_RUN):
      # One run, or runs of _MIN_RUN envs on average.
      if view and len(spans) == 1:
        self._push_packed(spans, frames, None)
        lo, hi, first = spans[0]
        rows = self.stack[first : first + hi - lo].view()
        rows.flags.writeable = False
        return rows
      if out is None or out.dtype != self.stack.dtype:
        out = np.empty((len(frames),) + self.stack.shape[1:], self.stack.dtype)
      self._push_packed(spans, frames, out)
      return out
    elif self._packed:
      packed = (self._words[env_ids] >> 8) | (frames.astype(np.uint32) << 24)
      if commit:
        self._words[env_ids] = packed
      stacked = packed[..., None].view(np.uint8)  # [B, H, W, 4]
    else:
      stacked = np.concatenate(
        [self.stack[env_ids, ..., 1:], frames[..., None]], axis=-1
      )
      if commit:
        self.stack[env_ids] = stacked
    if out is None or out.dtype != stacked.dtype:
      return stacked
    out[...] = stacked
    return out

  def _push_packed(
    self,
    spans: List[Tuple[int, int, int]],
    frames: np.ndarray,
    out: Optional[np.ndarray],
  ) -> None:
    """Pushes `frames` onto packed stacks, run by run of consecutive envs
    (`runs`), in place, and copies the new stacks into `out` (rows as
    `frames`') when given: no gather, scatter or temporaries (a fresh ~1 MB
    temporary per call can cost hundreds of page faults, and every pass
    over the stacks is a pass over memory that is rarely in cache)."""
    assert self.stack is not None
    if (
      _NATIVE is not None
      and frames.dtype == np.uint8
      and frames.flags.c_contiguous
      and (out is None or out.flags.c_contiguous)
    ):
      # One pass: each word read once, written to table and out.
      _NATIVE.push_runs(
        self._words,
        frames,
        out,
        np.array(spans, np.int64),
        self._pixels,
      )
      return
    for lo, hi, first in spans:
      words = self._words[first : first + hi - lo]
      np.right_shift(words, 8, out=words)
      self.stack[first : first + hi - lo, ..., -1] = frames[lo:hi]
    if out is not None:
      # Run by run: contiguous copies (a gather by index, np.take with
      # `out`, buffers and was half the inference thread's time).
      for lo, hi, first in spans:
        np.copyto(out[lo:hi], self.stack[first : first + hi - lo])


def stacked_observation_spec(spec: ArraySpec, frame_stack: int) -> ArraySpec:
  """The agent-side spec of observations stacked `frame_stack` deep."""
  if frame_stack == 1:
    return spec
  return spec.replace(
    shape=spec.shape + (frame_stack,),
    minimum=None,
    maximum=None,
    frame_stack=frame_stack,
  )
