"""Per-environment state the learner keeps for every env of every actor.

SEED RL keeps all of it on the learner, indexed by global env id, so actors
stay stateless env steppers: the run id (a change means the actor restarted
and the env's state is stale), the recurrent core state, the previous action,
and, for Atari, the frame stack (actors send one 84x84 frame per step).
"""

from __future__ import annotations

import sys
from typing import Callable, Tuple

import numpy as np

from seed_rl.common.agent_api import CoreState
from seed_rl.common.specs import ArraySpec


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
    # Four uint8 frames per pixel are one little-endian uint32 whose low byte
    # is the oldest frame: pushing a frame is a shift and an OR on a
    # [N, H, W] uint32 view, ~10x faster than interleaving channels.
    self._packed = (
      frame_stack == 4
      and self.stack is not None
      and self.stack.dtype == np.uint8
      and sys.byteorder == "little"
    )

  def refresh_run_ids(
    self, env_ids: np.ndarray, run_ids: np.ndarray
  ) -> np.ndarray:
    """Records run ids; returns bool [B]: envs whose run id changed."""
    changed = self.run_ids[env_ids] != run_ids
    if changed.any():
      self.run_ids[env_ids[changed]] = run_ids[changed]
    return changed

  def reset(self, env_ids: np.ndarray) -> None:
    """Starts a new episode for `env_ids` (core state, prev action, stack)."""
    if env_ids.size == 0:
      return
    for table, init in zip(
      self.core_state, self._initial_core_state(env_ids.size)
    ):
      table[env_ids] = init
    self.prev_action[env_ids] = 0
    if self.stack is not None:
      self.stack[env_ids] = 0

  def gather(self, env_ids: np.ndarray) -> Tuple[CoreState, np.ndarray]:
    """Returns (core_state, prev_action) rows for `env_ids` (copies)."""
    return (
      tuple(t[env_ids] for t in self.core_state),
      self.prev_action[env_ids],
    )

  def scatter(
    self, env_ids: np.ndarray, core_state: CoreState, action: np.ndarray
  ) -> None:
    for table, value in zip(self.core_state, core_state):
      table[env_ids] = value
    self.prev_action[env_ids] = action

  def stacked(
    self, env_ids: np.ndarray, frames: np.ndarray, commit: bool = True
  ) -> np.ndarray:
    """Returns `[B, *stacked_shape]` observations with `frames` newest.

    commit=False computes the stack without storing it (for the final
    observation of a truncated episode, which no later frame follows).
    """
    if self.stack is None:
      return frames
    if self._packed:
      words = self.stack.view(np.uint32)[..., 0]  # [N, H, W], a view
      packed = (words[env_ids] >> 8) | (frames.astype(np.uint32) << 24)
      if commit:
        words[env_ids] = packed
      return packed[..., None].view(np.uint8)  # [B, H, W, 4]
    stacked = np.concatenate(
      [self.stack[env_ids, ..., 1:], frames[..., None]], axis=-1
    )
    if commit:
      self.stack[env_ids] = stacked
    return stacked


def stacked_observation_spec(spec: ArraySpec, frame_stack: int) -> ArraySpec:
  """The agent-side spec of observations stacked `frame_stack` deep."""
  if frame_stack == 1:
    return spec
  return spec.replace(
    shape=spec.shape + (frame_stack,), minimum=None, maximum=None
  )
