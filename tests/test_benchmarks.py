"""The benchmark scripts users run: learn.py over seeds, plot_curves.py."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")


def test_learn_over_two_seeds_prints_a_line_each_and_a_summary(tmp_path):
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
  assert all(os.path.exists(line["logdir"]) for line in lines[:2])
