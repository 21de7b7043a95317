"""A domain and an agent added from outside seed_rl (tests/plugins/toy_domain,
tests/plugins/toy_agent), with no change to shared code, as README's recipes say:
the real launcher, learner and actor processes find them by package path."""

from tests.support import ROOT
import json
import os
import subprocess
import sys

import pytest

from seed_rl import registry

ENV = dict(
  os.environ,
  TF_CPP_MIN_LOG_LEVEL="3",
  PYTHONUNBUFFERED="1",
  PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
)


def _train(args, logdir, timeout=240):
  out = subprocess.run(
    [sys.executable, "-m", "seed_rl.train"] + args + ["--logdir", logdir],
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=timeout,
  )
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  with open(os.path.join(logdir, "result.json")) as f:
    return json.load(f)


def test_toy_domain_learns_with_a_builtin_agent(tmp_path):
  result = _train(
    [
      "tests.plugins.toy_domain",
      "vtrace",
      "2",
      "4",
      "--target_return",
      "0.9",
      "--max_seconds",
      "90",
    ],
    str(tmp_path / "run"),
  )
  assert result["solved"], result  # optimal return 0.96


def test_toy_agent_learns_on_a_builtin_domain(tmp_path):
  result = _train(
    [
      "classic",
      "tests.plugins.toy_agent",
      "2",
      "8",
      "--target_return",
      "60",
      "--max_seconds",
      "90",
    ],
    str(tmp_path / "run"),
  )
  assert result["solved"], result  # a random policy scores about 22


def test_registry_finds_plugin_gin_files_on_either_side():
  here = os.path.dirname(os.path.abspath(__file__))
  assert registry.gin_file(
    "tests.plugins.toy_domain", "vtrace"
  ) == os.path.join(here, "toy_domain", "gin", "vtrace.gin")
  assert registry.gin_file(
    "classic", "tests.plugins.toy_agent"
  ) == os.path.join(here, "toy_agent", "gin", "classic.gin")
  registry.check_pair("tests.plugins.toy_domain", "vtrace")
  with pytest.raises(ValueError, match="no configuration for agent 'ppo'"):
    registry.check_pair("tests.plugins.toy_domain", "ppo")
  with pytest.raises(ValueError, match="cannot be found"):
    registry.check_pair("tests.no_such_domain", "vtrace")
