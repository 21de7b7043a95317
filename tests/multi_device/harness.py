"""The harness the multi-device checks share.

TensorFlow can split the CPU into logical devices only before it
initialises its devices, so each check (`*_check.py` here) runs in a fresh
interpreter: it calls `split_cpu()` before importing anything that builds a
device, trains one agent on TensorFlow's default device and one on
`TWO_CPUS`, and prints one JSON report on its last line (`emit`). The test
beside it starts the script with `run_check` and judges the report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from tests.support import ROOT

# Two spellings a user may write for the same kind of device.
TWO_CPUS = ("/cpu:0", "CPU:1")


def split_cpu(count=2):
  """Splits the first CPU into `count` logical devices; returns the
  `tensorflow` module. Call before anything else imports TensorFlow."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  import tensorflow as tf

  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * count
  )
  return tf


def max_diff(a, b):
  return float(np.abs(np.asarray(a) - np.asarray(b)).max())


def variable_diffs(strategy, single_vars, multi_vars):
  """(largest single vs multi difference, largest difference between the
  copies of a mirrored variable, number of copies)."""
  weight_diff, copy_diff, copies = 0.0, 0.0, []
  for s, m in zip(single_vars, multi_vars, strict=True):
    copies = strategy.experimental_local_results(m)
    weight_diff = max(weight_diff, max_diff(s.numpy(), m.numpy()))
    copy_diff = max(
      copy_diff, max(max_diff(c.numpy(), copies[0].numpy()) for c in copies)
    )
  return weight_diff, copy_diff, len(copies)


def error_message(fn):
  """The ValueError's message `fn()` raises, or None."""
  try:
    fn()
  except ValueError as e:
    return str(e)
  return None


def emit(report):
  print(json.dumps(report))


def run_check(script, timeout, **env):
  """Runs tests/multi_device/`script` in a fresh interpreter (with `env`
  added to the environment) and returns its JSON report."""
  proc = subprocess.run(
    [sys.executable, os.path.join(ROOT, "tests", "multi_device", script)],
    cwd=ROOT,
    env=dict(
      os.environ,
      TF_CPP_MIN_LOG_LEVEL="3",
      PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
      **env,
    ),
    capture_output=True,
    text=True,
    timeout=timeout,
  )
  assert proc.returncode == 0, proc.stderr[-4000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])
