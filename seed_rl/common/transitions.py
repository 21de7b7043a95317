"""Unrolls -> n-step transitions in replay, for transition-replay agents.

`nstep_transitions` is the n-step return maths (termination vs truncation,
the bootstrap index and discount), tested against a loop reference in
tests/agents/dqn/test_dqn.py; `unroll_transitions` cuts unrolls into the per-transition
arrays that replay stores, and `TransitionReplay` holds them behind the rate
limiter, so every transition-replay agent (DQN, SAC, TD3/DDPG) stores the
same fields the same way. NumPy only.

With `n_step` steps of overlap between consecutive unrolls of one env (the
agent's `unroll_overlap`), every env step starts exactly one transition.

Unroll convention (seed_rl.common.agent_api.Unroll): step t holds
observation o_t, the action a_t taken on it, and the reward r_t and
episode-end flags of the transition INTO step t. So the n-step transition
starting at step t collects r_{t+1}, ..., r_{t+n} and bootstraps from
o_{t+n}, unless the episode ends at some step t+j, j <= n:
  terminated[t+j]: the return stops there, no bootstrap;
  truncated[t+j]: the return stops there and bootstraps from the ended
    episode's final observation. That observation is not in the unroll
    (o_{t+j} is already the next episode's first), so we use
    bootstrap_value[t+j], the behaviour value of it recorded at acting time,
    in return units. It is slightly stale (behaviour weights, online rather
    than target network), an accepted approximation since truncations are
    rare; bootstrapping from o_{t+j} would be wrong (another episode).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, Optional, Tuple

import numpy as np

from seed_rl.common import frames as frames_lib
from seed_rl.common import replay as replay_lib
from seed_rl.common.agent_api import Unroll, unroll_rows


def _check_time_major(name: str, array, shape) -> None:
  if tuple(array.shape) != tuple(shape):
    raise ValueError(
      f"{name}: shape {list(array.shape)}, expected "
      f"{list(shape)} (time-major [T+1, B])"
    )


def nstep_transitions(
  reward: np.ndarray,
  terminated: np.ndarray,
  truncated: np.ndarray,
  bootstrap_value: np.ndarray,
  discount: float,
  n_step: int,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """n-step returns for start steps 0..S-1, S = T+1-n_step.

  R2D2 applies the same episode-end rules in TensorFlow at training time
  (seed_rl.agents.r2d2.targets.n_step_targets), on purpose in another form:
  here the sums are fixed once per transition at insertion (float64, the
  truncation bootstrap in return units) and the network's bootstrap comes
  later from the stored next observation, while R2D2 bootstraps every
  window of a replayed sequence from that sequence's own LSTM unroll, in
  the rescaled space of its Q-values.

  Args:
    reward, terminated, truncated, bootstrap_value: [T+1, B] per the Unroll
      convention (time-major).
    discount: gamma in [0, 1].
    n_step: n >= 1; needs T+1 > n.

  Returns:
    returns: float32 [S, B] sum_{k<m} gamma^k r_{t+k+1}, plus
      gamma^m bootstrap_value[t+m] if the episode was truncated at t+m.
    bootstrap_discount: float32 [S, B] gamma^n when the network should
      bootstrap from the observation at `bootstrap_index`, else 0.
    bootstrap_index: int64 [S, B] step whose observation to bootstrap from
      (t+n, or the step where the episode ended; unused when the discount
      is 0).
  """
  if n_step < 1:
    raise ValueError(f"n_step must be >= 1, got {n_step}")
  if not 0.0 <= discount <= 1.0:
    raise ValueError(f"discount must lie in [0, 1], got {discount}")
  reward = np.asarray(reward, np.float64)
  if reward.ndim != 2:
    raise ValueError(f"reward: expected [T+1, B], got {list(reward.shape)}")
  for name, array in (
    ("terminated", terminated),
    ("truncated", truncated),
    ("bootstrap_value", bootstrap_value),
  ):
    _check_time_major(name, np.asarray(array), reward.shape)
  steps, batch = reward.shape
  num_starts = steps - n_step
  if num_starts < 1:
    raise ValueError(
      f"an unroll of {steps} steps holds no {n_step}-step "
      "transition; unroll_length must be >= n_step"
    )
  terminated = np.asarray(terminated, bool)
  truncated = np.asarray(truncated, bool)
  bootstrap_value = np.asarray(bootstrap_value, np.float64)
  returns = np.zeros((num_starts, batch))
  alive = np.ones((num_starts, batch), bool)
  index = np.zeros((num_starts, batch), np.int64)
  starts = np.arange(num_starts)[:, None]
  for j in range(1, n_step + 1):
    step = slice(j, j + num_starts)
    scale = discount ** (j - 1)
    returns += np.where(alive, scale * reward[step], 0.0)
    ended_here = alive & (terminated[step] | truncated[step])
    returns += np.where(
      alive & truncated[step], discount * scale * bootstrap_value[step], 0.0
    )
    index = np.where(ended_here, starts + j, index)
    alive &= ~ended_here
  index = np.where(alive, starts + n_step, index)
  bootstrap_discount = np.where(alive, discount**n_step, 0.0)
  return (
    returns.astype(np.float32),
    bootstrap_discount.astype(np.float32),
    index,
  )


def unroll_transitions(
  unrolls: Unroll,
  discount: float,
  n_step: int,
  action: Optional[np.ndarray] = None,
  reward: Optional[np.ndarray] = None,
  block_ids: Optional[np.ndarray] = None,
) -> Dict[str, np.ndarray]:
  """The n-step transitions starting at steps 0..T-n of each unroll.

  Args:
    unrolls: B unrolls of T+1 steps (the runtime's Unroll).
    discount: gamma in [0, 1].
    n_step: n >= 1 rewards per transition.
    action: [B, T+1, ...] the actions to store, when the agent stores them
      in another form than Unroll.action (e.g. rescaled to [-1, 1]); None
      stores Unroll.action.
    reward: float [B, T+1] rewards to sum (e.g. clipped); None uses
      Unroll.reward.
    block_ids: int64 [B] where the unrolls' frames were stored in a
      FrameBlockStore; then `block`, `step` and `next_step` (int32) stand in
      for `observation` and `next_observation`.

  Returns:
    name -> [B * S, ...], S = T+1-n, batch-major (env 0's transitions first,
    in time order):
      observation: the start observation o_t.
      action: the action taken on it.
      return: float32 sum_{k<m} gamma^k r_{t+k+1}, plus gamma^m times the
        stored bootstrap value where the episode was truncated at t+m.
      discount: float32 gamma^n where the learner bootstraps from
        next_observation, 0 where the episode ended (by termination or by
        truncation, whose bootstrap is already in `return`).
      next_observation: o_{t+n} (or the ended step's, unused at discount 0).
      policy_version: int64 learner step whose weights acted at step t.
  """
  action = unrolls.action if action is None else action
  reward = unrolls.reward if reward is None else reward
  returns, bootstrap_discount, index = nstep_transitions(
    np.asarray(reward, np.float32).T,
    np.asarray(unrolls.terminated).T,
    np.asarray(unrolls.truncated).T,
    np.asarray(unrolls.bootstrap_value, np.float32).T,
    discount,
    n_step,
  )
  batch, starts = unrolls.batch_size, returns.shape[0]
  rows = np.arange(batch)[:, None]

  def flat(x):
    return x.reshape((batch * starts,) + x.shape[2:])

  items = {
    "action": flat(np.asarray(action)[:, :starts]),
    "return": flat(returns.T),
    "discount": flat(bootstrap_discount.T),
    "policy_version": flat(
      np.asarray(unrolls.policy_version[:, :starts], np.int64)
    ),
  }
  if block_ids is None:
    items["observation"] = flat(unrolls.observation[:, :starts])
    items["next_observation"] = flat(unrolls.observation[rows, index.T])
  else:
    start_steps = np.broadcast_to(np.arange(starts), (batch, starts))
    items["block"] = np.repeat(np.asarray(block_ids, np.int64), starts)
    items["step"] = flat(start_steps).astype(np.int32)
    items["next_step"] = flat(index.T).astype(np.int32)
  return items


class TransitionReplay:
  """Replay of n-step transitions behind a rate limiter (learner side).

  What the transition-replay agents (DQN, SAC, TD3/DDPG) share: `add` cuts
  unrolls into transitions, inserts them, then waits while training lags
  (back-pressure on acting); `sample` waits until the replay ratio allows a
  batch. Uniform sampling unless `prioritized` (DQN's PER).

  With `frame_stack_shape` ([H, W, k] uint8 stacks, the runtime's Atari
  layout) each unroll's frames are stored once in a FrameBlockStore and
  transitions point into it: ~(T+k)/(T+1-n) frames per transition instead
  of 2k, rebuilt into stacks when sampled.

  Args:
    capacity: stored transitions (FIFO beyond it).
    batch_size: transitions per `sample`.
    min_replay_size: transitions inserted before the first sample.
    samples_per_insert: sampled transitions per inserted one.
    error_buffer: allowed drift from that ratio, in sampled transitions;
      None picks max(batch_size, samples_per_insert * one round of unrolls
      from every env).
    num_envs, unroll_length: the runtime's envs and T (for that default).
    discount, n_step: gamma and n of the stored returns.
    seed: seed of the sampler.
    prioritized, priority_exponent, importance_sampling_exponent:
      proportional prioritized replay (PrioritizedReplay's alpha and beta).
    frame_stack_shape: [H, W, k] to store frames once; None stores
      observations as they come.
  """

  def __init__(  # noqa: PLR0913 (the replay's settings, each documented)
    self,
    capacity: int,
    batch_size: int,
    min_replay_size: int,
    samples_per_insert: float,
    error_buffer: Optional[float],
    num_envs: int,
    unroll_length: int,
    discount: float,
    n_step: int,
    seed: Optional[int] = None,
    prioritized: bool = False,
    priority_exponent: float = 0.5,
    importance_sampling_exponent: float = 0.4,
    frame_stack_shape: Optional[Tuple[int, ...]] = None,
  ):
    self.batch_size = int(batch_size)
    self.discount, self.n_step = float(discount), int(n_step)
    self.replay = replay_lib.PrioritizedReplay(
      capacity,
      priority_exponent=priority_exponent,
      importance_sampling_exponent=importance_sampling_exponent,
      uniform=not prioritized,
      seed=seed,
    )
    per_unroll = unroll_length + 1 - n_step
    if error_buffer is None:
      error_buffer = max(
        float(batch_size), samples_per_insert * num_envs * per_unroll
      )
    self.limiter = replay_lib.RateLimiter(
      samples_per_insert, min_replay_size, error_buffer
    )
    self.frames: Optional[frames_lib.FrameBlockStore] = None
    if frame_stack_shape is not None:
      *frame_shape, depth = frame_stack_shape
      self.frames = frames_lib.FrameBlockStore(
        frames_lib.FrameBlockStore.blocks_for(capacity, per_unroll),
        unroll_length + 1,
        tuple(frame_shape),
        depth,
      )
    self.dropped_unrolls = 0
    # The frame ring and the replay advance together under this lock, and
    # a sample is rebuilt into stacks under it too: otherwise an insert on
    # the inference thread between `replay.sample` and `frames.stacks` on
    # the training thread overwrites the blocks of the oldest sampled
    # transitions (it did, once a 500k replay had filled: benchmarks/
    # RESULTS.md, "Pong DQN sized for 2 cores").
    self._frames_lock = threading.Lock()

  def add(
    self,
    unrolls: Unroll,
    action: Optional[np.ndarray] = None,
    reward: Optional[np.ndarray] = None,
  ) -> int:
    """Stores the unrolls' transitions (see `unroll_transitions`), then
    waits while training lags; returns how many were stored."""
    block_ids = None
    if self.frames is not None:
      done = np.asarray(unrolls.terminated) | np.asarray(unrolls.truncated)
      ok = frames_lib.roundtrip_ok(unrolls.observation, done)
      if not ok.all():
        # Stacks that do not follow the runtime's layout (zeros before an
        # episode start) would be rebuilt wrongly: skip them, loudly.
        self.dropped_unrolls += int((~ok).sum())
        logging.warning(
          "replay: dropped %d unrolls (env ids %s) whose frame stacks do not "
          "follow the [older..newest, zeros before episode start] layout",
          int((~ok).sum()),
          np.asarray(unrolls.env_ids)[~ok].tolist(),
        )
        unrolls, done = unroll_rows(unrolls, ok), done[ok]
        action = None if action is None else np.asarray(action)[ok]
        reward = None if reward is None else np.asarray(reward)[ok]
        if unrolls.batch_size == 0:
          return 0
    with self._frames_lock:
      if self.frames is not None:
        block_ids = self.frames.insert(unrolls.observation, done)
      items = unroll_transitions(
        unrolls,
        self.discount,
        self.n_step,
        action=action,
        reward=reward,
        block_ids=block_ids,
      )
      self.replay.insert(items)
    num = int(items["return"].shape[0])
    # Insert first, then wait: the limiter never counts transitions the
    # replay does not hold yet, and acting still pauses while training lags.
    self.limiter.await_insert(num)
    return num

  def sample_with_keys(
    self,
  ) -> Optional[Tuple[np.ndarray, Dict[str, np.ndarray], np.ndarray]]:
    """(keys [b], items name -> [b, ...], importance weights [b]), or None
    once stopped; items hold `observation` and `next_observation` either
    way."""
    if not self.limiter.await_sample(self.batch_size):
      return None
    with self._frames_lock:
      keys, items, weights = self.replay.sample(self.batch_size)
      if self.frames is not None:
        block = items.pop("block")
        items["observation"] = self.frames.stacks(block, items.pop("step"))
        items["next_observation"] = self.frames.stacks(
          block, items.pop("next_step")
        )
    return keys, items, weights

  def sample(self) -> Optional[Dict[str, np.ndarray]]:
    """A batch (name -> [batch_size, ...]), or None once stopped."""
    sampled = self.sample_with_keys()
    return None if sampled is None else sampled[1]

  def _state_parts(self) -> Dict[str, Any]:
    """What `state_dict` saves, by name: each has its own state_dict."""
    parts: Dict[str, Any] = {"replay": self.replay, "limiter": self.limiter}
    if self.frames is not None:
      parts["frames"] = self.frames
    return parts

  def state_dict(self) -> Dict[str, np.ndarray]:
    """The replay, its limiter's counts and the frame blocks, taken
    together (name -> array; see PrioritizedReplay.state_dict)."""
    with self._frames_lock:
      parts = self._state_parts()
      return {
        f"{name}/{key}": value
        for name, part in parts.items()
        for key, value in part.state_dict().items()
      } | {"dropped_unrolls": np.asarray(self.dropped_unrolls, np.int64)}

  def load_state_dict(self, state: Dict[str, np.ndarray]) -> None:
    """Resumes a `state_dict` of a replay with the same settings."""
    has_frames = any(key.startswith("frames/") for key in state)
    if has_frames != (self.frames is not None):
      raise ValueError(
        "the saved replay "
        + ("stores frames once" if has_frames else "stores observations")
        + ", this run's "
        + ("stores frames once" if self.frames else "stores observations")
      )
    with self._frames_lock:
      for name, part in self._state_parts().items():
        part.load_state_dict(replay_lib.sub_state(state, name))
      self.dropped_unrolls = int(state["dropped_unrolls"])

  def metrics(self) -> Dict[str, float]:
    result = self.limiter.metrics()
    result["replay/size"] = float(len(self.replay))
    if self.frames is not None:
      result["replay/dropped_unrolls"] = float(self.dropped_unrolls)
    return result

  def stop(self) -> None:
    self.limiter.stop()
