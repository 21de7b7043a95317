"""The same stacks reach every agent's training step whether the learner
hands it unrolls of frames (stacked in the training step) or of stacks.

Two learners are fed the same Atari-shaped steps (84x84 uint8 frames,
stacks of 4): episode ends by termination, by truncation (with its final
observation), by a lost life under `terminal_on_life_loss`, an actor
restart, an evaluation env and two actors' batches merged into one call.
One agent is built for frames (`observation_spec.frame_stack` 4), its twin
with the same seeds for stacks (`frame_stack` 1, which the learner serves
stacks, as before frames existed). Their actions, every training metric and
every weight after training must be bit-identical.
"""

import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from seed_rl.common.learner import Learner, LearnerConfig
from seed_rl.common.specs import ArraySpec, StepBatch
from tests.support import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import stack_replay  # noqa: E402

WIRE = ArraySpec((84, 84), "uint8", "frame")
STACKED = ArraySpec((84, 84, 4), "uint8", "frames", frame_stack=4)
ACTION = ArraySpec((), "int32", "action", num_values=4)
NUM_TRAIN = (
  stack_replay.NUM_TRAIN
)  # the steps are for 4 training envs and 1 eval


def _tiny_torso():
  """A torso of Atari stacks [B, 84, 84, 4] small enough for a test: what
  is checked is the stacks it sees, not its capacity."""
  return keras.Sequential(
    [
      keras.layers.Rescaling(1 / 255.0),
      keras.layers.AveragePooling2D(6),
      keras.layers.Flatten(),
      keras.layers.Dense(16, activation="relu"),
    ]
  )


# The queue-fed agents' shared sizes: 4-step unrolls, batches of 4, two
# epochs of two minibatches, a queue that never blocks the feed.
_QUEUE = dict(
  torso=_tiny_torso,
  unroll_length=4,
  batch_size=4,
  queue_capacity=64,
  num_epochs=2,
  num_minibatches=2,
  learning_rate=1e-3,
)


def _vtrace(spec):
  from seed_rl.agents.vtrace.agent import VtraceAgent
  from seed_rl.agents.vtrace.config import VtraceConfig

  config = VtraceConfig(
    **_QUEUE,
    policy_loss="clip",
    normalize_advantages=True,
    optimizer="adam",
    lr_schedule="constant",
    reward_clipping="abs_one",
  )
  return VtraceAgent(spec, ACTION, NUM_TRAIN + 1, config)


def _ppo(spec):
  from seed_rl.agents.ppo.agent import PPOAgent
  from seed_rl.agents.ppo.config import PPOConfig

  return PPOAgent(spec, ACTION, NUM_TRAIN + 1, PPOConfig(**_QUEUE, seed=0))


def _r2d2(spec):
  from seed_rl.agents.r2d2.agent import R2D2Agent
  from seed_rl.agents.r2d2.config import R2D2Config

  config = R2D2Config(
    torso=_tiny_torso,
    unroll_length=6,
    burn_in=2,
    n_step=2,
    batch_size=4,
    replay_capacity=64,
    min_replay_size=4,
    samples_per_insert=1.0,
    rate_limiter_error_buffer=1000.0,
    lstm_units=8,
    head_hidden=(8,),
    target_update_period=2,
    total_learner_steps=10,
    seed=0,
  )
  return R2D2Agent(spec, ACTION, NUM_TRAIN + 1, config)


def _run(make_agent, spec, script, train_steps):
  tf.keras.utils.set_random_seed(0)
  agent = make_agent(spec)
  seen = []
  add = agent.add_unrolls
  agent.add_unrolls = lambda unrolls: (seen.append(unrolls), add(unrolls))
  learner = Learner(
    agent,
    WIRE,
    ACTION,
    NUM_TRAIN,
    1,
    LearnerConfig(frame_stack=4, terminal_on_life_loss=True),
  )
  actions = []
  try:
    for calls in script:
      for batches in calls:
        batches = [StepBatch(**rows) for rows in batches]
        actions += [a.tolist() for a in learner._infer(batches)]
    metrics = [agent.train_step() for _ in range(train_steps)]
  finally:
    learner.shutdown()
  network = getattr(agent, "network", None) or agent.online_network
  return actions, metrics, [w.numpy() for w in network.weights], seen


@pytest.mark.parametrize(
  "make_agent,steps,train_steps",
  [(_vtrace, 26, 2), (_ppo, 26, 2), (_r2d2, 30, 3)],
  ids=["vtrace", "ppo", "r2d2"],
)
def test_frames_and_stacks_train_alike(make_agent, steps, train_steps):
  # The cross-tree check's steps (benchmarks/stack_replay.py): episode
  # ends of every kind, actor restarts, merged actors, an eval env.
  script = stack_replay.script(steps)
  on_frames = _run(make_agent, STACKED, script, train_steps)
  on_stacks = _run(
    make_agent, STACKED.replace(frame_stack=1), script, train_steps
  )
  actions, metrics, weights, seen = on_frames
  assert all(u.frame_stack == 4 for u in seen) and seen
  assert all(u.frame_stack == 1 for u in on_stacks[3])
  # Each frame once: ~a quarter of the bytes handed to the agent.
  frame_bytes = sum(u.observation.nbytes for u in seen)
  stack_bytes = sum(u.observation.nbytes for u in on_stacks[3])
  assert frame_bytes < 0.5 * stack_bytes
  assert actions == on_stacks[0]
  assert all(m for m in metrics), "training did not run"
  for mine, theirs in zip(metrics, on_stacks[1]):
    # perf/ and *_s metrics are timings; the rest is what training computed.
    learned = lambda m: {
      k: v
      for k, v in m.items()
      if not (k.startswith("perf/") or k.endswith("_s"))
    }
    assert learned(mine) == learned(theirs)
  assert len(weights) == len(on_stacks[2])
  for mine, theirs in zip(weights, on_stacks[2]):
    np.testing.assert_array_equal(mine, theirs)
