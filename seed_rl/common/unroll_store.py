"""Per-environment unroll assembly.

Each env appends one `StepRecord` per inference call; once it holds `length`
steps (T+1) the unroll is emitted as an `Unroll` and its last `overlap` steps
stay as the first steps of the env's next unroll (overlap=1 is SEED RL's
layout; R2D2 overlaps by its burn-in). It runs on the inference thread for
every step of every env, so a step is flattened into a fixed list of arrays
(the per-step fields, then the core state arrays, then the extras in the
order the first step named them) and written for a whole batch at once.

Envs are kept in blocks, one per run of consecutive env ids appended
together (one actor's envs), so a step of a block is one slice write per
array. No slot of a block is ever written twice: when a block's unrolls
complete together (its envs step in lockstep) its arrays become the Unroll
without a copy and the block moves on to new arrays, and the caller may
stack observations straight into the next step's slots (`observation_slots`)
and hand that view to the agent. Other traffic (a subset of a block, resets
of some of its envs, several blocks completing in one call) takes slower
paths that give the same Unrolls.

With `frame_depth` k > 1 (frame-stacked observations) the store keeps
frames, not stacks: the observation array of a block is
[envs, k - 1 + length, *frame_shape], the k - 1 frames before step 0
(zero where older than an episode start at or before step 0) and then each
step's newest frame, the layout of `Unroll.frame_stack`. A step appends its
newest frame [B, *frame_shape]; the caller stacks for inference from its own
per-env history.
"""

from __future__ import annotations

import collections
import operator
import sys
from typing import (
  Deque,
  Any,
  Dict,
  FrozenSet,
  List,
  NamedTuple,
  Optional,
  Tuple,
)

import numpy as np

from seed_rl.common.agent_api import CoreState, Unroll
from seed_rl.common.env_state import EnvIndex, runs

# StepRecord's per-step fields, stored as they are, in this order.
PER_STEP_FIELDS = (
  "observation",
  "reward",
  "terminated",
  "truncated",
  "bootstrap_value",
  "prev_action",
  "action",
  "value",
  "policy_version",
)


_per_step_fields = operator.attrgetter(*PER_STEP_FIELDS)

# Retired block arrays kept per block size, and how many of the oldest a new
# block looks at: training mostly consumes unrolls in order, so the oldest
# are the likeliest to be free.
_SPARE_BLOCKS = 16
_SPARE_PROBES = 4


def _unheld(arrays: List[np.ndarray]) -> bool:
  """True when nothing but `arrays` refers to its arrays: no Unroll, view
  or tensor made from them is alive (a NumPy view or a tensor aliasing an
  array holds a reference to it)."""
  # The references: the list, the loop variable and getrefcount's argument.
  return all(sys.getrefcount(a) <= 3 for a in arrays)


class StepRecord(NamedTuple):
  """One step of B envs, as `Unroll` stores it (see agent_api.Unroll).

  observation: [B, *obs_shape] what the agent saw (frames stacked).
  reward: float32 [B] reward of the transition into this step.
  terminated, truncated: bool [B] that transition ended an episode.
  bootstrap_value: float32 [B] value of the ended episode's final
    observation where truncated, else 0.
  prev_action: [B, *action_shape].
  action: [B, *action_shape] taken at this step.
  value: float32 [B] behaviour value of this step.
  policy_version: int64 [B] learner step whose weights acted.
  core_state: CoreState before this step, each [B, ...].
  extras: name -> [B, ...] from ActOutputs.extras.
  """

  observation: np.ndarray
  reward: np.ndarray
  terminated: np.ndarray
  truncated: np.ndarray
  bootstrap_value: np.ndarray
  prev_action: np.ndarray
  action: np.ndarray
  value: np.ndarray
  policy_version: np.ndarray
  core_state: CoreState
  extras: Dict[str, np.ndarray]

  def rows(self, index: Any) -> "StepRecord":
    """The envs at `index` (a bool mask [B] or index array), every field."""
    return self._replace(
      **{name: getattr(self, name)[index] for name in PER_STEP_FIELDS},
      core_state=tuple(c[index] for c in self.core_state),
      extras={name: x[index] for name, x in self.extras.items()},
    )


