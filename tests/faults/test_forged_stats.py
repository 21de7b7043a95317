"""Forged episode statistics against a real learner process.

A client with a valid session sends batches in which every env ends on
every step and reports episodes it never played: first a return of 1e9
over 1000 steps, then a plausible 475 over 475 steps, each time more than
the 100 episodes of the `--target_return 195` window. A learner that
believed the reports would print SOLVED and stop (it did, before it counted
episodes itself). Now the learner counts what it received: 1-step
episodes of return 1 (the reward sent), so `episode/return`, the console,
result.json and the stop condition all say 1.0, and every report is
counted as a mismatch and logged.
"""

from __future__ import annotations

import json
import re
import signal

import numpy as np
import pytest

from seed_rl.common.specs import StepBatch
from seed_rl.grpc import security
from seed_rl.grpc.client import ActorClient
from tests.support import launch

pytestmark = pytest.mark.timeout(180)

ENVS_PER_ACTOR = 4
OBS, ACT = launch.CARTPOLE_OBS, launch.CARTPOLE_ACT

BATCHES = 30  # per forgery: 4 envs x 30 = 120 forged episodes > the window
_EPISODES = re.compile(r"return\(last100\) +(\S+) \| episodes +(\d+)")


def _forged(rng, ended, claim_return, claim_length):
  k = ENVS_PER_ACTOR
  e = k if ended else 0
  return StepBatch(
    env_ids=np.arange(k, dtype=np.int32),
    run_ids=np.full(k, 12345, np.int64),
    reward=np.ones(k, np.float32),
    terminated=np.full(k, ended),
    truncated=np.zeros(k, bool),
    observation=rng.uniform(-0.05, 0.05, (k, 4)).astype(np.float32),
    final_observation=np.zeros((0, 4), np.float32),
    episode_return=np.full(e, claim_return, np.float32),
    episode_length=np.full(e, claim_length, np.int32),
  )


def _progress(learner):
  """(mean return of the last 100, episodes) of each progress line."""
  return [
    (m.group(1), int(m.group(2)))
    for s in learner.lines
    if launch.STEP_LINE.match(s) and (m := _EPISODES.search(s))
  ]


def _scalars(logdir, tag):
  """The values TensorBoard holds for `tag`, in step order."""
  from tensorboard.backend.event_processing import event_accumulator
  from tensorboard.util import tensor_util

  acc = event_accumulator.EventAccumulator(str(logdir))
  acc.Reload()
  return [
    float(tensor_util.make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)
  ]


def test_forged_episode_statistics_neither_count_nor_stop_the_run(tmp_path):
  port = launch.free_port()
  logdir = tmp_path / "run"
  learner = launch.Proc(
    [
      "seed_rl.learner_main",
      "--env=classic",
      "--agent=vtrace",
      "--num_actors=1",
      f"--envs_per_actor={ENVS_PER_ACTOR}",
      f"--server_address=localhost:{port}",
      f"--logdir={logdir}",
      "--target_return=195",
      "--gin_bindings=LearnerConfig.log_every_s = 0.5",
    ],
    launch.env_without(security.TOKEN_ENV),
  )
  client = ActorClient(
    f"localhost:{port}", 0, ENVS_PER_ACTOR, OBS, ACT, connect_timeout_s=120
  )
  rng = np.random.default_rng(0)
  try:
    client.connect()
    client.step(_forged(rng, False, 0, 0))  # the episodes' start
    episodes = 0
    for claim in ((1e9, 1000), (475.0, 475)):
      for _ in range(BATCHES):
        actions = client.step(_forged(rng, True, *claim))
        assert actions.shape == (ENVS_PER_ACTOR,)
      episodes += BATCHES * ENVS_PER_ACTOR
      # A progress line after all of them: the window is full of them.
      launch.wait_for(
        lambda want=episodes: any(n >= want for _, n in _progress(learner)),
        [learner],
        f"a progress line counting {episodes} episodes",
        timeout=60,
      )
      assert "SOLVED" not in learner.output, learner.output[-3000:]
      assert _progress(learner)[-1] == ("1.0", episodes)
    # Still serving: the run did not stop at the target.
    assert client.step(_forged(rng, False, 0, 0)).shape == (ENVS_PER_ACTOR,)
    assert learner.alive()
  finally:
    client.close()
    if learner.alive():
      learner.popen.send_signal(signal.SIGINT)
  assert learner.wait(120) == 0, learner.output[-3000:]
  out = learner.output
  assert "SOLVED" not in out, out[-3000:]
  assert re.search(
    r"env \d's actor reported return 1e\+09 over 1000 steps .* the learner "
    r"counted return 1 over 1 steps",
    out,
  ), out[-3000:]
  with open(logdir / "result.json") as f:
    result = json.load(f)
  assert result["reason"] == "stopped", result
  assert not result["solved"], result
  assert result["episodes"] == episodes, result
  assert result["final_return"] == 1.0, result
  returns = _scalars(logdir, "episode/return")
  assert returns and set(returns) == {1.0}, returns
  assert set(_scalars(logdir, "episode/length")) == {1.0}
  # The console's return(last100), as compare_reference.py reads it.
  last100 = _scalars(logdir, "episode/return_last100")
  assert last100 and last100[-1] == result["final_return"], last100
  elapsed = _scalars(logdir, "perf/elapsed_s")  # the console's clock
  assert elapsed == sorted(elapsed) and 0 < elapsed[-1] < 600, elapsed
  assert _scalars(logdir, "integrity/episode_stat_mismatches")[-1] == episodes
