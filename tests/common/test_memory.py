"""The learner's memory scalars: RSS split into malloc's live and kept bytes."""

import numpy as np
import pytest

from seed_rl.common import memory
from seed_rl.common import metrics as metrics_lib
from seed_rl.common.learner_config import LearnerConfig
from seed_rl.common.reporting import Counters, Reporter

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
