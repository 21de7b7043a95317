"""Metrics: TensorBoard scalars and a one-line console progress report."""

from __future__ import annotations

import collections
import math
import re
import sys
import threading
from typing import DefaultDict, Deque, Dict, Mapping, Optional

import numpy as np


# Shown on the console progress line when present (see docs/METRICS.md):
# entropy and explained variance say within a minute whether a run moves.
CONSOLE_METRICS = (
  "policy/entropy",
  "value/explained_variance",
  "q/mean",
  "loss/total",
  "grad/norm",
  "perf/updates_per_s",
  "perf/policy_lag",
  "perf/queue_fill",
)
_SHORT = {
  "policy/entropy": "entropy",
  "value/explained_variance": "ev",
  "q/mean": "q",
  "loss/total": "loss",
  "grad/norm": "gnorm",
  "perf/updates_per_s": "upd/s",
  "perf/policy_lag": "lag",
  "perf/queue_fill": "qfill",
}


class EpisodeTracker:
  """Returns and lengths of finished episodes (thread-safe), as the learner
  counted them itself (episode_stats.py), never as actors report them.

  `recent_mean` is the mean return of the last `window` training episodes,
  the criterion the launcher's --target_return checks (CartPole's 'solved').
  """

  def __init__(self, window: int = 100):
    self.window = window
    self._lock = threading.Lock()
    self._recent: Deque[float] = collections.deque(maxlen=window)
    # Running sums between drains (bounded memory whatever actors send).
    self._sums: DefaultDict[str, float] = collections.defaultdict(float)
    self._counts: DefaultDict[str, int] = collections.defaultdict(int)
    self.episodes = 0

  def add(self, returns: np.ndarray, lengths: np.ndarray, prefix: str) -> None:
    if returns.size == 0:
      return
    with self._lock:
      for name, values in (("return", returns), ("length", lengths)):
        self._sums[f"{prefix}/{name}"] += float(
          np.sum(values, dtype=np.float64)
        )
        self._counts[f"{prefix}/{name}"] += int(values.size)
      if prefix == "episode":
        self._recent.extend(returns[-self.window :].tolist())
        self.episodes += returns.size

  def recent_mean(self) -> Optional[float]:
    with self._lock:
      if not self._recent:
        return None
      return float(np.mean(self._recent))

  def full_window(self) -> bool:
    with self._lock:
      return len(self._recent) >= self.window

  def drain(self) -> Dict[str, float]:
    """Means of what was added since the last drain."""
    with self._lock:
      out = {
        k: self._sums[k] / self._counts[k]
        for k in self._sums
        if self._counts[k]
      }
      self._sums.clear()
      self._counts.clear()
    return out


class ScalarAccumulator:
  """Averages metric dicts between two log writes (training thread only)."""

  def __init__(self):
    self._sums = collections.defaultdict(float)
    self._counts = collections.defaultdict(int)

  def add(self, metrics: Mapping[str, float]) -> None:
    for k, v in metrics.items():
      v = float(v)
      if math.isfinite(v):
        self._sums[k] += v
        self._counts[k] += 1

  def drain(self) -> Dict[str, float]:
    out = {k: self._sums[k] / self._counts[k] for k in self._sums}
    self._sums.clear()
    self._counts.clear()
    return out


class SummaryWriter:
  """TensorBoard event files; imports TensorFlow lazily (learner only)."""

  def __init__(self, logdir: str):
    import tensorflow as tf

    self._tf = tf
    self._writer = tf.summary.create_file_writer(logdir)

  def write(self, step: int, scalars: Mapping[str, float]) -> None:
    # NumPy scalars, not Python numbers: eager TensorFlow keeps the tensor
    # of every distinct Python int or float it converts in a cache that is
    # never trimmed (~250 bytes each), so a learner writing ~70 scalars a
    # second grew ~1 MiB a minute. float32 is what the summary stores.
    with self._writer.as_default(step=np.int64(step)):
      for name, value in sorted(scalars.items()):
        self._tf.summary.scalar(name, np.float32(value))
    self._writer.flush()

  def close(self) -> None:
    self._writer.close()


def progress_line(
  elapsed_s: float,
  learner_steps: int,
  env_steps: int,
  env_steps_per_s: float,
  recent_return: Optional[float],
  episodes: int,
  extra: Mapping[str, float],
) -> str:
  ret = "n/a" if recent_return is None else f"{recent_return:8.1f}"
  parts = [
    f"[learner {elapsed_s:6.0f}s]",
    f"step {learner_steps:7d}",
    f"env steps {env_steps:10,d} ({env_steps_per_s:7,.0f}/s)",
    f"return(last100) {ret}",
    f"episodes {episodes:6d}",
  ]
  parts += [
    f"{_SHORT.get(k, k.split('/')[-1])} {v:.3g}" for k, v in extra.items()
  ]
  return " | ".join(parts)


# Reads progress_line back (benchmarks/compare_reference.py takes console
# logs as well as event files; older runs have only the former).
_PROGRESS = re.compile(
  r"\[learner\s+(?P<elapsed_s>\d+)s\]\s*\|\s*step\s+(?P<learner_steps>\d+)"
  r"\s*\|\s*env steps\s+(?P<env_steps>[\d,]+)\s*\([^)]*\)"
  r"\s*\|\s*return\(last100\)\s+(?P<ret>\S+)"
  r"\s*\|\s*episodes\s+(?P<episodes>\d+)"
)


def parse_progress_line(line: str) -> Optional[Dict[str, float]]:
  """The numbers of one progress_line (elapsed_s, learner_steps, env_steps,
  return_last100, episodes), or None for any other line or before the
  first episode ended (return n/a)."""
  m = _PROGRESS.search(line)
  if m is None or m.group("ret") == "n/a":
    return None
  return {
    "elapsed_s": float(m.group("elapsed_s")),
    "learner_steps": float(m.group("learner_steps")),
    "env_steps": float(m.group("env_steps").replace(",", "")),
    "return_last100": float(m.group("ret")),
    "episodes": float(m.group("episodes")),
  }


def log(msg: str) -> None:
  print(msg, file=sys.stdout, flush=True)
