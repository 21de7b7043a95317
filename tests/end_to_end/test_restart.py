"""A learner restarted by the cluster resumes from its checkpoint and its
actors, still running, reconnect: real learner_main and actors.main processes
on localhost, CartPole V-trace. The learner is killed (SIGKILL, a lost node)
and later moved (SIGTERM, what a cluster sends before rescheduling)."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest

from tests.support import launch

pytestmark = pytest.mark.timeout(400)

NUM_ACTORS, ENVS_PER_ACTOR = 2, 4
_RESUMED = re.compile(
  r"resumed from \S+: learner step (\d+), env steps ([\d,]+)"
)


def test_restarted_learner_resumes_and_its_actors_reconnect(tmp_path):
  port = launch.free_port()
  logdir = tmp_path / "run"
  stats = [tmp_path / f"actor{i}.json" for i in range(NUM_ACTORS)]

  def start_learner(max_learner_steps):
    return launch.Proc(
      [
        "seed_rl.learner_main",
        "--env",
        "classic",
        "--agent",
        "vtrace",
        "--num_actors",
        str(NUM_ACTORS),
        "--envs_per_actor",
        str(ENVS_PER_ACTOR),
        "--server_address",
        f"localhost:{port}",
        "--logdir",
        str(logdir),
        "--max_learner_steps",
        str(max_learner_steps),
        "--gin_bindings",
        "LearnerConfig.log_every_s = 0.5",
        "--gin_bindings",
        "LearnerConfig.checkpoint_every_s = 1.0",
      ]
    )

  def served():
    return launch.served(stats)

  def resumed_at(learner):
    launch.wait_for(
      lambda: any(_RESUMED.search(s) for s in learner.lines),
      [learner] + actors,
      "restarted learner says it resumed",
    )
    m = next(m for s in learner.lines if (m := _RESUMED.search(s)))
    return int(m.group(1)), int(m.group(2).replace(",", ""))

  started = []
  try:
    first = start_learner(10**6)
    started.append(first)
    actors = [
      launch.Proc(
        [
          "seed_rl.actors.main",
          "--env",
          "classic",
          "--actor_id",
          str(i),
          "--num_envs",
          str(ENVS_PER_ACTOR),
          "--server_address",
          f"localhost:{port}",
          "--gin_config",
          os.path.join(launch.ROOT, "seed_rl", "classic", "gin", "vtrace.gin"),
          "--connect_timeout_s",
          "120",
          "--log_interval_s",
          "0.5",
          "--stats_file",
          str(stats[i]),
        ]
      )
      for i in range(NUM_ACTORS)
    ]
    started += actors
    all_up = [first] + actors

    # 1. Train a little; a checkpoint is written after step 10.
    launch.wait_for(
      lambda: launch.last_step(first) >= 10, all_up, "first learner"
    )
    at_step_10 = time.time()
    index = logdir / "checkpoints" / "checkpoint"
    launch.wait_for(
      lambda: index.exists() and index.stat().st_mtime > at_step_10,
      all_up,
      "checkpoint after step 10",
    )
    # 2. The node dies: no final checkpoint, streams break.
    first.popen.send_signal(signal.SIGKILL)
    assert first.wait(30) == -signal.SIGKILL
    time.sleep(1.0)
    before = served()
    assert all(s > 0 for s in before), before  # both served by the first
    for actor in actors:
      assert actor.popen.poll() is None, actor.output[-3000:]

    # 3. The cluster starts the learner again (same port and logdir): it
    # continues from the checkpoint, and both actors are served again.
    second = start_learner(10**6)
    started.append(second)
    step, _ = resumed_at(second)
    assert step >= 10, second.output[-3000:]
    launch.wait_for(
      lambda: (
        all(a > b for a, b in zip(served(), before))
        and launch.last_step(second) >= step + 10
      ),
      [second] + actors,
      "actors served by the restarted learner",
    )
    # Its progress never went back to step 0.
    steps = launch.learner_steps(second)
    assert min(steps) >= step, steps

    # 4. The cluster moves the learner (SIGTERM): it saves and exits 0, and
    # its actors wait for the next one instead of exiting.
    second.popen.send_signal(signal.SIGTERM)
    assert second.wait(60) == 0, second.output[-3000:]
    with open(logdir / "result.json") as f:
      moved = json.load(f)
    assert moved["reason"] == "stopped"
    time.sleep(1.0)
    before = served()
    for actor in actors:
      assert actor.popen.poll() is None, actor.output[-3000:]

    # 5. The last learner resumes exactly where the moved one saved, trains
    # to its limit, and everything ends with exit 0.
    third = start_learner(moved["learner_steps"] + 10)
    started.append(third)
    step, env_steps = resumed_at(third)
    assert step == moved["learner_steps"], third.output[-3000:]
    assert env_steps == moved["env_steps"], third.output[-3000:]
    assert third.wait(240) == 0, third.output[-3000:]
    for actor in actors:
      assert actor.wait(60) == 0, actor.output[-3000:]
      assert "the learner finished training" in actor.output
  finally:
    for p in started:
      p.kill()

  # The third learner needs only 10 steps: an actor still in its reconnect
  # backoff (up to 5 s) may find it finished; it is told so at its Hello
  # and exits 0 like the others (asserted above).
  after = served()
  assert any(a > b for a, b in zip(after, before)), (before, after)
  with open(logdir / "result.json") as f:
    final = json.load(f)
  assert final["learner_steps"] >= moved["learner_steps"] + 10
  assert final["env_steps"] > moved["env_steps"]
