"""The learner's reporting and stop rules, apart from its runtime.

The runtime (common/learner.py) keeps cumulative counters (`Counters`);
`Reporter` turns two snapshots into the interval's TensorBoard scalars,
the console progress line (rates, ETA toward the nearest stop condition,
best mean return) and, in a tuning study, the study's metric. `StopRules`
says when a run is over (target return, env steps, learner steps, time).
Both run on the learner's main thread. TensorFlow-free.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional

from seed_rl.common import memory
from seed_rl.common import metrics as metrics_lib
from seed_rl.common import profiling
from seed_rl.common.learner_config import LearnerConfig


@dataclasses.dataclass(frozen=True)
class Counters:
  """Cumulative counts of a learner since it started (env steps since the
  first run, when resumed)."""

  env_steps: int = 0
  learner_steps: int = 0
  batches: int = 0  # inference calls
  envs: int = 0  # envs served by them
  act_s: float = 0.0  # in agent.act
  infer_s: float = 0.0  # in the whole inference step
  samples: float = 0.0  # transitions trained on (with reuse)
  discarded_partial_unrolls: int = 0
  episode_stat_mismatches: int = 0
  uncounted_episodes: int = 0


class Reporter:
  """Scalars and console lines per interval between two Counters.

  `banner` is appended to every progress line (e.g. a warning);
  `hypertune` (seed_rl/cluster/tuning.HypertuneReporter, in a Vertex
  study) gets the mean return of the last 100 episodes at every report.
  """

  def __init__(
    self,
    config: LearnerConfig,
    episodes: metrics_lib.EpisodeTracker,
    writer=None,
    profiler: profiling.Profiler = profiling.NULL_PROFILER,
  ):
    self.config = config
    self.episodes = episodes
    self.writer = writer
    self.profiler = profiler
    self.banner = ""
    self.hypertune = None
    self.best_return: Optional[float] = None  # best mean of the last 100
    self._start = self._last_time = 0.0
    self._first = self._last = Counters()

  def start(self, now: float, counters: Counters) -> None:
    """The run starts: rates and the ETA count from here."""
    self._start = self._last_time = now
    self._first = self._last = counters

  def report(
    self, now: float, counters: Counters, scalars: Dict[str, float]
  ) -> None:
    """Writes the interval's scalars (the agent's metrics `scalars`, plus
    episodes and rates) and one console line."""
    scalars.update(self.interval_scalars(now, counters))
    if self.writer:
      self.writer.write(counters.learner_steps, scalars)
    recent = self.episodes.recent_mean()
    if self.hypertune is not None and recent is not None:
      self.hypertune.report(recent, counters.env_steps)
    metrics_lib.log(self.console_line(now, counters, scalars))
    self.profiler.tick(
      t=now - self._start,
      env_steps=counters.env_steps,
      learner_steps=counters.learner_steps,
    )
    self._last_time, self._last = now, counters

  def interval_scalars(self, now: float, c: Counters) -> Dict[str, float]:
    """Episodes and rates of the interval since the last report."""
    last, dt = self._last, max(now - self._last_time, 1e-9)
    scalars = self.episodes.drain()
    # The console's return(last100), the --target_return criterion: curves
    # compared across runs and with published ones read this, not the
    # interval's few episodes (benchmarks/compare_reference.py).
    recent = self.episodes.recent_mean()
    if recent is not None:
      scalars["episode/return_last100"] = recent
    env_steps = c.env_steps - last.env_steps
    scalars["perf/env_steps_per_s"] = env_steps / dt
    scalars["perf/updates_per_s"] = (c.learner_steps - last.learner_steps) / dt
    if env_steps > 0:
      scalars["perf/samples_per_env_step"] = (
        c.samples - last.samples
      ) / env_steps
    scalars["perf/env_steps"] = c.env_steps
    # The console's [learner Ns] clock (from this process's start), so a
    # curve can be read "after N minutes" from the event files alone.
    scalars["perf/elapsed_s"] = now - self._start
    scalars["actors/discarded_partial_unrolls"] = c.discarded_partial_unrolls
    scalars["integrity/episode_stat_mismatches"] = c.episode_stat_mismatches
    scalars["integrity/uncounted_episodes"] = c.uncounted_episodes
    # Sampled every report, so a growth shows in TensorBoard with its owner.
    scalars.update(memory.memory_scalars())
    batches = c.batches - last.batches
    if batches:
      scalars["perf/inference_batch_size"] = (c.envs - last.envs) / batches
      scalars["perf/inference_ms"] = 1e3 * (c.infer_s - last.infer_s) / batches
      scalars["perf/act_ms"] = 1e3 * (c.act_s - last.act_s) / batches
    return scalars

  def console_line(
    self, now: float, c: Counters, scalars: Dict[str, float]
  ) -> str:
    """The progress line (and the best mean return so far, updated)."""
    extra = {k: scalars[k] for k in metrics_lib.CONSOLE_METRICS if k in scalars}
    recent = self.episodes.recent_mean()
    line = metrics_lib.progress_line(
      now - self._start,
      c.learner_steps,
      c.env_steps,
      scalars["perf/env_steps_per_s"],
      recent,
      self.episodes.episodes,
      extra,
    )
    if recent is not None:
      self.best_return = max(recent, self.best_return or recent)
    goal = self.goal(now - self._start, c)
    line = f"{line} | {goal}" if goal else line
    return f"{line} | {self.banner}" if self.banner else line

  def goal(self, elapsed: float, c: Counters) -> str:
    """'42% done, ETA 1m30s' toward the nearest stop condition; the best
    mean return so far when a target is set."""
    cfg, parts = self.config, []
    done, eta = 0.0, None
    for limit, value, start in (
      (cfg.max_env_steps, c.env_steps, self._first.env_steps),
      (cfg.max_learner_steps, c.learner_steps, self._first.learner_steps),
      (cfg.max_seconds, elapsed, 0.0),
    ):
      if limit:
        done = max(done, min(value / limit, 1.0))
        rate = (value - start) / max(elapsed, 1e-9)
        if rate > 0:
          left = max(limit - value, 0) / rate
          eta = left if eta is None else min(eta, left)
    if cfg.max_env_steps or cfg.max_learner_steps or cfg.max_seconds:
      when = "" if eta is None else f", ETA {eta // 60:.0f}m{eta % 60:02.0f}s"
      parts.append(f"{100 * done:.0f}% done{when}")
    if cfg.target_return is not None and cfg.stop_at_target:
      best = "n/a" if self.best_return is None else f"{self.best_return:.1f}"
      parts.append(f"best {best} / target {cfg.target_return:g}")
    return ", ".join(parts)


class StopRules:
  """When a run is over: the first of target return (mean of the last 100
  training episodes, over a full window), env steps, learner steps and
  seconds. `solved_at_s`: when the target was first reached."""

  def __init__(
    self, config: LearnerConfig, episodes: metrics_lib.EpisodeTracker
  ):
    self.config = config
    self.episodes = episodes
    self.solved_at_s: Optional[float] = None  # seconds into the run

  def reason(self, elapsed: float, c: Counters) -> Optional[str]:
    """Why training should stop now, or None."""
    cfg = self.config
    recent = self.episodes.recent_mean()
    if (
      cfg.target_return is not None
      and self.episodes.full_window()
      and recent is not None  # implied by a full window; narrows the type
      and recent >= cfg.target_return
    ):
      if self.solved_at_s is None:
        self.solved_at_s = elapsed
        metrics_lib.log(
          f"SOLVED: mean return {recent:.1f} over the last "
          f"{self.episodes.window} episodes >= target {cfg.target_return:g}"
          f" after {elapsed:.1f} s, {c.env_steps:,d} env "
          f"steps, {c.learner_steps} learner steps"
        )
      if cfg.stop_at_target:
        return "target reached"
    if cfg.max_env_steps and c.env_steps >= cfg.max_env_steps:
      return f"max_env_steps {cfg.max_env_steps} reached"
    if cfg.max_learner_steps and c.learner_steps >= cfg.max_learner_steps:
      return f"max_learner_steps {cfg.max_learner_steps} reached"
    if cfg.max_seconds and elapsed >= cfg.max_seconds:
      return f"max_seconds {cfg.max_seconds:g} reached"
    return None
