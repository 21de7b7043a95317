"""Synchronous on-policy training (LearnerConfig.synchronous): the gate on
its own, and a real learner with a real PPO agent whose every update trains
on data its latest weights chose."""

from __future__ import annotations

import os
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest

from seed_rl.common.learner import Learner, LearnerConfig
from seed_rl.common.specs import ArraySpec
from seed_rl.common.sync_gate import SyncGate
from tests.support.recording_agent import RecordingAgent, step_batch


def _waits(gate: SyncGate) -> threading.Thread:
  waiter = threading.Thread(target=gate.wait, daemon=True)
  waiter.start()
  waiter.join(0.2)
  return waiter


def test_the_gate_holds_a_whole_pending_batch_until_its_update():
  gate = SyncGate(batch_unrolls=4)
  gate.added(3)
  assert not _waits(gate).is_alive()  # less than a batch: acts at once
  gate.added(2)  # 5 pending: a batch is ready
  waiter = _waits(gate)
  assert waiter.is_alive()
  gate.trained()  # 1 left pending
  waiter.join(2.0)
  assert not waiter.is_alive()
  gate.added(3)
  waiter = _waits(gate)
  assert waiter.is_alive()
  gate.release()  # the learner stops: nothing stays blocked
  waiter.join(2.0)
  assert not waiter.is_alive()
  assert not _waits(gate).is_alive()


def test_the_gate_refuses_an_empty_batch():
  with pytest.raises(ValueError, match="batch_unrolls 0"):
    SyncGate(0)


def test_a_replay_agent_is_refused_by_name():
  obs_spec = ArraySpec((2,), "float32")
  act_spec = ArraySpec((), "int32", num_values=2)
  agent = RecordingAgent(obs_spec, act_spec, 2)
  with pytest.raises(ValueError, match="synchronous.*a2c, ppo, vtrace"):
    Learner(agent, obs_spec, act_spec, 2, 0, LearnerConfig(synchronous=True))


def test_every_ppo_update_trains_on_its_latest_weights():
  from seed_rl.agents.ppo import agent as ppo_agent
  from seed_rl.agents.ppo.config import PPOConfig

  obs_spec = ArraySpec((4,), "float32", "observation")
  act_spec = ArraySpec((), "int32", "action", num_values=2)
  num_envs, unroll = 4, 5
  config = PPOConfig(
    unroll_length=unroll, batch_size=num_envs, num_epochs=1, num_minibatches=1
  )
  agent = ppo_agent.PPOAgent(obs_spec, act_spec, num_envs, config=config)
  lags = []
  train_step = agent.train_step

  def recorded_train_step():
    metrics = train_step()
    if metrics:
      lags.append(metrics["perf/policy_lag"])
      time.sleep(0.05)  # a slow update: an async learner would act meanwhile
    return metrics

  agent.train_step = recorded_train_step
  learner = Learner(
    agent,
    obs_spec,
    act_spec,
    num_envs,
    0,
    LearnerConfig(synchronous=True, log_every_s=60.0),
  )
  stop = threading.Event()
  runner = threading.Thread(target=learner.run, args=(stop,), daemon=True)
  runner.start()
  rng = np.random.default_rng(0)
  ids = list(range(num_envs))
  updates = 4
  # Unrolls share a step: the first is `unroll` + 1 steps, then `unroll`.
  for _ in range(unroll * updates + 1):
    obs = rng.normal(size=(num_envs, 4)).astype(np.float32)
    learner._infer([step_batch(ids, [1] * num_envs, obs)])
  deadline = time.monotonic() + 60
  while len(lags) < updates and time.monotonic() < deadline:
    time.sleep(0.05)
  stop.set()
  runner.join(60)
  assert len(lags) == updates, lags
  # Only the step two unrolls share was acted before the update that
  # precedes its unroll: a lag of 1 on 1 of `unroll` trained steps.
  assert lags[0] == 0.0, lags
  np.testing.assert_allclose(lags[1:], 1.0 / unroll)
