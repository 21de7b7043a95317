"""scripts/setup_env.sh picks the newest Python TensorFlow 2.21 supports.

Fake interpreters on an otherwise empty PATH report a version each; the
script (SEED_RL_PICK_PYTHON_ONLY=1) must pick the newest one in 3.10-3.13,
skip newer or older ones, honour $PYTHON and fail with a clear message when
nothing fits.
"""

from tests.support import ROOT
import os
import shutil
import subprocess

SCRIPT = os.path.join(ROOT, "scripts", "setup_env.sh")


def _pick(tmp_path, versions, python=None):
  bin_dir = tmp_path / f"bin{len(list(tmp_path.iterdir()))}"
  bin_dir.mkdir()
  for name in ("sha256sum", "cut", "cat", "dirname"):
    os.symlink(shutil.which(name), bin_dir / name)
  for name, version in versions.items():
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
  env = {"PATH": str(bin_dir), "SEED_RL_PICK_PYTHON_ONLY": "1"}
  if python:
    env["PYTHON"] = python
  return subprocess.run(
    [shutil.which("bash"), SCRIPT],
    capture_output=True,
    text=True,
    env=env,
    timeout=30,
  )


def test_picks_newest_supported(tmp_path):
  proc = _pick(
    tmp_path,
    {
      "python3.14": "3.14",
      "python3.12": "3.12",
      "python3.10": "3.10",
      "python3": "3.9",
    },
  )
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.split() == ["python3.12", "3.12"]


def test_falls_back_to_python3(tmp_path):
  proc = _pick(tmp_path, {"python3": "3.13"})
  assert proc.stdout.split() == ["python3", "3.13"]


def test_python_variable_is_checked(tmp_path):
  proc = _pick(tmp_path, {"python3.11": "3.11", "mypy3": "3.9"}, "mypy3")
  assert proc.returncode != 0
  assert "PYTHON=mypy3 is Python 3.9" in proc.stderr
  proc = _pick(tmp_path, {"python3.11": "3.11", "py13": "3.13"}, "py13")
  assert proc.stdout.split() == ["py13", "3.13"]


def test_nothing_fits(tmp_path):
  proc = _pick(tmp_path, {"python3.9": "3.9", "python3": "3.14"})
  assert proc.returncode != 0
  assert "needs Python 3.10 to 3.13" in proc.stderr
  assert proc.stdout == ""
