"""The learner's memory: RSS split into malloc's live and kept bytes, and the
start-up objects frozen out of the cyclic GC once training runs."""

import subprocess
import sys
import time

import numpy as np
import pytest

from seed_rl.common import memory
from seed_rl.common import metrics as metrics_lib
from seed_rl.common.learner import Learner
from seed_rl.common.learner_config import LearnerConfig
from seed_rl.common.reporting import Counters, Reporter
from seed_rl.common.specs import ArraySpec
from tests.support.recording_agent import RecordingAgent

needs_glibc = pytest.mark.skipif(
  memory.malloc_mib() is None, reason="mallinfo2 needs glibc 2.33 or later"
)


@needs_glibc
def test_a_live_array_shows_as_in_use_and_leaves_when_freed():
  before = memory.memory_scalars()
  # Touched pages, so RSS grows too; 64 MiB is above malloc's mmap
  # threshold, so freeing it hands the pages back at once.
  block = np.ones(64 << 20, np.uint8)
  held = memory.memory_scalars()
  grown = held["system/malloc_in_use_mib"] - before["system/malloc_in_use_mib"]
  assert 63.5 <= grown <= 66.0
  assert held["system/rss_mib"] - before["system/rss_mib"] >= 60.0
  del block
  after = memory.memory_scalars()
  assert after["system/malloc_in_use_mib"] == pytest.approx(
    before["system/malloc_in_use_mib"], abs=1.0
  )


def test_threads_fds_and_python_blocks_are_this_process():
  scalars = memory.memory_scalars()
  assert scalars["system/threads"] >= 1
  assert scalars["system/fds"] >= 3  # stdin, stdout, stderr at least
  kept = [object() for _ in range(10_000)]
  assert memory.memory_scalars()["system/python_blocks"] >= (
    scalars["system/python_blocks"] + 9_000
  )
  del kept


def test_every_report_carries_them():
  reporter = Reporter(LearnerConfig(), metrics_lib.EpisodeTracker())
  reporter.start(0.0, Counters())
  scalars = reporter.interval_scalars(1.0, Counters(env_steps=10))
  assert scalars["system/rss_mib"] > 0
  assert {"system/threads", "system/fds", "system/python_blocks"} <= set(
    scalars
  )


def test_frozen_objects_are_left_alone_and_later_cycles_collected():
  import gc
  import weakref

  class Node:
    pass

  old = Node()
  old.me = old  # a cycle alive at the freeze
  try:
    assert memory.freeze_long_lived() > 0
    old_ref = weakref.ref(old)
    del old
    new = Node()
    new.me = new  # a cycle made after it
    new_ref = weakref.ref(new)
    del new
    gc.collect()
    assert new_ref() is None  # collected
    assert old_ref() is not None  # frozen: the collector does not walk it
  finally:
    gc.unfreeze()
  gc.collect()
  assert old_ref() is None


def test_after_the_freeze_full_collections_come_without_waiting():
  import gc

  long_lived = [[i] for i in range(1_000_000)]  # as TensorFlow's objects
  gc.collect()
  try:
    memory.freeze_long_lived()
    before = gc.get_stats()[2]["collections"]
    survivors = []
    for _ in range(150_000):  # cycles that outlive the young collections
      cycle = []
      cycle.append(cycle)
      survivors.append(cycle)
      if len(survivors) > 20_000:
        survivors.clear()
    # Weighed against the 1M frozen objects (a quarter of them: 250k), these
    # ~150k would not start a full collection.
    assert gc.get_stats()[2]["collections"] > before
  finally:
    gc.unfreeze()
    del long_lived


class _CountingAgent(RecordingAgent):
  """Each train_step is one update (the step counter moves)."""

  def __init__(self, *args, first_step=0, trains=True):
    super().__init__(*args)
    self._step.value = first_step
    self._trains = trains

  def train_step(self):
    time.sleep(0.05)
    if self._trains:
      self._step.value += 1
    return {}


@pytest.mark.parametrize(
  "flag, first_step, trains, expected",
  [
    (True, 0, True, 1),  # once, after the first update
    (False, 0, True, 0),  # learners that share a process: never
    (True, 7, False, 0),  # resumed at step 7, no update yet: not before it
  ],
)
def test_learner_freezes_once_after_its_first_update(
  monkeypatch, flag, first_step, trains, expected
):
  calls = []
  monkeypatch.setattr(memory, "freeze_long_lived", lambda: calls.append(1))
  obs_spec = ArraySpec((1,), "float32")
  act_spec = ArraySpec((), "int32", num_values=2)
  agent = _CountingAgent(
    obs_spec, act_spec, 1, first_step=first_step, trains=trains
  )
  config = LearnerConfig(max_seconds=1.2, log_every_s=0.5)
  learner = Learner(agent, obs_spec, act_spec, 1, 0, config)
  learner.freeze_gc_after_first_update = flag
  assert learner.run() == "max_seconds 1.2 reached"
  assert len(calls) == expected


@needs_glibc
def test_summaries_of_ever_new_values_leave_no_native_memory(tmp_path):
  # Eager TensorFlow caches the tensor of every distinct Python number it
  # converts (never trimmed): 200 reports of 60 new values each kept
  # 7.3 MiB when the writer handed it Python floats.
  writer = metrics_lib.SummaryWriter(str(tmp_path))
  names = [f"group{i % 6}/scalar_{i}" for i in range(60)]

  def report(step):
    writer.write(step, {k: step * 100.0 + j + 0.5 for j, k in enumerate(names)})

  for step in range(20):  # the writer's own first allocations
    report(step)
  before = memory.malloc_mib()["in_use"]
  for step in range(20, 220):
    report(step)
  grown = memory.malloc_mib()["in_use"] - before
  writer.close()
  assert grown < 1.0, f"{grown:.2f} MiB kept by 12,000 summary values"


_MAPPED_PROBE = """
from seed_rl.common import memory
def mapped_by(mib):
  before = memory._MALLINFO2().hblkhd
  block = bytearray(int(mib * (1 << 20)))
  grown = memory._MALLINFO2().hblkhd - before
  del block
  return grown > 0
# Freeing a mapped chunk raises malloc's own threshold to its size, so
# each probe is larger than the last: 15.5 MiB would be mapped untuned.
print(mapped_by(14), mapped_by(15), memory.keep_large_buffers(), mapped_by(15.5))
"""


@needs_glibc
def test_keep_large_buffers_serves_message_sized_buffers_from_the_heap():
  # A fresh interpreter: mallopt's settings last for the whole process.
  out = subprocess.run(
    [sys.executable, "-c", _MAPPED_PROBE],
    capture_output=True,
    text=True,
    timeout=60,
    check=True,
  ).stdout.split()
  # Mapped fresh by default (malloc's threshold below each probe), from
  # the heap once the threshold is 16 MiB.
  assert out == ["True", "True", "True", "False"]


@pytest.mark.parametrize(
  "environ, left",
  [
    ({}, False),
    ({"SEED_RL_KEEP_LARGE_BUFFERS": "1", "PATH": "/bin"}, False),
    ({"SEED_RL_KEEP_LARGE_BUFFERS": "0"}, True),
    ({"MALLOC_TRIM_THRESHOLD_": "1048576"}, True),
    ({"MALLOC_ARENA_MAX": "2"}, False),  # not one of the three it sets
    ({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}, True),
    ({"GLIBC_TUNABLES": "glibc.rtld.nns=2"}, False),
  ],
)
def test_the_user_can_keep_mallocs_settings(environ, left):
  assert memory.malloc_left_to_user(environ) is left
