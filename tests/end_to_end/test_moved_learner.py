"""A learner preempted (SIGTERM) and started again on another port resumes
from its final checkpoint, and its actors, still running, find it through
the address file: real learner_main and actors.main processes on localhost,
CartPole. R2D2 also keeps its replay across the move
(LearnerConfig.checkpoint_replay)."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

from tests.support import launch

pytestmark = pytest.mark.timeout(400)

NUM_ACTORS, ENVS_PER_ACTOR = 2, 4
_RESUMED = re.compile(r"resumed from \S+: learner step (\d+)")
_RESTORED = re.compile(r"replay restored from \S+ \(([\d.]+) MiB")
_SAVED = re.compile(r"replay saved with ckpt-\d+: ([\d.]+) MiB")


def _learner(agent, port, logdir, address_file, max_steps, bindings):
  args = ["seed_rl.learner_main", "--env", "classic", "--agent", agent]
  args += ["--num_actors", str(NUM_ACTORS)]
  args += ["--envs_per_actor", str(ENVS_PER_ACTOR)]
  args += ["--server_address", f"localhost:{port}", "--logdir", str(logdir)]
  args += ["--address_file", str(address_file)]
  args += ["--max_learner_steps", str(max_steps)]
  for binding in ["LearnerConfig.log_every_s = 0.5"] + bindings:
    args += ["--gin_bindings", binding]
  return launch.Proc(args)


def _actor(agent, i, address_file, stats):
  gin_file = os.path.join(launch.ROOT, "seed_rl", "classic", "gin", agent)
  return launch.Proc(
    ["seed_rl.actors.main", "--env", "classic", "--actor_id", str(i),
     "--num_envs", str(ENVS_PER_ACTOR),
     "--server_address", f"file:{address_file}",
     "--gin_config", gin_file + ".gin", "--connect_timeout_s", "120",
     "--log_interval_s", "0.5", "--stats_file", str(stats)]
  )  # fmt: skip


@pytest.mark.parametrize(
  "agent,bindings",
  [
    ("vtrace", []),
    ("r2d2", ["LearnerConfig.checkpoint_replay = True"]),
  ],
)
def test_a_moved_learner_is_found_by_its_actors_and_resumes(
  tmp_path, agent, bindings
):
  logdir, address_file = tmp_path / "run", tmp_path / "learner.address"
  stats = [tmp_path / f"actor{i}.json" for i in range(NUM_ACTORS)]
  first_port = launch.free_port()
  second_port = launch.free_port()
  while second_port == first_port:
    second_port = launch.free_port()
  started = []
  try:
    # The actors start first: they wait for the address file to appear.
    actors = [
      _actor(agent, i, address_file, stats[i]) for i in range(NUM_ACTORS)
    ]
    started += actors
    first = _learner(agent, first_port, logdir, address_file, 10**6, bindings)
    started.append(first)
    launch.wait_for(
      lambda: launch.last_step(first) >= 5, [first] + actors, "first learner"
    )
    assert address_file.read_text().strip() == f"localhost:{first_port}"

    # Preempted: SIGTERM writes the final checkpoint (with the replay).
    first.popen.send_signal(signal.SIGTERM)
    assert first.wait(60) == 0, first.output[-3000:]
    with open(logdir / "result.json") as f:
      moved = json.load(f)
    saved = [float(m.group(1)) for m in _SAVED.finditer(first.output)]
    assert bool(saved) == bool(bindings), first.output[-3000:]
    before = launch.served(stats)
    for actor in actors:
      assert actor.popen.poll() is None, actor.output[-3000:]

    # Rescheduled on another port: it resumes where the first one saved,
    # rewrites the address file, and the actors find it by themselves.
    second = _learner(
      agent, second_port, logdir, address_file, moved["learner_steps"] + 5,
      bindings,
    )  # fmt: skip
    started.append(second)
    launch.wait_for(
      lambda: _RESUMED.search(second.output), [second] + actors, "resume"
    )
    resumed = _RESUMED.search(second.output)
    assert resumed and int(resumed.group(1)) == moved["learner_steps"]
    if bindings:
      restored = _RESTORED.search(second.output)
      assert restored, second.output[-3000:]
      assert float(restored.group(1)) == saved[-1]
    assert second.wait(240) == 0, second.output[-3000:]
    assert address_file.read_text().strip() == f"localhost:{second_port}"
    for actor in actors:
      assert actor.wait(60) == 0, actor.output[-3000:]
      assert "the learner moved from" in actor.output, actor.output[-3000:]
  finally:
    for p in started:
      p.kill()
  after = launch.served(stats)
  assert any(a > b for a, b in zip(after, before)), (before, after)
  with open(logdir / "result.json") as f:
    final = json.load(f)
  assert final["learner_steps"] >= moved["learner_steps"] + 5
