"""PPOAgent on hand-built unrolls and on small synthetic bandits."""

from __future__ import annotations

import os
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gin
import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents.ppo import agent as agent_lib
from seed_rl.agents.ppo.config import PPOConfig
from seed_rl.common.agent_api import Unroll
from seed_rl.common.specs import ArraySpec

from tests.support.helpers import (
  act_inputs,
  checkpoint_round_trip,
  gin_file_parsed,
)

OBS = ArraySpec((4,), "float32", "observation")
DISCRETE = ArraySpec((), "int32", "action", num_values=3)
BOX = ArraySpec(
  (2,), "float32", "action", minimum=np.asarray(-1.0), maximum=np.asarray(1.0)
)


def _collect(agent, observations, reward_fn, env_ids=None, version=0):
  """Acts on observations [B, T+1, ...] as the runtime would; every step is
  a one-step episode ending by termination (a contextual bandit)."""
  b, t1 = observations.shape[:2]
  actions, values, extras = [], [], {}
  rewards = np.zeros((b, t1), np.float32)
  for t in range(t1):
    out = agent.act(act_inputs(observations[:, t]))
    actions.append(out.action)
    values.append(out.value)
    for name, value in out.extras.items():
      extras.setdefault(name, []).append(value)
    if t + 1 < t1:
      rewards[:, t + 1] = reward_fn(observations[:, t], out.action)
  terminated = np.ones((b, t1), bool)
  action = np.stack(actions, 1)
  return Unroll(
    env_ids=(np.arange(b, dtype=np.int32) if env_ids is None else env_ids),
    observation=observations,
    reward=rewards,
    terminated=terminated,
    truncated=np.zeros((b, t1), bool),
    bootstrap_value=np.zeros((b, t1), np.float32),
    prev_action=np.zeros_like(action),
    action=action,
    value=np.stack(values, 1),
    extras={k: np.stack(v, 1) for k, v in extras.items()},
    core_state=(),
    policy_version=np.full((b, t1), version, np.int64),
  )


def _random_unroll(agent, rng, b, version=0):
  t1 = agent.unroll_length + 1
  obs = rng.normal(size=(b, t1) + OBS.shape).astype(np.float32)
  unroll = _collect(agent, obs, lambda o, a: o[:, 0], version=version)
  unroll.terminated = rng.random((b, t1)) < 0.1
  unroll.truncated = (rng.random((b, t1)) < 0.1) & ~unroll.terminated
  unroll.bootstrap_value = np.where(unroll.truncated, 1.0, 0.0).astype(
    np.float32
  )
  return unroll


def _weights(agent):
  return [v.numpy().copy() for v in agent.network.trainable_variables]


@pytest.mark.parametrize(
  "action_spec,overrides",
  [
    (DISCRETE, {}),
    (DISCRETE, dict(surrogate_anchor="proximal")),
    (
      BOX,
      dict(
        bound_handling="tanh",
        normalize_observations=True,
        scale_rewards=True,
        loss="kl_penalty",
        kl_cutoff_factor=2.0,
      ),
    ),
    (
      BOX,
      dict(
        log_std="state_dependent",
        value_clip=0.2,
        recompute_advantages_each_epoch=True,
        shared_torso=True,
        lr_schedule="linear",
        anneal_clip_ratio=True,
        total_learner_steps=10,
      ),
    ),
  ],
)
def test_train_step_on_hand_built_unrolls(action_spec, overrides):
  rng = np.random.default_rng(0)
  config = PPOConfig(
    unroll_length=5, batch_size=4, num_epochs=2, num_minibatches=2, **overrides
  )
  agent = agent_lib.PPOAgent(OBS, action_spec, num_envs=4, config=config)
  before = _weights(agent)
  # Pieces of 3 and 1 unrolls make one batch of 4.
  agent.add_unrolls(_random_unroll(agent, rng, 3, version=0))
  agent.add_unrolls(_random_unroll(agent, rng, 1, version=0))
  metrics = agent.train_step()
  assert int(agent.step_counter.numpy()) == 1
  for name in (
    "loss/total",
    "loss/policy",
    "loss/value",
    "loss/entropy",
    "policy/approx_kl",
    "policy/clip_fraction",
    "ppo/kl_coef",
    "perf/policy_lag",
  ):
    assert name in metrics and np.isfinite(metrics[name]), name
  assert metrics["perf/policy_lag"] == 0.0
  assert any(not np.array_equal(a, b) for a, b in zip(before, _weights(agent)))
  # Data acted by version 0 trained at step 1: a lag of 1.
  agent.add_unrolls(_random_unroll(agent, rng, 4, version=0))
  assert agent.train_step()["perf/policy_lag"] == 1.0
  if config.loss == "kl_penalty":
    assert agent._kl_coef.numpy() != config.initial_kl_coef  # adapted
  if config.normalize_observations:
    # Updated from steps 1..T of each unroll only (step 0 is an overlap).
    assert agent.observation_normalizer.count.numpy() == 2 * 4 * 5


