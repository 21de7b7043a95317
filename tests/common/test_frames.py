"""FrameBlockStore (DQN's frames stored once); compress/decompress are
tested with R2D2 in test_r2d2.py."""

import threading

import numpy as np
import pytest

from seed_rl.common import frames as frames_lib
from seed_rl.common import transitions
from seed_rl.common.agent_api import Unroll
from tests.support.helpers import runtime_stacks


def test_block_store_rebuilds_every_stack():
  rng = np.random.default_rng(1)
  store = frames_lib.FrameBlockStore(4, steps=9, frame_shape=(12, 12), depth=4)
  obs, done = runtime_stacks(rng, 3, 9, size=12)
  ids = store.insert(obs, done)
  assert ids.tolist() == [0, 1, 2]
  b, t = np.meshgrid(np.arange(3), np.arange(9), indexing="ij")
  rebuilt = store.stacks(ids[b.ravel()], t.ravel())
  np.testing.assert_array_equal(rebuilt, obs.reshape((27, 12, 12, 4)))
  # About one frame per step (plus the k-1 of step 0 per block), for 4
  # blocks where 3 are used: under half of the stacks' bytes.
  assert store.nbytes < obs.nbytes / 2


def test_block_store_refuses_overwritten_blocks():
  rng = np.random.default_rng(2)
  store = frames_lib.FrameBlockStore(2, steps=5, frame_shape=(3, 3), depth=4)
  for _ in range(2):
    obs, done = runtime_stacks(rng, 2, 5)
    ids = store.insert(obs, done)
  assert ids.tolist() == [2, 3] and store.oldest_alive() == 2
  np.testing.assert_array_equal(
    store.stacks(np.array([3]), np.array([4]))[0], obs[1, 4]
  )
  with pytest.raises(ValueError, match="not all alive"):
    store.stacks(np.array([1]), np.array([0]))
  with pytest.raises(ValueError, match="expected"):
    store.insert(obs[:, :4], done[:, :4])


def test_blocks_for_keeps_fifo_items_alive():
  # 10 items per block, FIFO of 95 items: after any number of inserts the
  # live items span at most 11 blocks, and one more is being written.
  assert frames_lib.FrameBlockStore.blocks_for(95, 10) == 12


def _unroll_of(obs, done, rng):
  batch, steps = done.shape
  by_termination = rng.random((batch, steps)) < 0.5
  return Unroll(
    env_ids=np.arange(batch, dtype=np.int32),
    observation=obs,
    reward=rng.normal(size=(batch, steps)).astype(np.float32),
    terminated=done & by_termination,
    truncated=done & ~by_termination,
    bootstrap_value=np.zeros((batch, steps), np.float32),
    prev_action=np.zeros((batch, steps), np.int32),
    action=rng.integers(0, 3, (batch, steps)).astype(np.int32),
    value=np.zeros((batch, steps), np.float32),
    extras={},
    core_state=(),
    policy_version=np.zeros((batch, steps), np.int64),
  )


def _replay(frame_stack_shape, capacity=100):
  return transitions.TransitionReplay(
    capacity,
    batch_size=8,
    min_replay_size=8,
    samples_per_insert=1e6,  # never makes add() wait
    error_buffer=1e9,
    num_envs=3,
    unroll_length=8,
    discount=0.9,
    n_step=2,
    seed=0,
    frame_stack_shape=frame_stack_shape,
  )


def test_transition_replay_stores_frames_once_and_rebuilds_the_same_items():
  """Frames once vs whole stacks: the same transitions, slot for slot, over
  more unrolls than the replay holds (FIFO eviction of blocks included)."""
  rng = np.random.default_rng(3)
  once, whole = _replay((12, 12, 4)), _replay(None)
  for _ in range(8):  # 8 x 3 unrolls x 7 transitions > capacity 100
    obs, done = runtime_stacks(rng, 3, 9, size=12)
    unroll = _unroll_of(obs, done & (np.arange(9) > 0), rng)
    # Step 0's flags describe the previous unroll's last transition; keep
    # them out so the stacks follow the runtime's layout.
    assert once.add(unroll) == whole.add(unroll) == 21
  stored = once.replay._storage
  plain = whole.replay._storage
  assert "observation" not in stored and "block" in stored
  assert once.frames is not None
  for name, step in (
    ("observation", "step"),
    ("next_observation", "next_step"),
  ):
    np.testing.assert_array_equal(
      once.frames.stacks(stored["block"], stored[step]), plain[name]
    )
  for name in ("action", "return", "discount"):
    np.testing.assert_array_equal(stored[name], plain[name])
  keys, items, _ = once.sample_with_keys()
  assert items["observation"].shape == (8, 12, 12, 4)
  slots = keys % 100
  np.testing.assert_array_equal(
    items["observation"], plain["observation"][slots]
  )
  # Memory: blocks of 9 + 3 frames per 7 transitions (1.7 frames; 2 spare
  # blocks at this tiny capacity) vs 2 stacks of 4 frames each (8).
  assert once.frames.nbytes < 0.3 * 2 * plain["observation"].nbytes


def test_transition_replay_drops_unrolls_with_a_foreign_stack_layout():
  rng = np.random.default_rng(4)
  replay = _replay((12, 12, 4))
  obs, done = runtime_stacks(rng, 3, 9, size=12)
  obs[1, 5, ..., 0] ^= 1  # an older slot disagreeing with an earlier frame
  unroll = _unroll_of(obs, done & (np.arange(9) > 0), rng)
  assert replay.add(unroll) == 14
  assert replay.metrics()["replay/dropped_unrolls"] == 1.0


def test_an_insert_cannot_evict_the_blocks_of_a_batch_being_rebuilt():
  """The race that stopped a 500k-transition Pong DQN run once its replay
  had filled: the inference thread inserted a round of unrolls between the
  training thread's `replay.sample` and its `frames.stacks`, overwriting the
  blocks of the oldest sampled transitions. Here the insert is started
  from inside `stacks`, on another thread, so it lands exactly in that
  window; it must wait until the batch is rebuilt."""
  rng = np.random.default_rng(5)
  # Two blocks' worth of transitions (7 per unroll): the ring holds 4 blocks,
  # and one add of 4 unrolls overwrites every block the replay then holds.
  replay = _replay((12, 12, 4), capacity=14)
  assert replay.frames is not None

  def round_of_unrolls():
    obs, done = runtime_stacks(rng, 4, 9, size=12)
    return _unroll_of(obs, done & (np.arange(9) > 0), rng)

  replay.add(round_of_unrolls())
  store = replay.frames
  real_stacks = store.stacks
  writer = threading.Thread(target=replay.add, args=(round_of_unrolls(),))

  def stacks_with_an_insert_racing(ids, steps):
    if writer.ident is None:  # only on the first call (observation)
      writer.start()
      writer.join(timeout=1.0)  # it finishes here unless add() must wait
    return real_stacks(ids, steps)

  store.stacks = stacks_with_an_insert_racing  # type: ignore[method-assign]
  _, items, _ = replay.sample_with_keys()  # raised "not all alive" before
  writer.join(timeout=10.0)
  assert not writer.is_alive()
  assert items["observation"].shape == (8, 12, 12, 4)
  # The insert did land afterwards, and the next sample sees its blocks.
  assert store.oldest_alive() == 4
  store.stacks = real_stacks  # type: ignore[method-assign]
  replay.sample_with_keys()
