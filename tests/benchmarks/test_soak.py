"""The soak's judgement of the fuzzer's CANCELLED calls
(benchmarks/soak.py): allowed only while a learner is stopping."""

import os
import sys

from tests.support import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import soak  # noqa: E402


def test_cancelled_calls_count_only_while_a_learner_stops():
  stops = [(100.0, 103.0), (500.0, 501.5)]
  fuzz = {
    "served": 5,
    "cancelled_at": [99.0, 102.0, 104.5, 501.0, 300.0],
    "unexpected": ["Step: INTERNAL: boom"],
  }
  judged = soak._cancelled_while_stopping(fuzz, stops)
  assert judged["served"] == 5 and "cancelled_at" not in judged
  # 99.0 and 104.5 are within the 2 s slack of the first stop.
  assert judged["cancelled_while_stopping"] == 4
  assert judged["unexpected"] == [
    "Step: INTERNAL: boom",
    "CANCELLED at 300.0 while no learner was stopping",
  ]


def test_without_restarts_every_cancelled_call_is_unexpected():
  judged = soak._cancelled_while_stopping({"cancelled_at": [10.0]}, [])
  assert judged["cancelled_while_stopping"] == 0
  assert len(judged["unexpected"]) == 1