def test_early_stop_on_kl_from_start_of_update():
  rng = np.random.default_rng(8)
  config = PPOConfig(
    unroll_length=8,
    batch_size=4,
    num_epochs=10,
    num_minibatches=4,
    learning_rate=0.05,
    early_stop_kl=1e-4,
  )
  agent = agent_lib.PPOAgent(OBS, DISCRETE, num_envs=4, config=config)
  agent.add_unrolls(_random_unroll(agent, rng, 4))
  metrics = agent.train_step()
  assert metrics["ppo/early_stopped"] == 1.0
  # At least the first step runs (its KL from the start is 0).
  assert 1 / 4 <= metrics["ppo/epochs"] < 10
  config.early_stop_kl = None
  agent = agent_lib.PPOAgent(OBS, DISCRETE, num_envs=4, config=config)
  agent.add_unrolls(_random_unroll(agent, rng, 4))
  metrics = agent.train_step()
  assert metrics["ppo/early_stopped"] == 0.0 and metrics["ppo/epochs"] == 10


def test_act_outputs_and_eval_mode():
  agent = agent_lib.PPOAgent(
    OBS,
    BOX,
    num_envs=4,
    config=PPOConfig(bound_handling="clip", init_log_std=0.5),
  )
  obs = np.random.default_rng(1).normal(size=(64, 4)).astype(np.float32)
  out = agent.act(act_inputs(obs))
  assert out.action.shape == (64, 2) and out.action.dtype == np.float32
  raw = out.extras[agent_lib.RAW_ACTION]
  np.testing.assert_array_equal(out.action, np.clip(raw, -1, 1))
  assert np.any(np.abs(raw) > 1)  # std e^0.5 puts samples outside the Box
  np.testing.assert_allclose(
    out.extras[agent_lib.LOG_PROB],
    agent.distribution.log_prob(agent.network(obs)[0], raw).numpy(),
    rtol=1e-5,
  )
  assert out.value.shape == (64,) and out.core_state == ()
  # Evaluation rows act with the mean, repeatably.
  eval_mask = np.arange(64) % 2 == 0
  a1 = agent.act(act_inputs(obs, eval_mask=eval_mask)).action
  a2 = agent.act(act_inputs(obs, eval_mask=eval_mask)).action
  np.testing.assert_array_equal(a1[eval_mask], a2[eval_mask])
  assert not np.array_equal(a1[~eval_mask], a2[~eval_mask])

  discrete = agent_lib.PPOAgent(OBS, DISCRETE, num_envs=4)
  out = discrete.act(act_inputs(obs))
  assert out.action.shape == (64,) and out.action.dtype == np.int32
  assert set(out.extras) == {agent_lib.LOG_PROB}


def test_targets_use_unroll_flags_of_the_next_step():
  """Step-0 flags belong to the previous unroll; truncation bootstraps."""
  rng = np.random.default_rng(2)
  agent = agent_lib.PPOAgent(
    OBS, DISCRETE, num_envs=2, config=PPOConfig(unroll_length=3, batch_size=2)
  )
  u = _random_unroll(agent, rng, 2)
  u.terminated[:] = False
  u.truncated[:] = False
  u.terminated[:, 0] = True  # the previous unroll's last transition
  u.reward[:, 0] = 1e3
  u.truncated[0, 3] = True
  u.bootstrap_value[0, 3] = 100.0
  args = agent._time_major(u)[:6]
  values, adv, _, _, _ = agent._targets_fn(*args)
  all_values = np.swapaxes(
    agent.network(u.observation.reshape(-1, 4))[1].numpy().reshape(2, 4), 0, 1
  )
  np.testing.assert_allclose(
    values.numpy(), all_values[:3], rtol=1e-5, atol=1e-6
  )
  # By hand from the definition: no episode end before the truncation, so
  # A_t = sum_l (gamma lambda)^(l-t) delta_l with the bootstrap at the end.
  gamma, lam = 0.99, 0.95
  for b in range(2):
    next_values = all_values[1:, b].copy()
    if b == 0:
      next_values[2] = 100.0
    deltas = u.reward[b, 1:] + gamma * next_values - all_values[:3, b]
    for t in range(3):
      expected = sum((gamma * lam) ** (k - t) * deltas[k] for k in range(t, 3))
      np.testing.assert_allclose(
        adv.numpy()[t, b], expected, rtol=1e-4, atol=1e-5
      )


