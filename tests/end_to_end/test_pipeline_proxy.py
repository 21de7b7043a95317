"""A fast learning proxy for the Atari image pipeline.

The real launcher trains V-trace on MovingDot (seed_rl/synthetic/dots.py):
actors send single 84x84 uint8 frames over gRPC, the learner stacks them 4
deep, the Nature conv torso (bfloat16 where the CPU has it) reads the stack,
and the right action depends on the direction of the newest move, so only a
pipeline that keeps the newest two frames in place and pairs each reward
with the action that earned it gets past chance (0 per step). A correct
pipeline reaches a mean return >= 15 of a possible 19 in 20-30k env steps
(40-80 s on 2 cores); with the stack dropping its newest frame, or actions
stored one step late, it stays near 0 (docs/benchmarks.md and the
development log's "The pipeline proxy").

The budget is in env steps, not seconds, so that a slow or busy machine
gives the learner the same data, not less; the wall-clock limit only stops
a hung run.
"""

from tests.support import ROOT
import json
import os
import subprocess
import sys

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
TARGET = 15.0
MAX_ENV_STEPS = 80_000
MAX_SECONDS = 420  # a hang guard: 80k env steps take 2-4 minutes


def test_moving_dot_is_learned_through_the_real_pipeline(tmp_path):
  logdir = tmp_path / "run"
  out = subprocess.run(
    [
      sys.executable,
      "-m",
      "seed_rl.train",
      "synthetic",
      "vtrace",
      "2",
      "8",
      "--logdir",
      str(logdir),
      "--max_env_steps",
      str(MAX_ENV_STEPS),
      "--max_seconds",
      str(MAX_SECONDS),
      "--target_return",
      str(TARGET),
    ],
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=MAX_SECONDS + 120,
  )
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  with open(logdir / "result.json") as f:
    result = json.load(f)
  progress = [s for s in out.stdout.splitlines() if s.startswith("[learner")]
  assert result["reason"] == "target reached", (
    f"MovingDot not learned in {result['env_steps']:,} env steps "
    f"({result['reason']}): " + "\n".join(progress[-5:])
  )
  assert result["final_return"] >= TARGET - 2
