"""The benchmark scripts users run: learn.py over seeds, plot_curves.py."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")


def test_learn_over_two_seeds_prints_a_line_each_and_a_summary(tmp_path):
  overlay = tmp_path / "overlay.gin"  # --gin_config reaches the learner
  overlay.write_text("VtraceConfig.learning_rate = 0.00123\n")
  out = subprocess.run(
    [
      sys.executable,
      "benchmarks/learn.py",
      "classic",
      "vtrace",
      "--quiet",
      "--seeds",
      "0,1",
      "--max_minutes",
      "0.25",
      "--num_actors",
      "1",
      "--envs_per_actor",
      "4",
      "--logdir",
      str(tmp_path / "run"),
      "--gin_config",
      str(overlay),
    ],
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=240,
  )
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
  lines = [json.loads(s) for s in out.stdout.splitlines() if s.startswith("{")]
  assert [line.get("seed") for line in lines[:2]] == [0, 1]
  summary = lines[2]
  assert summary["summary"] and summary["seeds"] == [0, 1]
  assert set(summary["wall_s"]) == {"median", "min", "max"}
  assert [line["logdir"] for line in lines[:2]] == [
    str(tmp_path / "run-0"),
    str(tmp_path / "run-1"),
  ]
  assert all(os.path.exists(line["logdir"]) for line in lines[:2])
  assert lines[0]["gin_config"] == [str(overlay)]
  with open(os.path.join(lines[0]["logdir"], "operative_config.gin")) as f:
    assert "VtraceConfig.learning_rate = 0.00123" in f.read()


def _fake_run(logdir, slope, steps=20):
  """Event files as the learner writes them: perf/env_steps and
  episode/return at the same learner steps."""
  import tensorflow as tf

  writer = tf.summary.create_file_writer(str(logdir))
  with writer.as_default():
    for step in range(1, steps + 1):
      tf.summary.scalar("perf/env_steps", 1000.0 * step, step=step)
      tf.summary.scalar("episode/return", slope * step, step=step)
  writer.close()


def test_plot_curves_draws_groups_from_several_logdirs(tmp_path):
  for name, slope in (("a0", 1.0), ("a1", 2.0), ("b0", -1.0)):
    _fake_run(tmp_path / name, slope)
  out = tmp_path / "curves.png"
  args = [sys.executable, "benchmarks/plot_curves.py", "--title", "t"]
  dirs = [str(tmp_path / n) for n in ("a0", "a1", "b0")]
  proc = subprocess.run(
    args + ["--out", str(out), "--labels", "A,A,B", "--x", "both"] + dirs,
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  import matplotlib.image

  image = matplotlib.image.imread(out)
  assert image.shape[0] > 300 and image.shape[1] > 1000  # two panels
  bad = subprocess.run(
    args + ["--out", str(out), "--labels", "A,B"] + dirs,
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert bad.returncode == 2 and "--labels has 2 names" in bad.stderr


def test_plot_curves_reference_points_parse_or_name_the_bad_point():
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  try:
    import plot_curves
  finally:
    sys.path.pop(0)
  name, xs, ys = plot_curves.parse_reference("CleanRL PPO:2e6=530,4e6=660")
  assert name == "CleanRL PPO"
  assert xs.tolist() == [2e6, 4e6] and ys.tolist() == [530.0, 660.0]
  for bad, words in (
    ("2e6=530", "expected NAME:X=Y"),
    ("ref:2e6=530,4e6", "'4e6' is not X=Y"),
    ("ref:a=b", "'a=b' is not X=Y"),
  ):
    with pytest.raises(ValueError, match=words):
      plot_curves.parse_reference(bad)