def test_checkpoint_round_trip(tmp_path):
  rng = np.random.default_rng(3)
  config = PPOConfig(
    unroll_length=4,
    batch_size=2,
    bound_handling="tanh",
    normalize_observations=True,
    scale_rewards=True,
    loss="kl_penalty",
  )
  agent = agent_lib.PPOAgent(OBS, BOX, num_envs=2, config=config)
  agent.add_unrolls(_random_unroll(agent, rng, 2))
  agent.train_step()
  assert set(agent.checkpoint_objects()) == {
    "network",
    "optimizer",
    "step",
    "kl_coef",
    "observation_normalizer",
    "reward_scaler",
  }
  restored = checkpoint_round_trip(
    agent,
    lambda: agent_lib.PPOAgent(OBS, BOX, num_envs=2, config=config),
    tmp_path,
  )
  assert int(restored.step_counter.numpy()) == 1
  # The optimizer's slots came back too.
  assert len(restored._optimizer.variables) == len(agent._optimizer.variables)
  for a, b in zip(agent._optimizer.variables, restored._optimizer.variables):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # The restored agent acts as the saved one (network and normalizer).
  obs = rng.normal(size=(5, 4)).astype(np.float32) * 3
  mask = np.ones(5, bool)
  a = agent.act(act_inputs(obs, eval_mask=mask))
  b = restored.act(act_inputs(obs, eval_mask=mask))
  np.testing.assert_array_equal(a.action, b.action)
  np.testing.assert_array_equal(a.value, b.value)


def test_queue_blocks_when_full_and_stop_unblocks():
  rng = np.random.default_rng(4)
  agent = agent_lib.PPOAgent(
    OBS, DISCRETE, num_envs=2, config=PPOConfig(unroll_length=2, batch_size=2)
  )
  unroll = _random_unroll(agent, rng, 2)
  agent.add_unrolls(unroll)  # fills the queue (capacity = batch_size)
  done = threading.Event()

  def producer():
    agent.add_unrolls(unroll)
    done.set()

  thread = threading.Thread(target=producer, daemon=True)
  thread.start()
  time.sleep(0.2)
  assert not done.is_set()  # blocked: back-pressure on the actors
  agent.train_step()  # frees the queue
  assert done.wait(5)
  agent.train_step()
  # An empty queue blocks train_step until stop() is called.
  result = {}
  trainer = threading.Thread(
    target=lambda: result.update(out=agent.train_step()), daemon=True
  )
  trainer.start()
  time.sleep(0.2)
  assert trainer.is_alive()
  agent.stop()
  trainer.join(5)
  assert result["out"] == {}


def test_bad_unrolls_are_rejected():
  rng = np.random.default_rng(5)
  agent = agent_lib.PPOAgent(
    OBS, BOX, num_envs=2, config=PPOConfig(unroll_length=3, batch_size=2)
  )
  unroll = _random_unroll(agent, rng, 2)
  del unroll.extras[agent_lib.RAW_ACTION]
  with pytest.raises(ValueError, match="lacks 'raw_action'"):
    agent.add_unrolls(unroll)
  short = _random_unroll(agent, rng, 2)
  short.observation = short.observation[:, :3]
  with pytest.raises(ValueError, match=r"unroll_length \+ 1 = 4"):
    agent.add_unrolls(short)


def test_config_validation_messages():
  with pytest.raises(ValueError, match="num_minibatches"):
    PPOConfig(unroll_length=2, batch_size=2, num_minibatches=5)
  with pytest.raises(ValueError, match="total_learner_steps"):
    PPOConfig(lr_schedule="linear")
  with pytest.raises(ValueError, match="allowed: clip, kl_penalty"):
    PPOConfig(loss="adaptive")
  with pytest.raises(ValueError, match="clip_ratio"):
    PPOConfig(clip_ratio=1.5)
  with pytest.raises(ValueError, match="allowed: behaviour, proximal"):
    PPOConfig(surrogate_anchor="target")
  with pytest.raises(ValueError, match="anchors the clipped surrogate"):
    PPOConfig(surrogate_anchor="proximal", loss="kl_penalty")
  with pytest.raises(ValueError, match="normalize_observations needs float"):
    agent_lib.PPOAgent(
      ArraySpec((84, 84, 4), "uint8", "frames"),
      DISCRETE,
      1,
      PPOConfig(normalize_observations=True),
    )


