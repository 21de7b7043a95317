"""The dependency rule: actors and the TensorFlow-free runtime modules load
no TensorFlow, and the runtime (seed_rl.common) imports neither the
transport (seed_rl.grpc), nor agents, nor domains."""

from __future__ import annotations

from tests.support import ROOT
import ast
import glob
import os
import subprocess
import sys

import pytest

from seed_rl import common


ACTOR_MODULES = (
  "seed_rl.actors.main",
  "seed_rl.actors.actor",
  "seed_rl.actors.subprocess_env",
  "seed_rl.actors.dm_env_adapter",
  "seed_rl.classic.env",
  "seed_rl.atari.env",
  "seed_rl.mujoco.env",
  "seed_rl.grpc.client",
)

# What seed_rl/common/__init__.py lists as TensorFlow-free: specs, batching,
# per-env state, unroll assembly, replay, the learner loop itself.
TF_FREE_RUNTIME = tuple(f"seed_rl.common.{name}" for name in common.TF_FREE)


@pytest.mark.parametrize(
  "modules", [ACTOR_MODULES, TF_FREE_RUNTIME], ids=["actors", "runtime"]
)
def test_modules_do_not_import_tensorflow(modules):
  # A fresh interpreter: this test process may already hold TensorFlow.
  script = (
    "import importlib, sys\n"
    f"for name in {modules!r}:\n"
    "  importlib.import_module(name)\n"
    "tf = ('tensorflow', 'keras', 'tf_keras', 'tensorflow_probability')\n"
    "loaded = sorted(m for m in sys.modules if m.split('.')[0] in tf)\n"
    "print('TF_MODULES=' + ','.join(loaded))\n"
  )
  proc = subprocess.run(
    [sys.executable, "-c", script],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 0, proc.stderr
  line = [s for s in proc.stdout.splitlines() if s.startswith("TF_MODULES=")]
  assert line == ["TF_MODULES="], proc.stdout


def test_actor_env_creation_does_not_import_tensorflow():
  script = (
    "import sys\n"
    "import numpy as np\n"
    "from seed_rl.classic import env\n"
    "with env.create_environment(2, 0) as e:\n"
    "  e.reset()\n"
    "  e.step(np.zeros(2, np.int32))\n"
    "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
  )
  proc = subprocess.run(
    [sys.executable, "-c", script],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 0, proc.stderr


def test_tf_free_list_names_modules_that_exist():
  here = os.path.join(ROOT, "seed_rl", "common")
  missing = [
    name
    for name in common.TF_FREE
    if not os.path.exists(os.path.join(here, f"{name}.py"))
  ]
  assert not missing, f"seed_rl.common.TF_FREE names no module: {missing}"


def test_runtime_imports_no_transport_agent_or_domain():
  """seed_rl/common is wired to the server, agents and envs by the entry
  points (learner_main), never by importing them. Config plumbing (the
  registry, gin parsing) is fine."""
  allowed = ("seed_rl.common", "seed_rl.registry", "seed_rl.gin_utils")
  for path in glob.glob(os.path.join(ROOT, "seed_rl", "common", "*.py")):
    with open(path) as f:
      tree = ast.parse(f.read())
    for node in ast.walk(tree):
      names = []
      if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.module == "seed_rl":
        names = [f"seed_rl.{a.name}" for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.module:
        names = [node.module]
      for name in names:
        if name.startswith("seed_rl"):
          assert name.startswith(allowed), f"{path} imports {name}"
