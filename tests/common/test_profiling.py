"""Benchmark measurements: the profiler's sections and ticks, its steady-state
window, the no-op default, and the actors' stats file."""

import json
import time

from seed_rl.common import profiling


def _spin(seconds):
  end = time.thread_time() + seconds
  while time.thread_time() < end:
    pass


def test_sections_count_thread_cpu_seconds_and_nest():
  profiler = profiling.Profiler(("outer", "inner", "never"))
  with profiler.section("outer"):
    _spin(0.02)
    with profiler.section("inner"):
      _spin(0.02)
  cpu = profiler.cpu_seconds
  assert list(cpu) == ["outer", "inner", "never"]  # declared order
  assert cpu["inner"] >= 0.02 and cpu["outer"] >= cpu["inner"] + 0.015
  assert cpu["never"] == 0.0
  with profiler.section("late"):  # undeclared names are added
    pass
  assert "late" in profiler.cpu_seconds


def test_ticks_carry_values_and_cpu_totals():
  profiler = profiling.Profiler(("inference",))
  profiler.tick(t=1.0, env_steps=10, learner_steps=1)
  (tick,) = profiler.ticks
  assert list(tick) == [
    "t",
    "env_steps",
    "learner_steps",
    "process_cpu_s",
    "inference_cpu_s",
  ]
  assert tick["env_steps"] == 10 and tick["inference_cpu_s"] == 0.0


def test_steady_state_uses_the_second_half():
  ticks = [
    {"t": float(t), "env_steps": 100 * t, "learner_steps": t, "a_cpu_s": t}
    for t in range(5)
  ]
  ticks[0]["env_steps"] = 10**6  # start-up, outside the window
  assert profiling.steady_state(ticks) == {
    "window_s": 2.0,
    "env_steps_per_s": 100.0,
    "learner_steps_per_s": 1.0,
    "cores/a": 1.0,
  }
  assert profiling.steady_state(ticks[:2])["window_s"] == 1.0
  assert profiling.steady_state(ticks[:1]) == {}


def test_summary_is_what_result_json_carries():
  profiler = profiling.Profiler(("inference", "act", "training"))
  for t in range(3):
    profiler.tick(t=float(t), env_steps=t, learner_steps=t)
  summary = profiler.summary()
  assert list(summary) == ["cpu_s", "steady_state"]
  assert list(summary["cpu_s"]) == ["inference", "act", "training", "process"]
  assert list(summary["steady_state"]) == [
    "window_s",
    "env_steps_per_s",
    "learner_steps_per_s",
    "cores/process",
    "cores/inference",
    "cores/act",
    "cores/training",
  ]


def test_null_profiler_records_nothing():
  null = profiling.NULL_PROFILER
  assert not null.enabled
  with null.section("inference"):
    pass
  null.tick(t=1.0, env_steps=1, learner_steps=1)
  assert null.cpu_seconds == {} and null.ticks == [] and null.summary() == {}


def test_actor_stats_file_is_replaced_whole(tmp_path):
  path = tmp_path / "actor.json"
  writer = profiling.ActorStatsWriter(str(path))
  writer.write(160, 2.5, 1.0, 1.25, episodes=3)
  writer.write(320, 5.0, 2.0, 2.5, episodes=7)
  stats = json.loads(path.read_text())
  assert set(stats) == {
    "env_steps",
    "episodes",
    "seconds",
    "env_s",
    "learner_wait_s",
    "cpu_s",
  }
  assert (stats["env_steps"], stats["seconds"], stats["learner_wait_s"]) == (
    320,
    5.0,
    2.5,
  )
  assert stats["episodes"] == 7
  assert [p.name for p in tmp_path.iterdir()] == ["actor.json"]  # no .tmp
  profiling.ActorStatsWriter(None).write(1, 1.0, 1.0, 1.0)  # writes nothing
