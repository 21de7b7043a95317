"""Actors run without TensorFlow: importing their modules must not load it."""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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


def test_actor_modules_do_not_import_tensorflow():
  # A fresh interpreter: this test process may already hold TensorFlow.
  script = (
    "import importlib, sys\n"
    f"for name in {ACTOR_MODULES!r}:\n"
    "  importlib.import_module(name)\n"
    "tf = ('tensorflow', 'keras', 'tf_keras', 'tensorflow_probability')\n"
    "loaded = sorted(m for m in sys.modules if m.split('.')[0] in tf)\n"
    "print('TF_MODULES=' + ','.join(loaded))\n"
  )
  proc = subprocess.run(
    [sys.executable, "-c", script],
    cwd=REPO,
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
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 0, proc.stderr
