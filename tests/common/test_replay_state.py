"""Replay saved with a checkpoint and put back: the replay, its limiter, the
frame blocks and transition replay continue exactly as the originals would;
mismatched settings and unreadable archives are named."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from seed_rl.common import replay_state
from seed_rl.common.checkpoints import Checkpointer
from seed_rl.common.frames import FrameBlockStore
from seed_rl.common.replay import PrioritizedReplay, RateLimiter
from seed_rl.common.agent_api import Unroll
from seed_rl.common.transitions import TransitionReplay
from tests.support.helpers import runtime_stacks


def _items(rng, n, start=0):
  return {
    "obs": rng.integers(0, 255, (n, 3, 2), dtype=np.uint8),
    "value": np.arange(start, start + n, dtype=np.float32),
  }


def _filled(capacity, inserts, uniform=False, seed=0):
  """A replay after `inserts` batches of 5, some samples and priority
  updates; with the keys of its last sample."""
  rng = np.random.default_rng(seed)
  replay = PrioritizedReplay(capacity, 0.7, 0.5, uniform=uniform, seed=3)
  keys = None
  for i in range(inserts):
    replay.insert(_items(rng, 5, 5 * i), rng.uniform(0.1, 2.0, 5))
    keys, _, _ = replay.sample(4)
    replay.update_priorities(keys, rng.uniform(0.1, 3.0, 4))
  return replay, keys


def _same_future(a, b, keys):
  """Both replays answer the same sequence of calls identically."""
  rng = np.random.default_rng(7)
  for step in range(6):
    ka, ia, wa = a.sample(8)
    kb, ib, wb = b.sample(8)
    np.testing.assert_array_equal(ka, kb)
    np.testing.assert_array_equal(wa, wb)
    for name in ia:
      np.testing.assert_array_equal(ia[name], ib[name])
    priorities = rng.uniform(0.1, 4.0, 8)
    a.update_priorities(ka, priorities)
    b.update_priorities(kb, priorities)
    if keys is not None:  # keys sampled before the save still count
      a.update_priorities(keys, np.full(keys.shape, 5.0))
      b.update_priorities(keys, np.full(keys.shape, 5.0))
      keys = None
    new = _items(rng, 3, 1000 + 3 * step)
    a.insert(new)
    b.insert(new)
  assert len(a) == len(b) and a.max_priority == b.max_priority


@pytest.mark.parametrize(
  "capacity,inserts,uniform",
  [(64, 3, False), (12, 9, False), (12, 9, True), (10, 0, False)],
  ids=["partly-filled", "wrapped", "uniform", "empty"],
)
def test_a_restored_replay_continues_as_the_original(
  capacity, inserts, uniform
):
  original, keys = _filled(capacity, inserts, uniform)
  state = original.state_dict()
  assert not any(np.asarray(v).dtype == object for v in state.values())
  restored = PrioritizedReplay(capacity, 0.7, 0.5, uniform=uniform, seed=99)
  restored.load_state_dict(state)
  assert len(restored) == len(original)
  if inserts == 0:
    assert len(restored) == 0
    return
  _same_future(original, restored, keys)


@pytest.mark.parametrize(
  "change",
  [
    dict(capacity=13),
    dict(priority_exponent=0.6),
    dict(uniform=True),
  ],
)
def test_a_replay_with_other_settings_is_refused_by_name(change):
  original, _ = _filled(12, 4)
  settings = dict(capacity=12, priority_exponent=0.7, uniform=False) | change
  other = PrioritizedReplay(**settings)
  with pytest.raises(ValueError, match=next(iter(change))):
    other.load_state_dict(original.state_dict())
  assert len(other) == 0


def test_the_limiter_resumes_its_ratio():
  limiter = RateLimiter(2.0, 10, 8.0)
  limiter.await_insert(15, timeout=0)  # counts them; training lags
  assert limiter.await_sample(8, timeout=0)
  resumed = RateLimiter(2.0, 10, 8.0)
  resumed.load_state_dict(limiter.state_dict())
  assert (resumed.num_inserted, resumed.num_sampled) == (15, 8)
  # Slack (15 - 10) * 2 - 8 = 2: a batch of 8 is allowed (2 - 8 >= -8)
  # with no new insert, as it would be in the original.
  assert resumed.await_sample(8, timeout=0)
  assert not resumed.await_sample(8, timeout=0)


def test_frame_blocks_are_rebuilt_the_same_after_a_restore():
  rng = np.random.default_rng(0)
  store = FrameBlockStore(capacity=5, steps=4, frame_shape=(3, 3), depth=2)
  for _ in range(7):  # wraps the ring of 5
    frames = rng.integers(0, 255, (2, 5, 3, 3), dtype=np.uint8)
    stacks = np.stack([frames[:, :-1], frames[:, 1:]], axis=-1)
    done = rng.random((2, 4)) < 0.3
    store.insert(stacks, done)
  restored = FrameBlockStore(capacity=5, steps=4, frame_shape=(3, 3), depth=2)
  restored.load_state_dict(store.state_dict())
  ids = np.arange(store.oldest_alive(), 14)
  steps = ids % 4
  np.testing.assert_array_equal(
    restored.stacks(ids, steps), store.stacks(ids, steps)
  )
  other = FrameBlockStore(capacity=6, steps=4, frame_shape=(3, 3), depth=2)
  with pytest.raises(ValueError, match="capacity, unroll length"):
    other.load_state_dict(store.state_dict())


def _transition_replay(**kwargs):
  settings = dict(
    capacity=40,
    batch_size=6,
    min_replay_size=10,
    samples_per_insert=1.0,
    error_buffer=100.0,
    num_envs=2,
    unroll_length=5,
    discount=0.9,
    n_step=2,
    seed=1,
    prioritized=True,
    frame_stack_shape=(4, 4, 3),
  )
  return TransitionReplay(**(settings | kwargs))


def _frame_unroll(rng, batch=2, steps=6, depth=3):
  """Unrolls of [B, T+1, 4, 4, k] stacks in the runtime's layout."""
  obs, done = runtime_stacks(rng, batch, steps, depth=depth, size=4)
  zeros = np.zeros((batch, steps), np.float32)
  return Unroll(
    env_ids=np.arange(batch, dtype=np.int32),
    observation=obs,
    reward=rng.normal(size=(batch, steps)).astype(np.float32),
    terminated=done,
    truncated=np.zeros_like(done),
    bootstrap_value=zeros,
    prev_action=np.zeros((batch, steps), np.int32),
    action=rng.integers(0, 3, (batch, steps)).astype(np.int32),
    value=zeros,
    extras={},
    core_state=(),
    policy_version=np.zeros((batch, steps), np.int64),
  )


