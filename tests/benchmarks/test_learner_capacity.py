"""benchmarks/learner_capacity.py against a real learner process, briefly:
the JSON line other tools read, and figures that can only come from a run
that served every stream (not a timing test)."""

from tests.support import ROOT
import json
import os
import subprocess
import sys

import pytest

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
FIELDS = (
  "model",
  "obs",
  "streams",
  "envs_per_message",
  "agent_steps_per_s",
  "learner_cpu_us_per_agent_step",
  "latency_p50_ms",
  "latency_p99_ms",
  "learner_rss_mib",
)


@pytest.mark.timeout(300)
def test_null_model_cartpole_prints_one_line_per_configuration():
  out = subprocess.run(
    [sys.executable, "benchmarks/learner_capacity.py", "--model", "null"]
    + ["--obs", "cartpole", "--streams", "3", "--envs_per_message", "1", "4"]
    + ["--seconds", "1", "--warmup", "0.5", "--quiet"],
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=280,
  )
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
  lines = [json.loads(s) for s in out.stdout.splitlines() if s.startswith("{")]
  assert [(x["streams"], x["envs_per_message"]) for x in lines] == [
    (3, 1),
    (3, 4),
  ]
  for line in lines:
    assert all(field in line for field in FIELDS), line
    assert line["model"] == "null" and line["obs"] == "cartpole"
    assert line["agent_steps_per_s"] > 0
    assert 0 < line["learner_cpu_us_per_agent_step"] < 1e6
    assert line["latency_p99_ms"] >= line["latency_p50_ms"] > 0
    assert line["learner_rss_mib"] > 50
    assert "grpc_handlers" in line["learner_cpu_us_by_thread"]
    assert "inference" in line["learner_cpu_us_by_thread"]


def test_configuration_too_big_for_memory_is_skipped_not_run():
  out = subprocess.run(
    [sys.executable, "benchmarks/learner_capacity.py", "--obs", "atari"]
    + ["--streams", "1024", "--envs_per_message", "64"]
    + ["--max_learner_gib", "0.5"],
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert out.returncode == 0, out.stderr[-2000:]
  line = json.loads(out.stdout.splitlines()[-1])
  assert line["streams"] == 1024 and "skipped" in line