class _Block:
  """The unrolls being assembled for envs [first, first + size): one array
  [size, length, ...] per flattened field.

  `pos` is the steps every row holds, or None while rows differ (after a
  reset of some of them). `owned` counts the envs whose rows live here: an
  env moves to a new block when it is appended as part of another run, and
  a block that lost envs is never written again.
  """

  __slots__ = ("first", "stop", "size", "arrays", "owned", "pos")

  def __init__(
    self, first: int, size: int, arrays: List[np.ndarray], pos: Optional[int]
  ):
    self.first = first
    self.stop = first + size
    self.size = size
    self.arrays = arrays
    self.owned = size
    self.pos = pos

  @property
  def intact(self) -> bool:
    return self.owned == self.size


class _Done(NamedTuple):
  """Rows of `block` whose unroll completed (None: all of them)."""

  block: _Block
  rows: Optional[np.ndarray]


class UnrollStore:
  """Assembles `[envs, length, ...]` unrolls per array of a step, step by step.

  Args:
    num_envs: global env ids served.
    length: steps per unroll (T+1).
    overlap: steps shared by consecutive unrolls of one env, in [1, length).
    frame_depth: k > 1 stores observations as frames (see the module's
      docstring): a step's observation is its newest frame; 1 stores them
      as they are.
  """

  def __init__(
    self, num_envs: int, length: int, overlap: int = 1, frame_depth: int = 1
  ):
    if length < 2:
      raise ValueError(f"an unroll needs >= 2 steps, got length={length}")
    if not 1 <= overlap < length:
      raise ValueError(
        f"overlap must be in [1, {length}), got {overlap}: "
        "consecutive unrolls must share at least the boundary "
        "step and must advance"
      )
    if frame_depth < 1:
      raise ValueError(f"frame_depth must be >= 1, got {frame_depth}")
    self.num_envs = num_envs
    self.length = length
    self.overlap = overlap
    self.frame_depth = frame_depth
    # Slots of the observation array before step 0 (the frame history).
    self._history = frame_depth - 1
    self._pos = np.zeros(num_envs, np.int64)
    self._block_of: List[Optional[_Block]] = [None] * num_envs
    # The view the last `observation_slots` call handed out.
    self._slots: Optional[np.ndarray] = None
    # Per flattened array: (per-env shape, dtype), fixed by the first step.
    self._templates: Optional[List[Tuple[Tuple[int, ...], np.dtype]]] = None
    self._num_core = 0
    self._extra_names: Tuple[str, ...] = ()
    self._extra_set: FrozenSet[str] = frozenset()
    # Arrays of blocks that moved on, by block size, for reuse (`_recycled`).
    self._spare: Dict[int, Deque[List[np.ndarray]]] = {}
    self.arrays_reused = 0

  def _flatten(self, step: StepRecord) -> List[np.ndarray]:
    if len(step.core_state) != self._num_core or (
      step.extras.keys() != self._extra_set
    ):
      raise ValueError(
        f"StepRecord structure changed: {len(step.core_state)} core state "
        f"arrays and extras {sorted(step.extras)}, the first step had "
        f"{self._num_core} and {sorted(self._extra_names)}"
      )
    return [
      *_per_step_fields(step),
      *step.core_state,
      *[step.extras[name] for name in self._extra_names],
    ]

  def _unflatten(self, env_ids: np.ndarray, rows: List[np.ndarray]) -> Unroll:
    """`rows`: `_flatten`'s arrays, each [C, length, ...] -> an Unroll."""
    n = len(PER_STEP_FIELDS)
    core = rows[n : n + self._num_core]
    return Unroll(
      env_ids=env_ids,
      **dict(zip(PER_STEP_FIELDS, rows[:n])),
      extras=dict(zip(self._extra_names, rows[n + self._num_core :])),
      # The state the unroll starts from: that before its step 0.
      core_state=tuple(c[:, 0] for c in core),
      frame_stack=self.frame_depth,
    )

  def _set_structure(self, step: StepRecord) -> None:
    self._num_core = len(step.core_state)
    self._extra_names = tuple(step.extras)
    self._extra_set = frozenset(step.extras)
    self._templates = [
      (value.shape[1:], value.dtype) for value in self._flatten(step)
    ]

  def _new_arrays(self, size: int) -> List[np.ndarray]:
    # Uninitialised: a slot is always written before an Unroll shows it.
    assert self._templates is not None
    recycled = self._recycled(size)
    if recycled is not None:
      return recycled
    return [
      np.empty(
        (size, self.length + (self._history if i == 0 else 0)) + shape, dtype
      )
      for i, (shape, dtype) in enumerate(self._templates)
    ]

  def _recycled(self, size: int) -> Optional[List[np.ndarray]]:
    """A retired block's arrays that nothing holds any more, or None.

    Reusing them instead of allocating saves page faults: a block is ~20 MB
    of Atari stacks for 32 envs, which the allocator otherwise maps fresh
    (and the kernel zeroes) on every unroll, measured at several
    microseconds per agent step."""
    spare = self._spare.get(size)
    if not spare:
      return None
    for _ in range(min(_SPARE_PROBES, len(spare))):
      if _unheld(spare[0]):
        self.arrays_reused += 1
        return spare.popleft()
      # Still held (e.g. by a replay buffer): to the back, so that a few
      # long-held blocks do not hide the free ones behind them.
      spare.rotate(-1)
    return None

  def _retire(self, size: int, arrays: List[np.ndarray]) -> None:
    spare = self._spare.get(size)
    if spare is None:
      spare = self._spare[size] = collections.deque(maxlen=_SPARE_BLOCKS)
    # A list of our own: the caller's list may still be read (`_emit`
    # concatenates it after this), and its references must count.
    spare.append(list(arrays))

  def reset(self, env_ids: np.ndarray) -> int:
    """Drops the partial unrolls of `env_ids` (e.g. after an actor restart).

    Returns:
      How many of these envs held steps (partial unrolls now discarded).
    """
    discarded = int(np.count_nonzero(self._pos[env_ids]))
    self._pos[env_ids] = 0
    blocks = {id(b): b for b in map(self._block_of.__getitem__, env_ids)}
    for block in blocks.values():
      if block is not None and block.intact:
        self._renew(block)  # the reset rows start again at slot 0
    return discarded

  def observation_slots(self, env_ids: slice) -> Optional[np.ndarray]:
    """Where the next `append` of envs `env_ids` (a slice of env ids) will
    put their observations, as a writable view [B, *obs_shape], when they
    are one block in lockstep; else None.

    A caller that writes the observations there and appends a step whose
    `observation` is this very view saves their copy. A slot is written
    once, so the view keeps its contents (the Unroll will hold them).
    """
    first, stop = env_ids.start, env_ids.stop
    block = self._block_of[first] if self._templates is not None else None
    if (
      block is None
      or block.pos is None
      or not self._fits(block, first, stop)
      or block.stop != stop
    ):
      return None
    self._slots = block.arrays[0][:, block.pos + self._history]
    return self._slots

  def append(self, env_ids: EnvIndex, step: StepRecord) -> Optional[Unroll]:
    """Appends one step per env; returns the completed unrolls or None.

    Args:
      env_ids: int [B] distinct env ids, or slice(a, a + B) for the ids
        a, a + 1, ..., a + B - 1.
      step: B envs' step; the same structure (core state arrays, extras
        names) and per-env shapes at every call.

    Returns:
      None, or an Unroll of the C envs whose unroll completed with this step,
      in the order of `env_ids` (env_ids int32 [C], per-step fields
      [C, length, ...]); later steps never write into it.
    """
    done = self._append(env_ids, step)
    return self._emit(done) if done else None

  def append_each(self, env_ids: EnvIndex, step: StepRecord) -> List[Unroll]:
    """`append`, but the completed unrolls come one Unroll per block (one
    actor's envs, usually) instead of concatenated: when several actors'
    unrolls complete in one call, no copy of them is made (with 16 actors
    of 32 Atari envs, the concatenation was a ~330 MB copy into fresh
    pages every unroll)."""
    done = self._append(env_ids, step)
    return self._emit_each(done) if done else []

  def _append(self, env_ids: EnvIndex, step: StepRecord) -> List[_Done]:
    if self._templates is None:
      self._set_structure(step)
    values = self._flatten(step)
    size = len(values[0])
    done: List[_Done] = []
    for lo, hi, first in runs(env_ids):
      for block in self._blocks_for(first, hi - lo):
        if block.size == size:
          rows = values
        else:
          rows = [v[lo : lo + block.size] for v in values]
        self._write(block, rows, done)
        lo += block.size
    self._slots = None
    return done

  def _blocks_for(self, first: int, size: int) -> List[_Block]:
    """The blocks holding envs [first, first + size) in order: the intact
    blocks that cover them exactly (e.g. several actors merged into one
    batch), else one new block for all of them (their rows moved into it;
    a run of envs stays one block however it was split before)."""
    blocks, env, stop = [], first, first + size
    while env < stop:
      block = self._block_of[env]
      if not self._fits(block, env, stop):
        return [self._new_block(first, stop)]
      assert block is not None  # narrowed by _fits
      blocks.append(block)
      env = block.stop
    return blocks

  @staticmethod
  def _fits(block: Optional[_Block], first: int, end: int) -> bool:
    return (
      block is not None
      and block.first == first
      and block.stop <= end
      and block.intact
    )

  def _new_block(self, first: int, stop: int) -> _Block:
    """A block for envs [first, stop), their partial unrolls moved into it."""
    arrays = self._new_arrays(stop - first)
    history = self._history
    for env in range(first, stop):
      old, steps = self._block_of[env], int(self._pos[env])
      if old is not None:
        old.owned -= 1
      if history:
        # An env without steps starts from an empty history; one with
        # steps keeps the history of its step 0 with them.
        if old is not None and steps:
          held = history + steps
          arrays[0][env - first, :held] = old.arrays[0][env - old.first, :held]
        else:
          arrays[0][env - first, :history] = 0
      if old is not None and steps:
        for i, (new, array) in enumerate(zip(arrays, old.arrays)):
          if i or not history:
            new[env - first, :steps] = array[env - old.first, :steps]
    block = _Block(first, stop - first, arrays, self._common_pos(first, stop))
    self._block_of[first:stop] = [block] * block.size
    return block

  def _common_pos(self, first: int, stop: int) -> Optional[int]:
    """The steps envs [first, stop) all hold, or None if they differ."""
    pos = self._pos[first:stop]
    return int(pos[0]) if (pos == pos[0]).all() else None

  def _write(
    self, block: _Block, values: List[np.ndarray], done: List[_Done]
  ) -> None:
    """Appends `values` (each [block.size, ...]) to `block`; notes in `done`
    the rows it completed."""
    pos = block.pos
    if pos is not None:  # lockstep: one slice per array
      for i, (array, value) in enumerate(zip(block.arrays, values)):
        if value is not self._slots:  # else written by the caller
          array[:, pos + (self._history if i == 0 else 0)] = value
      block.pos = pos + 1
      self._pos[block.first : block.stop] = pos + 1
      if pos + 1 == self.length:
        done.append(_Done(block, None))
      return
    rows = np.arange(block.size)
    positions = self._pos[block.first : block.stop]  # a view
    for i, (array, value) in enumerate(zip(block.arrays, values)):
      array[rows, positions + (self._history if i == 0 else 0)] = value
    positions += 1
    full = np.flatnonzero(positions == self.length)
    if full.size:
      done.append(_Done(block, full))

  def _emit(self, done: List[_Done]) -> Unroll:
    """The Unroll of the completed rows in `done` (in order); their blocks
    move on to new arrays (`_renew`)."""
    if len(done) == 1 and done[0].rows is None:
      # A whole block (envs in lockstep): its arrays become the Unroll.
      block = done[0].block
      arrays = block.arrays
      self._renew(block)
      env_ids = np.arange(block.first, block.stop, dtype=np.int32)
      return self._unflatten(env_ids, arrays)
    ids, parts = [], []
    for block, rows in done:
      if rows is None:  # copied by the concatenation below
        ids.append(np.arange(block.first, block.stop))
        parts.append(block.arrays)
      else:
        ids.append(block.first + rows)
        parts.append([array[rows] for array in block.arrays])  # copies
      self._renew(block)
    if len(parts) == 1:
      return self._unflatten(ids[0].astype(np.int32), parts[0])
    return self._unflatten(
      np.concatenate(ids).astype(np.int32),
      [np.concatenate(arrays) for arrays in zip(*parts)],
    )

  def _emit_each(self, done: List[_Done]) -> List[Unroll]:
    """`_emit` without the concatenation: one Unroll per entry of `done`
    (a whole block's arrays as they are, or copies of its completed rows)."""
    unrolls = []
    for block, rows in done:
      if rows is None:
        arrays = block.arrays
        env_ids = np.arange(block.first, block.stop, dtype=np.int32)
      else:
        arrays = [array[rows] for array in block.arrays]  # copies
        env_ids = (block.first + rows).astype(np.int32)
      self._renew(block)
      unrolls.append(self._unflatten(env_ids, arrays))
    return unrolls

  def _renew(self, block: _Block) -> None:
    """Moves `block` onto new arrays with each env's live steps: an unroll
    that completed keeps its last `overlap` steps, a reset one none.

    Never rewriting a slot keeps every array handed out (Unrolls, the
    views of `observation_slots`) as it was, without copying it.
    """
    length = self.length
    old, block.arrays = block.arrays, self._new_arrays(block.size)
    positions = self._pos[block.first : block.stop]  # a view
    pos = self._common_pos(block.first, block.stop)
    if pos is not None:  # lockstep: one slice per array
      self._carry(block.arrays, old, slice(None), pos)
    else:
      for row, pos in enumerate(positions.tolist()):
        self._carry(block.arrays, old, slice(row, row + 1), pos)
    self._retire(block.size, old)
    positions[positions == length] = self.overlap
    block.pos = self._common_pos(block.first, block.stop)

  def _carry(
    self, new: List[np.ndarray], old: List[np.ndarray], rows: slice, pos: int
  ) -> None:
    """Copies the live steps of `rows` (holding `pos` steps) from the
    `old` arrays to the start of the `new` ones: the last `overlap` steps of
    a completed unroll, all of a partial one, none of a reset one (pos 0).
    With frames, step 0's history goes with them: the frames before it,
    zeroed where an episode started between them and step 0 (as the
    stacks the caller built were)."""
    length, keep, history = self.length, self.overlap, self._history
    start, stop = (length - keep, length) if pos == length else (0, pos)
    for i, (to, array) in enumerate(zip(new, old)):
      if i or not history:
        to[rows, : stop - start] = array[rows, start:stop]
      elif stop:
        to[rows, : history + stop - start] = array[rows, start : stop + history]
      else:
        to[rows, :history] = 0
    if history and start:
      # Old steps 2 and 3 of the flattened fields: terminated, truncated.
      starts = old[2][rows, : start + 1] | old[3][rows, : start + 1]
      for age in range(1, history + 1):
        stale = starts[:, max(0, start - age + 1) :].any(axis=1)
        if stale.any():
          frames = new[0][rows]  # a view (rows is a slice)
          frames[stale, history - age] = 0