def test_transition_replay_with_frames_samples_the_same_after_a_restore():
  rng = np.random.default_rng(0)
  original = _transition_replay()
  for _ in range(12):  # 4 transitions per unroll and env: wraps capacity 40
    original.add(_frame_unroll(rng))
  state = original.state_dict()
  restored = _transition_replay(seed=5)
  restored.load_state_dict(state)
  for _ in range(3):
    a, b = original.sample_with_keys(), restored.sample_with_keys()
    for x, y in zip(a, b):
      if isinstance(x, dict):
        for name in x:
          np.testing.assert_array_equal(x[name], y[name])
      else:
        np.testing.assert_array_equal(x, y)
  without_frames = _transition_replay(frame_stack_shape=None)
  with pytest.raises(ValueError, match="stores frames once"):
    without_frames.load_state_dict(state)


class _Holder:
  """What the Checkpointer needs of an agent that keeps a replay."""

  keeps_replay = True

  def __init__(self, replay):
    self.replay = replay

  def replay_state(self):
    return self.replay.state_dict()

  def load_replay_state(self, state):
    self.replay.load_state_dict(state)


def _variables():
  return {"w": tf.Variable(np.zeros(2, np.float32))}


def test_checkpoints_carry_the_replay_and_delete_it_with_them(tmp_path):
  d = str(tmp_path / "ckpt")
  original, _ = _filled(12, 5)
  lines = []
  ckpt = Checkpointer(
    d, _variables(), max_to_keep=2, replay=_Holder(original), log=lines.append
  )
  paths = [ckpt.save(env_steps=i) for i in range(3)]
  names = sorted(os.listdir(d))
  assert [n for n in names if n.endswith(replay_state.SUFFIX)] == [
    os.path.basename(p) + replay_state.SUFFIX for p in paths[1:]
  ]
  assert ckpt.replay_written.bytes == os.path.getsize(
    replay_state.path_for(paths[-1])
  )
  assert "replay saved with ckpt-3" in lines[-1]
  restored = PrioritizedReplay(12, 0.7, 0.5, seed=0)
  resumer = Checkpointer(
    d, _variables(), replay=_Holder(restored), log=lines.append
  )
  assert resumer.restore() == paths[-1]
  assert "replay restored from" in lines[-1]
  _same_future(original, restored, None)


def test_an_unreadable_archive_resumes_with_an_empty_replay(tmp_path):
  d = str(tmp_path / "ckpt")
  original, _ = _filled(12, 5)
  path = Checkpointer(d, _variables(), replay=_Holder(original)).save(1)
  archive = replay_state.path_for(path)
  with open(archive, "r+b") as f:
    f.truncate(os.path.getsize(archive) // 2)
  lines = []
  restored = PrioritizedReplay(12, 0.7, 0.5)
  resumer = Checkpointer(
    d, _variables(), replay=_Holder(restored), log=lines.append
  )
  assert resumer.restore() == path  # the networks are intact
  assert len(restored) == 0
  assert "cannot be read" in lines[-1] and "replay starts empty" in lines[-1]


def test_a_replay_that_does_not_fit_stops_the_resume_with_the_way_out(
  tmp_path,
):
  d = str(tmp_path / "ckpt")
  original, _ = _filled(12, 5)
  Checkpointer(d, _variables(), replay=_Holder(original)).save(1)
  bigger = PrioritizedReplay(24, 0.7, 0.5)
  resumer = Checkpointer(d, _variables(), replay=_Holder(bigger))
  with pytest.raises(ValueError, match="checkpoint_replay = False") as e:
    resumer.restore()
  assert "capacity" in str(e.value)


def test_a_checkpoint_without_replay_resumes_with_an_empty_one(tmp_path):
  d = str(tmp_path / "ckpt")
  path = Checkpointer(d, _variables()).save(1)
  lines = []
  replay = PrioritizedReplay(12, 0.7, 0.5)
  resumer = Checkpointer(
    d, _variables(), replay=_Holder(replay), log=lines.append
  )
  assert resumer.restore() == path
  assert "has no saved replay" in lines[-1] and len(replay) == 0


def test_archives_hold_no_objects_and_load_without_pickle(tmp_path):
  with pytest.raises(ValueError, match="Python objects"):
    replay_state.write(
      str(tmp_path / "x.npz"), lambda: {"bad": np.array([{}], object)}
    )
  assert not os.listdir(tmp_path)
  written = replay_state.write(
    str(tmp_path / "ok.npz"), lambda: _filled(12, 2)[0].state_dict()
  )
  state = replay_state.read(written.path)
  assert str(state["rng"]).startswith("{")
