"""benchmarks/many_actors.py: a small real run (8 actors), and its checks."""

from tests.support import ROOT
import importlib.util
import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(ROOT, "benchmarks", "many_actors.py")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
FIELDS = (
  "actors",
  "connected",
  "connect_s",
  "max_min_env_steps_ratio",
  "ended_by_itself",
  "leftover_processes",
  "learner_rss_mib",
  "learner_cpu_us_per_agent_step",
  "env_steps",
  "actor_pss_mib_total",
  "actor_cpu_us_per_agent_step",
  "actor_exit_s_after_stop",
)


# ~30-35 s on the idle 2-core machine (learner start ~8 s, its 20 s run,
# the exits), ~50 s at nice 19 beside other work; the timeout only catches
# a hang.
@pytest.mark.timeout(120)
def test_eight_actors_connect_are_served_and_end_by_themselves():
  out = subprocess.run(
    [sys.executable, SCRIPT, "--actors", "8", "--seconds", "10"]
    + ["--connect_timeout_s", "10"],
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=110,
  )
  assert out.stdout.strip(), out.stderr[-3000:]
  result = json.loads(out.stdout.strip().splitlines()[-1])
  assert out.returncode == 0, (result["failures"], out.stderr[-3000:])
  for field in FIELDS:
    assert result.get(field) is not None, (field, result)
  assert result["passed"] and result["failures"] == []
  assert result["actors"] == result["connected"] == 8
  assert result["connect_s"] <= 10
  assert 1 <= result["max_min_env_steps_ratio"] <= 3
  assert result["ended_by_itself"] and result["actor_exit_codes"] == {"0": 8}
  assert result["leftover_processes"] == 0
  assert result["learner_stop_reason"].startswith("max_seconds")
  assert result["learner_rss_mib"]["peak"] >= result["learner_rss_mib"]["final"]
  assert result["learner_cpu_us_per_agent_step"] > 0
  # The actors' own counts and the learner's agree (the actors' stats files
  # lag by up to their 1 s write interval).
  assert 0.7 * result["learner_env_steps"] <= result["env_steps"]
  assert result["env_steps"] <= 1.05 * result["learner_env_steps"]
  assert "learner serving" in out.stderr


def _load():
  spec = importlib.util.spec_from_file_location("many_actors", SCRIPT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_checks_name_each_failure():
  checks = _load()._checks
  good = {
    "actors": 4,
    "connected": 4,
    "connect_s": 3.0,
    "connect_timeout_s": 10.0,
    "max_min_env_steps_ratio": 1.2,
    "ended_by_itself": True,
    "leftover_processes": 0,
    "learner_exit_code": 0,
    "learner_stop_reason": "max_seconds 20 reached",
    "actor_exit_codes": {"0": 4},
  }
  assert checks(good) == []
  bad = dict(
    good,
    connected=3,
    connect_s=None,  # one never connected
    max_min_env_steps_ratio=None,  # an actor made no step in the window
    ended_by_itself=False,
    leftover_processes=2,
  )
  failures = checks(bad)
  assert len(failures) == 4
  assert "3/4 actors connected within 10 s" in failures[0]
  assert "ratio None" in failures[1]
  assert "did not end by itself" in failures[2]
  assert "2 leftover processes" in failures[3]
  assert "ratio 3.5" in checks(dict(good, max_min_env_steps_ratio=3.5))[0]