def test_create_agent_reads_gin_bindings():
  gin.clear_config()
  try:
    gin.parse_config(
      ["PPOConfig.unroll_length = 7", "PPOConfig.bound_handling = 'tanh'"]
    )
    agent = agent_lib.create_agent(OBS, BOX, num_envs=3)
  finally:
    gin.clear_config()
  assert agent.unroll_length == 7 and agent.distribution.bounds == "tanh"
  assert agent_lib.create_agent(OBS, DISCRETE, 3).distribution.num_params == 3


def _train_bandit(agent, context_fn, reward_fn, updates, rng):
  num_envs, t1 = agent.config.batch_size, agent.unroll_length + 1
  for version in range(updates):
    obs = context_fn(rng, (num_envs, t1))
    agent.add_unrolls(_collect(agent, obs, reward_fn, version=version))
    agent.train_step()


def test_learns_discrete_contextual_bandit():
  """4 contexts (one-hot), reward 1 for the action equal to the context."""
  spec = ArraySpec((), "int32", "action", num_values=4)
  config = PPOConfig(
    unroll_length=8,
    batch_size=8,
    num_epochs=4,
    num_minibatches=2,
    learning_rate=3e-3,
    entropy_cost=0.0,
  )
  agent = agent_lib.PPOAgent(ArraySpec((4,), "float32", "obs"), spec, 8, config)
  eye = np.eye(4, dtype=np.float32)
  context_fn = lambda rng, shape: eye[rng.integers(0, 4, size=shape)]
  reward_fn = lambda obs, action: (obs.argmax(-1) == action).astype(np.float32)
  _train_bandit(agent, context_fn, reward_fn, 25, np.random.default_rng(6))
  logits, _ = agent.network(eye)
  probs = tf.nn.softmax(logits).numpy()
  assert np.all(np.diag(probs) > 0.9), probs


@pytest.mark.parametrize("bounds", ["tanh", "clip"])
def test_learns_continuous_contextual_bandit(bounds):
  """Context c in {-1, 1}; reward -(a - 0.5 c)^2 for 2-D actions in [-1, 1]."""
  config = PPOConfig(
    unroll_length=8,
    batch_size=8,
    num_epochs=4,
    num_minibatches=2,
    learning_rate=3e-3,
    entropy_cost=0.0,
    bound_handling=bounds,
    init_log_std=-0.5,
  )
  agent = agent_lib.PPOAgent(ArraySpec((1,), "float32", "obs"), BOX, 8, config)
  context_fn = lambda rng, shape: rng.choice(
    [-1.0, 1.0], size=shape + (1,)
  ).astype(np.float32)
  reward_fn = lambda obs, action: -np.sum((action - 0.5 * obs) ** 2, axis=-1)
  _train_bandit(agent, context_fn, reward_fn, 40, np.random.default_rng(7))
  contexts = np.array([[-1.0], [1.0]], np.float32)
  greedy = agent.act(act_inputs(contexts, eval_mask=np.ones(2, bool))).action
  np.testing.assert_allclose(greedy, 0.5 * np.repeat(contexts, 2, 1), atol=0.15)


@pytest.mark.parametrize(
  "domain,observation_spec,action_spec",
  [
    ("classic", OBS, ArraySpec((), "int64", "action", num_values=2)),
    (
      "mujoco",
      ArraySpec((17,), "float32", "observation"),
      ArraySpec(
        (6,),
        "float32",
        "action",
        minimum=np.asarray(-1.0),
        maximum=np.asarray(1.0),
      ),
    ),
    (
      "atari",
      ArraySpec((84, 84, 4), "uint8", "frames"),
      ArraySpec((), "int32", "action", num_values=6),
    ),
  ],
)
def test_gin_files_build_valid_agents(domain, observation_spec, action_spec):
  with gin_file_parsed(domain, "ppo"):
    agent = agent_lib.create_agent(observation_spec, action_spec, 8)
  obs = np.zeros((2,) + observation_spec.shape, observation_spec.dtype)
  out = agent.act(act_inputs(obs))
  assert out.action.shape == (2,) + action_spec.shape
