"""An actor's running totals: env steps, episodes, and where its time went.

Logged, and written to the stats file (`--stats_file`, read by the
benchmarks) every `log_interval_s`; env groups (seed_rl/actors/groups.py)
share one counter from their threads.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Optional

import numpy as np

from seed_rl.common import profiling


@dataclasses.dataclass
class ActorSummary:
  """What one run_actor call did.

  steps: batched steps (each steps all K envs).
  env_steps: steps * K.
  episodes: episodes finished.
  mean_return: mean raw return of the finished episodes (nan if none).
  """

  steps: int
  env_steps: int
  episodes: int
  mean_return: float
  env_seconds: float = 0.0
  learner_seconds: float = 0.0


class Throughput:
  """An actor loop's totals, logged (and written to the stats file, if any)
  every `log_interval_s` seconds. Env groups share one, from their threads."""

  def __init__(
    self,
    actor_id: int,
    num_envs: int,
    log_interval_s: float,
    stats_path: Optional[str],
  ):
    self.actor_id, self.num_envs = actor_id, num_envs
    self.log_interval_s = log_interval_s
    self.stats_file = profiling.ActorStatsWriter(stats_path)
    self.env_steps = self.episodes = 0
    self.return_sum = self.env_s = self.learner_s = 0.0
    self.start = self.last_log_time = time.monotonic()
    self.last_log_env_steps = 0
    self.begun = False
    # Env groups add steps from their threads; the stats file's temporary
    # name must not be written by two of them at once either.
    self._lock = threading.RLock()

  def begin(self) -> None:
    """The clock starts once the envs are reset and the learner answered
    Hello (the first group to get there, with env groups)."""
    with self._lock:
      if not self.begun:
        self.begun = True
        self.start = self.last_log_time = time.monotonic()

  def add_step(
    self,
    num_envs: int,
    learner_s: float,
    env_s: float,
    episode_return: np.ndarray,
  ) -> None:
    """One batched step of `num_envs` envs: seconds waiting for actions and
    stepping envs, and the returns of the episodes it finished."""
    with self._lock:
      self.learner_s += learner_s
      self.env_s += env_s
      self.env_steps += num_envs
      self.episodes += episode_return.size
      self.return_sum += float(episode_return.sum())
      now = time.monotonic()
      if now - self.last_log_time >= self.log_interval_s:
        self._log(now)

  def _log(self, now: float) -> None:
    env_s, learner_s = self.env_s, self.learner_s
    rate = (self.env_steps - self.last_log_env_steps) / (
      now - self.last_log_time
    )
    # With env groups the waits overlap the steps: shares of the summed time.
    busy = max(env_s + learner_s, 1e-9)
    logging.info(
      "actor %d: %.0f env steps/s (env %.0f%%, waiting for the "
      "learner %.0f%%), %d episodes, mean return %.2f",
      self.actor_id,
      rate,
      100 * env_s / busy,
      100 * learner_s / busy,
      self.episodes,
      self.return_sum / max(self.episodes, 1),
    )
    self.last_log_time, self.last_log_env_steps = now, self.env_steps
    self.write_file(now)

  def write_file(self, now: float) -> None:
    """The stats file (nothing before the loop began: no env, no learner)."""
    with self._lock:
      if not self.begun:
        return
      self.stats_file.write(
        self.env_steps,
        now - self.start,
        self.env_s,
        self.learner_s,
        episodes=self.episodes,
      )

  def summary(self) -> ActorSummary:
    with self._lock:
      return self._summary()

  def _summary(self) -> ActorSummary:
    episodes = self.episodes
    return ActorSummary(
      steps=self.env_steps // self.num_envs,
      env_steps=self.env_steps,
      episodes=episodes,
      mean_return=(self.return_sum / episodes if episodes else float("nan")),
      env_seconds=self.env_s,
      learner_seconds=self.learner_s,
    )
