"""Helpers of the tests that start real processes: the launcher
(`python -m seed_rl.train`), `learner_main` and `actors.main`.

Imported by the test modules as `from tests.support import launch`.
"""

from __future__ import annotations

from tests.support import ROOT
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, Iterable, List, Optional, Sequence, Set

import numpy as np

from seed_rl.common.specs import ArraySpec

# Quiet TensorFlow, and unbuffered output so a killed process loses no line.
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
# CartPole's specs on the wire (what a real classic actor says in Hello).
CARTPOLE_OBS = ArraySpec(
  (4,),
  "float32",
  "observation",
  minimum=np.array([-4.8, -np.inf, -0.41887903, -np.inf], np.float32),
  maximum=np.array([4.8, np.inf, 0.41887903, np.inf], np.float32),
)
CARTPOLE_ACT = ArraySpec((), "int32", "action", num_values=2)
# A learner's progress line: '[learner   12s] | step   340 | ...'.
STEP_LINE = re.compile(r"^\[learner +\d+s\] \| step +(\d+) \|")


def env_without(*names: str, **extra: str) -> Dict[str, str]:
  """ENV less the variables `names` (say, a token that must come from a
  file), plus `extra`."""
  env = {k: v for k, v in ENV.items() if k not in names}
  env.update(extra)
  return env


def train(args: Sequence[str], timeout: float = 240, env=None):
  """Runs the launcher to its end; the CompletedProcess (text output)."""
  return subprocess.run(
    [sys.executable, "-m", "seed_rl.train"] + list(args),
    cwd=ROOT,
    env=env or ENV,
    capture_output=True,
    text=True,
    timeout=timeout,
  )


def train_briefly(
  logdir,
  domain: str,
  agent: str,
  learner_steps: int,
  bindings: Iterable[str] = (),
  timeout: float = 170,
) -> dict:
  """A short real run (2 actors x 4 envs) that must end well: returns its
  result.json after checking the exit code, the learner steps and that a
  checkpoint was written."""
  args = [domain, agent, "2", "4", "--logdir", str(logdir)]
  args += ["--max_learner_steps", str(learner_steps)]
  for binding in ("LearnerConfig.log_every_s = 1.0", *bindings):
    args += ["--gin_bindings", binding]
  out = train(args, timeout=timeout)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  with open(os.path.join(logdir, "result.json")) as f:
    result = json.load(f)
  assert result["learner_steps"] >= learner_steps, result
  assert os.path.exists(os.path.join(logdir, "checkpoints", "checkpoint"))
  return result


def event_tags(logdir) -> Set[str]:
  """The scalar names a run wrote to TensorBoard."""
  from tensorboard.backend.event_processing import event_accumulator

  acc = event_accumulator.EventAccumulator(str(logdir))
  acc.Reload()
  return set(acc.Tags()["tensors"])


class Proc:
  """`python -m ARGS` (after `prefix`, e.g. `ip netns exec NS`), its merged
  stdout/stderr collected line by line by a thread."""

  def __init__(
    self,
    args: Sequence[str],
    env: Optional[Dict[str, str]] = None,
    prefix: Sequence[str] = (),
  ):
    self.lines: List[str] = []
    self.popen = subprocess.Popen(
      [*prefix, sys.executable, "-m", *args],
      cwd=ROOT,
      env=env or ENV,
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
    )
    self._reader = threading.Thread(target=self._read, daemon=True)
    self._reader.start()

  def _read(self):
    assert self.popen.stdout is not None
    for line in self.popen.stdout:
      self.lines.append(line)

  @property
  def output(self) -> str:
    return "".join(self.lines)

  def alive(self) -> bool:
    return self.popen.poll() is None

  def wait(self, timeout: float) -> int:
    rc = self.popen.wait(timeout=timeout)
    self._reader.join(10)
    return rc

  def kill(self) -> None:
    if self.alive():
      self.popen.kill()
      self.popen.wait(30)


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def wait_for(condition, procs: Sequence[Proc], what: str, timeout=180):
  """Polls `condition` while every process in `procs` is alive; fails with
  the exited process's output, or on timeout with procs[0]'s last lines."""
  deadline = time.monotonic() + timeout
  while not condition():
    for p in procs:
      assert p.alive(), f"{what}: a process exited\n{p.output[-3000:]}"
    assert time.monotonic() < deadline, f"{what}: timed out\n" + "".join(
      procs[0].lines[-30:]
    )
    time.sleep(0.2)


def learner_steps(learner: Proc) -> List[int]:
  """The learner steps of its progress lines so far."""
  return [int(m.group(1)) for s in learner.lines if (m := STEP_LINE.match(s))]


def last_step(learner: Proc) -> int:
  """The learner step of its last progress line (-1 before the first)."""
  steps = learner_steps(learner)
  return steps[-1] if steps else -1


def served(stats_files: Sequence) -> List[int]:
  """Env steps each actor has stepped with the learner's actions so far,
  from their --stats_file (0 before an actor wrote one)."""
  out = []
  for path in stats_files:
    try:
      with open(path) as f:
        out.append(json.load(f)["env_steps"])
    except FileNotFoundError:
      out.append(0)
  return out
