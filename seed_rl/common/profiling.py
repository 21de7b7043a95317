"""Benchmark-only measurements, kept off the runtime's core path.

The learner takes a `Profiler` (default `NULL_PROFILER`, which records
nothing); `python -m seed_rl.learner_main --profile` passes a real one and
writes its `summary()` into result.json, where benchmarks/throughput.py reads
the CPU cores each thread role used. Actors write their throughput to a JSON
file (`--stats_file`) through `ActorStatsWriter`. No TensorFlow here: actors
import this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any, ContextManager, Dict, Iterable, Iterator, List, Optional


class Profiler:
  """CPU seconds per named section and one tick per progress line.

  Sections count `time.thread_time()`: the CPU time of the Python thread
  that runs them (TensorFlow's own thread pools are not included; the
  process total is recorded with every tick). Sections may nest (the
  learner's 'act' runs inside 'inference'), and each name should be entered
  by one thread at a time.

  Args:
    sections: names reported even if never entered, in this order.
  """

  enabled = True

  def __init__(self, sections: Iterable[str] = ()):
    self.cpu_seconds: Dict[str, float] = {name: 0.0 for name in sections}
    self.ticks: List[Dict[str, float]] = []

  @contextlib.contextmanager
  def section(self, name: str) -> Iterator[None]:
    """Adds the calling thread's CPU seconds inside the block to `name`."""
    start = time.thread_time()
    try:
      yield
    finally:
      elapsed = time.thread_time() - start
      self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + elapsed

  def tick(self, **values: float) -> None:
    """Records `values` (e.g. t, env_steps, learner_steps) with the process
    CPU seconds and every section's CPU seconds so far (`<name>_cpu_s`)."""
    self.ticks.append(
      {
        **values,
        "process_cpu_s": time.process_time(),
        **{f"{k}_cpu_s": v for k, v in self.cpu_seconds.items()},
      }
    )

  def summary(self) -> Dict[str, Any]:
    """What result.json carries: 'cpu_s' (totals per section and the
    process) and 'steady_state' (see `steady_state`)."""
    return {
      "cpu_s": {
        **{k: round(v, 2) for k, v in self.cpu_seconds.items()},
        # Sections count only the Python thread that called in; TF's own
        # threads run ops for every role, so 'process' is the honest total.
        "process": round(time.process_time(), 2),
      },
      "steady_state": steady_state(self.ticks),
    }


class _NullProfiler(Profiler):
  """Records nothing: the runtime's default."""

  enabled = False

  def __init__(self):
    super().__init__()
    self._null = contextlib.nullcontext()

  def section(self, name: str) -> ContextManager[None]:  # type: ignore[override]
    del name
    return self._null

  def tick(self, **values: float) -> None:
    del values

  def summary(self) -> Dict[str, Any]:
    return {}


NULL_PROFILER: Profiler = _NullProfiler()


def steady_state(ticks: List[Dict[str, float]]) -> Dict[str, float]:
  """Rates over the second half of a run (start-up and compilation excluded).

  Args:
    ticks: `Profiler.ticks`, each with 't', 'env_steps', 'learner_steps'
      and `<name>_cpu_s` entries.

  Returns:
    env/learner steps per second and the CPU cores used per role (CPU seconds
    per wall second, 'cores/<name>') between the middle tick and the last
    one; {} with fewer than two ticks.
  """
  if len(ticks) < 2:
    return {}
  a, b = ticks[len(ticks) // 2 - (len(ticks) == 2)], ticks[-1]
  dt = max(b["t"] - a["t"], 1e-9)
  out = {
    "window_s": round(dt, 2),
    "env_steps_per_s": round((b["env_steps"] - a["env_steps"]) / dt, 1),
    "learner_steps_per_s": round(
      (b["learner_steps"] - a["learner_steps"]) / dt, 3
    ),
  }
  for key in a:
    if key.endswith("cpu_s"):
      out[f"cores/{key[: -len('_cpu_s')]}"] = round((b[key] - a[key]) / dt, 3)
  return out


class ActorStatsWriter:
  """An actor's throughput as a JSON file, rewritten atomically each time.

  The file holds totals since the actor started: 'env_steps', 'episodes'
  (finished), 'seconds', 'env_s' (stepping envs), 'learner_wait_s' (waiting
  for actions, gRPC included) and 'cpu_s' (the process's CPU seconds). The
  actor writes it a last time as it ends, however it ends.
  benchmarks/throughput.py, benchmarks/network_faults.py and the fault tests
  read it.

  Args:
    path: the file; None writes nothing.
  """

  def __init__(self, path: Optional[str]):
    self.path = path

  def write(
    self,
    env_steps: int,
    seconds: float,
    env_s: float,
    learner_wait_s: float,
    episodes: Optional[int] = None,
  ) -> None:
    if not self.path:
      return
    stats = {
      "env_steps": env_steps,
      "episodes": episodes,
      "seconds": round(seconds, 3),
      "env_s": round(env_s, 3),
      "learner_wait_s": round(learner_wait_s, 3),
      "cpu_s": round(time.process_time(), 3),
    }
    tmp = f"{self.path}.tmp"
    with open(tmp, "w") as f:
      json.dump(stats, f)
    os.replace(tmp, self.path)
