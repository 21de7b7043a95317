"""Per-environment unroll assembly.

Each env appends one `StepRecord` per inference call; once it holds `length`
steps (T+1) the unroll is emitted as an `Unroll` and its last `overlap` steps
stay as the first steps of the env's next unroll (overlap=1 is SEED RL's
layout; R2D2 overlaps by its burn-in). Everything is vectorised over the envs
of a batch because it runs on the inference thread for every step of every
env: a step is flattened into a fixed list of arrays (the per-step fields,
then the core state arrays, then the extras in the order the first step
named them), one buffer each.
"""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, NamedTuple, Optional, Tuple

import numpy as np

from seed_rl.common.agent_api import CoreState, Unroll

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


class UnrollStore:
  """Buffers `[num_envs, length, ...]` per array of a step, filled step by step.

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
    self._buffers: Optional[List[np.ndarray]] = None
    # The structure every step must have, fixed by the first one.
    self._num_core = 0
    self._extra_names: Tuple[str, ...] = ()
    self._extra_set: FrozenSet[str] = frozenset()

  def _flatten(self, step: StepRecord) -> List[np.ndarray]:
    if len(step.core_state) != self._num_core or (
      step.extras.keys() != self._extra_set
    ):
      raise ValueError(
        f"StepRecord structure changed: {len(step.core_state)} core state "
        f"arrays and extras {sorted(step.extras)}, the first step had "
        f"{self._num_core} and {sorted(self._extra_names)}"
      )
    return (
      [getattr(step, name) for name in PER_STEP_FIELDS]
      + list(step.core_state)
      + [step.extras[name] for name in self._extra_names]
    )

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
    )

  def _allocate(self, step: StepRecord) -> List[np.ndarray]:
    self._num_core = len(step.core_state)
    self._extra_names = tuple(step.extras)
    self._extra_set = frozenset(step.extras)
    return [
      np.zeros((self.num_envs, self.length) + value.shape[1:], value.dtype)
      for value in self._flatten(step)
    ]

  def reset(self, env_ids: np.ndarray) -> int:
    """Drops the partial unrolls of `env_ids` (e.g. after an actor restart).

    Returns:
      How many of these envs held steps (partial unrolls now discarded).
    """
    discarded = int(np.count_nonzero(self._pos[env_ids]))
    self._pos[env_ids] = 0
    return discarded

  def append(self, env_ids: np.ndarray, step: StepRecord) -> Optional[Unroll]:
    """Appends one step per env; returns the completed unrolls or None.

    Args:
      env_ids: int [B] distinct env ids.
      step: B envs' step; the same structure (core state arrays, extras
        names) and per-env shapes at every call.

    Returns:
      None, or an Unroll of the C envs whose unroll completed with this step
      (env_ids int32 [C], per-step fields [C, length, ...]).
    """
    if self._buffers is None:
      self._buffers = self._allocate(step)
    pos = self._pos[env_ids]
    for buffer, value in zip(self._buffers, self._flatten(step)):
      buffer[env_ids, pos] = value
    pos += 1
    self._pos[env_ids] = pos
    full = env_ids[pos == self.length]
    if full.size == 0:
      return None
    keep = self.overlap
    rows = []
    for buffer in self._buffers:
      row = buffer[full]  # a copy: later writes do not alias it
      rows.append(row)
      buffer[full, :keep] = row[:, self.length - keep :]
    self._pos[full] = keep
    return self._unflatten(full.astype(np.int32), rows)
