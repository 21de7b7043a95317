"""Tests for TD3 and DDPG: the smoothed clipped-double-Q target against a
NumPy reference of the paper's equations, delayed updates, DDPG's config,
config validation, the agent, gin files and one short run through the real
learner and actors."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gin
import numpy as np
import pytest
import tensorflow as tf

from seed_rl import registry
from seed_rl.agents.td3 import agent as agent_lib
from seed_rl.agents.td3 import loss as loss_lib
from seed_rl.agents.td3.config import TD3Config
from seed_rl.networks import mlp_torso
from seed_rl.common import transitions
from seed_rl.common.agent_api import Unroll
from seed_rl.common.specs import ArraySpec

from tests.support import launch
from tests.support.helpers import PENDULUM_ACT as ACT
from tests.support.helpers import PENDULUM_OBS as OBS
from tests.support.helpers import checkpoint_round_trip, fill, gin_file_parsed
from tests.support.helpers import pendulum_critics_agree, pendulum_unroll
from tests.support.helpers import random_act_inputs


# ------------------------------------------------ NumPy reference maths ---


def np_td3_targets(
  reward,
  terminated,
  truncated,
  bootstrap_value,
  target_action,
  noise,
  target_q1,
  target_q2,
  gamma,
  policy_noise,
  noise_clip,
  twin=True,
):
  """One-step TD3 targets of steps 0..T-1 from time-major [T+1, B] inputs,
  per transition, from eq. (10), (14), (15) of Fujimoto et al. (2018):
    eps = clip(policy_noise * noise, -c, c)
    a' = clip(mu'(s') + eps, -1, 1)                 (normalised action box)
    y = r + gamma min_j Q'_j(s', a')   (Q'_1 only without twins)
  with termination -> y = r and truncation -> y = r + gamma bootstrap_value.
  target_q1/2 are callables (step, env, action) -> value.
  """
  steps, batch = reward.shape
  out = np.zeros((steps - 1, batch))
  for b in range(batch):
    for t in range(steps - 1):
      y = float(reward[t + 1, b])
      if terminated[t + 1, b]:
        pass
      elif truncated[t + 1, b]:
        y += gamma * float(bootstrap_value[t + 1, b])
      else:
        eps = np.clip(policy_noise * noise[t + 1, b], -noise_clip, noise_clip)
        a = np.clip(target_action[t + 1, b] + eps, -1.0, 1.0)
        q = target_q1(t + 1, b, a)
        if twin:
          q = min(q, target_q2(t + 1, b, a))
        y += gamma * q
      out[t, b] = y
  return out


# ------------------------------------------------------------------ losses ---


def test_smoothed_target_action_clips_noise_and_action():
  mu = tf.constant([[0.0, 0.9], [-0.95, 0.2], [0.5, -0.5]])
  noise = tf.constant([[0.5, 1.0], [-4.0, 10.0], [1.0, -1.0]])
  got = loss_lib.smoothed_target_action(mu, noise, 0.2, 0.5).numpy()
  # eps = clip(0.2 * noise, -0.5, 0.5); a' = clip(mu + eps, -1, 1).
  want = [[0.1, 1.0], [-1.0, 0.7], [0.7, -0.7]]
  np.testing.assert_allclose(got, want, rtol=1e-6)
  # Smoothing off (DDPG): the target actor's action as it is.
  np.testing.assert_array_equal(
    loss_lib.smoothed_target_action(mu, noise, 0.0, 0.5).numpy(), mu.numpy()
  )


@pytest.mark.parametrize("twin", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_td3_target_matches_numpy_reference(seed, twin):
  """Unroll -> replay transitions -> smoothed clipped double-Q target,
  against the per-step reference (termination, truncation inside)."""
  rng = np.random.default_rng(seed)
  steps, batch, dims = 10, 4, 2
  terminated = rng.random((steps, batch)) < 0.2
  truncated = (rng.random((steps, batch)) < 0.2) & ~terminated
  reward = rng.normal(size=(steps, batch)).astype(np.float32)
  bootstrap = np.where(truncated, rng.normal(size=(steps, batch)) * 4, 0.0)
  target_action = rng.uniform(-1, 1, size=(steps, batch, dims))
  noise = rng.normal(size=(steps, batch, dims)) * 3  # some beyond the clip
  w1, w2 = rng.normal(size=(2, steps, batch, dims))
  # Linear stand-ins for the target critics: Q'_j(s_t, a) = w_j[t] . a.
  q1 = lambda t, b, a: float(w1[t, b] @ a)
  q2 = lambda t, b, a: float(w2[t, b] @ a)
  gamma, policy_noise, noise_clip = 0.95, 0.2, 0.5

  obs = np.zeros((batch, steps, 3), np.float32)
  obs[:, :, 0] = np.arange(batch)[:, None]
  obs[:, :, 1] = np.arange(steps)[None, :]
  unroll = Unroll(
    env_ids=np.arange(batch, dtype=np.int32),
    observation=obs,
    reward=reward.T.copy(),
    terminated=terminated.T.copy(),
    truncated=truncated.T.copy(),
    bootstrap_value=bootstrap.T.astype(np.float32),
    prev_action=np.zeros((batch, steps, dims), np.float32),
    action=np.zeros((batch, steps, dims), np.float32),
    value=np.zeros((batch, steps), np.float32),
    extras={},
    core_state=(),
    policy_version=np.zeros((batch, steps), np.int64),
  )
  items = transitions.unroll_transitions(unroll, gamma, n_step=1)
  env = items["next_observation"][:, 0].astype(int)
  step = items["next_observation"][:, 1].astype(int)
  next_action = loss_lib.smoothed_target_action(
    tf.constant(target_action[step, env], tf.float32),
    tf.constant(noise[step, env], tf.float32),
    policy_noise,
    noise_clip,
  )
  next_q = [
    tf.reduce_sum(tf.constant(w[step, env], tf.float32) * next_action, -1)
    for w in ((w1, w2) if twin else (w1,))
  ]
  got = loss_lib.td3_target(
    tf.constant(items["return"]), tf.constant(items["discount"]), *next_q
  ).numpy()
  want = np_td3_targets(
    reward,
    terminated,
    truncated,
    bootstrap,
    target_action,
    noise,
    q1,
    q2,
    gamma,
    policy_noise,
    noise_clip,
    twin,
  )
  np.testing.assert_allclose(got, want.T.reshape(-1), rtol=1e-5, atol=1e-5)
  assert terminated[1:].any() and truncated[1:].any()


def test_critic_actor_and_exploration_by_numpy():
  rng = np.random.default_rng(0)
  q1, q2, y = (rng.normal(size=16) for _ in range(3))
  c = lambda x: tf.constant(x, tf.float32)
  assert loss_lib.critic_loss(c(q1), c(y), c(q2)).numpy() == pytest.approx(
    np.mean((q1 - y) ** 2) + np.mean((q2 - y) ** 2), rel=1e-5
  )
  assert loss_lib.critic_loss(c(q1), c(y)).numpy() == pytest.approx(
    np.mean((q1 - y) ** 2), rel=1e-5
  )
  assert loss_lib.actor_loss(c(q1)).numpy() == pytest.approx(-np.mean(q1))
  mu = rng.uniform(-1, 1, size=(16, 2))
  noise = rng.normal(size=(16, 2)) * 5
  np.testing.assert_allclose(
    loss_lib.exploration_action(c(mu), c(noise), 0.1).numpy(),
    np.clip(mu + 0.1 * noise, -1, 1),
    rtol=1e-6,
  )


# ------------------------------------------------------------------ config ---


@pytest.mark.parametrize(
  "kwargs,match",
  [
    (dict(batch_size=0), "batch_size must be a positive integer"),
    (dict(tau=1.5), r"tau must be in \(0, 1\]"),
    (dict(discount=-0.1), r"discount must be in \[0, 1\]"),
    (dict(policy_noise=-0.1), "policy_noise must be >= 0"),
    (dict(noise_clip=0.0), "noise_clip must be > 0"),
    (dict(exploration_noise=-1.0), "exploration_noise must be >= 0"),
    (dict(policy_delay=0), "policy_delay must be a positive integer"),
    (dict(unroll_length=1, n_step=2), "unroll_length .* must be >= n_step"),
    (
      dict(min_replay_size=10, batch_size=64),
      r"min_replay_size \(10\) must be >= batch_size",
    ),
    (dict(random_steps=1.5), "random_steps must be an integer >= 0"),
    (dict(learning_rate=0.0), "learning_rate must be > 0"),
    (dict(optimizer_epsilon=0.0), "optimizer_epsilon must be > 0"),
    (dict(head_hidden=(-1,)), "head_hidden must hold positive"),
    (dict(samples_per_insert=-1.0), "samples_per_insert must be > 0"),
  ],
)
def test_config_validation(kwargs, match):
  base = dict(min_replay_size=256, batch_size=64)
  base.update(kwargs)
  with pytest.raises(ValueError, match=r"TD3Config\." + match):
    TD3Config(**base)


def test_config_defaults_are_cleanrl_and_ddpg_is_td3_without_tricks():
  cfg = TD3Config()
  assert (cfg.learning_rate, cfg.policy_learning_rate) == (3e-4, 3e-4)
  assert (cfg.policy_noise, cfg.noise_clip, cfg.policy_delay) == (0.2, 0.5, 2)
  assert cfg.exploration_noise == 0.1 and cfg.twin_critics
  assert not cfg.is_ddpg
  # Smoothing off: noise_clip is not needed.
  ddpg = TD3Config(twin_critics=False, policy_noise=0.0, noise_clip=0.0)
  assert not ddpg.is_ddpg  # still delayed
  assert TD3Config(twin_critics=False, policy_noise=0.0, policy_delay=1).is_ddpg


# ------------------------------------------------------------------- agent ---


def _config(**kwargs):
  base = dict(
    torso=lambda: mlp_torso((16,), "relu"),
    unroll_length=4,
    batch_size=16,
    min_replay_size=16,
    replay_capacity=1000,
    samples_per_insert=1e4,
    rate_limiter_error_buffer=1e9,
    random_steps=0,
    learning_rate=1e-3,
    seed=0,
  )
  base.update(kwargs)
  return TD3Config(**base)


def _values(variables):
  return [v.numpy() for v in variables]


def _same(a, b):
  return all(np.array_equal(x, y) for x, y in zip(a, b))


def test_agent_trains_on_pendulum_spec_with_finite_metrics():
  agent_lib.create_agent(OBS, ACT, 4)  # gin defaults (CleanRL)
  agent = agent_lib.TD3Agent(OBS, ACT, 4, _config())
  fill(agent, pendulum_unroll)
  assert len(agent.replay) == 32
  metrics = agent.train_step()
  for name in (
    "loss/total",
    "loss/critic",
    "loss/actor",
    "q/mean",
    "q/target_mean",
    "q/td_error",
    "opt/learning_rate",
    "grad/norm",
    "grad/norm_torso",
    "grad/norm_head",
    "perf/policy_lag",
    "replay/size",
  ):
    assert np.isfinite(metrics[name]), name
  assert metrics["loss/total"] == pytest.approx(
    metrics["loss/critic"] + metrics["loss/actor"]
  )
  assert metrics["errors/nonfinite_updates"] == 0
  assert len(agent.critics) == 2


def test_delayed_actor_and_target_updates():
  """Critics move every step; the actor and every target network only on
  steps divisible by policy_delay, the targets by Polyak averaging."""
  agent = agent_lib.TD3Agent(OBS, ACT, 4, _config(policy_delay=3, tau=0.2))
  fill(agent, pendulum_unroll)
  actor = lambda: _values(agent.actor.trainable_variables)
  critics = lambda: _values(
    [v for c in agent.critics for v in c.trainable_variables]
  )
  targets = lambda: _values(
    list(agent.target_actor.trainable_variables)
    + [v for c in agent.target_critics for v in c.trainable_variables]
  )
  online = lambda: actor() + critics()
  assert _same(online(), targets())  # copied at construction
  for step in range(6):
    a0, c0, t0 = actor(), critics(), targets()
    metrics = agent.train_step()
    assert not _same(c0, critics()), step
    if step % 3 == 0:
      assert "loss/actor" in metrics
      assert not _same(a0, actor())
      for t_before, o_now, t_now in zip(t0, online(), targets()):
        np.testing.assert_allclose(
          t_now, 0.2 * o_now + 0.8 * t_before, rtol=1e-5, atol=1e-7
        )
    else:
      assert "loss/actor" not in metrics
      assert metrics["loss/total"] == pytest.approx(metrics["loss/critic"])
      assert _same(a0, actor()), step
      assert _same(t0, targets()), step


def test_ddpg_one_critic_every_step():
  cfg = _config(twin_critics=False, policy_noise=0.0, policy_delay=1)
  agent = agent_lib.TD3Agent(OBS, ACT, 4, cfg)
  assert len(agent.critics) == len(agent.target_critics) == 1
  fill(agent, pendulum_unroll)
  for _ in range(3):
    a0 = _values(agent.actor.trainable_variables)
    t0 = _values(agent.target_actor.trainable_variables)
    metrics = agent.train_step()
    assert "loss/actor" in metrics and np.isfinite(metrics["loss/total"])
    assert not _same(a0, _values(agent.actor.trainable_variables))
    assert not _same(t0, _values(agent.target_actor.trainable_variables))


def test_act_exploration_noise_eval_and_value():
  agent = agent_lib.TD3Agent(OBS, ACT, 4096, _config(exploration_noise=0.1))
  eval_mask = np.arange(4096) % 2 == 0
  inputs = random_act_inputs(OBS.shape, ACT, 4096, eval_mask=eval_mask)
  inputs.observation[:] = inputs.observation[:1]  # one state for every row
  out = agent.act(inputs)
  mu = agent.actor(inputs.observation[:1]).numpy()[0]
  assert abs(mu[0]) < 0.7  # so the noise is rarely clipped
  np.testing.assert_allclose(out.action[eval_mask], 2.0 * mu[0], rtol=1e-5)
  noise = out.action[~eval_mask, 0] - 2.0 * mu[0]
  # std 0.1 in half-ranges = 0.2 in Pendulum's torque units.
  assert np.std(noise) == pytest.approx(0.2, rel=0.1)
  assert abs(np.mean(noise)) < 0.02
  assert np.all(np.abs(out.action) <= 2.0)
  q = np.minimum(
    *(c(inputs.observation[:1], mu[None]).numpy() for c in agent.critics)
  )
  np.testing.assert_allclose(out.value, q[0], rtol=1e-4, atol=1e-5)


def test_random_steps_count_inserted_transitions():
  agent = agent_lib.TD3Agent(OBS, ACT, 4, _config(random_steps=20))
  assert agent.random_phase()
  inputs = random_act_inputs(OBS.shape, ACT, 256)
  first = agent.act(inputs).action
  assert first.min() < -1.5 and first.max() > 1.5  # uniform over [-2, 2]
  agent.add_unrolls(pendulum_unroll())
  assert agent.env_steps == 16 and agent.random_phase()
  agent.add_unrolls(pendulum_unroll(seed=1))
  assert agent.env_steps == 32 and not agent.random_phase()
  mu = 2.0 * agent.actor(inputs.observation).numpy()
  assert np.std(agent.act(inputs).action - mu) == pytest.approx(0.2, rel=0.2)


def test_learns_a_bandit():
  """One-step episodes with reward -(a - 1)^2 on the [-2, 2] Box: the
  deterministic action moves to 1 (deterministic policy gradient sign)."""
  cfg = _config(
    batch_size=64,
    min_replay_size=64,
    learning_rate=3e-3,
    policy_delay=1,
    torso=lambda: mlp_torso((64, 64), "relu"),
  )
  agent = agent_lib.TD3Agent(OBS, ACT, 64, cfg)
  unroll = pendulum_unroll(batch=64)
  unroll.observation[:] = 0.0  # one state
  unroll.terminated[:] = True
  unroll.truncated[:] = False
  unroll.reward[:, 1:] = -((unroll.action[:, :-1, 0] - 1.0) ** 2)
  agent.add_unrolls(unroll)
  inputs = random_act_inputs(OBS.shape, ACT, 4, eval_mask=np.ones(4, bool))
  inputs.observation[:] = 0.0
  for _ in range(500):
    agent.train_step()
  np.testing.assert_allclose(agent.act(inputs).action, 1.0, atol=0.15)


def test_checkpoint_round_trip(tmp_path):
  cfg = _config()
  agent = agent_lib.TD3Agent(OBS, ACT, 4, cfg)
  fill(agent, pendulum_unroll)
  for _ in range(3):
    agent.train_step()
  restored = checkpoint_round_trip(
    agent, lambda: agent_lib.TD3Agent(OBS, ACT, 4, cfg), tmp_path
  )
  assert int(restored.step_counter.numpy()) == 3
  assert restored.env_steps == 32
  # The restored networks compute with the restored weights.
  x = pendulum_critics_agree(restored, agent)
  for mine, theirs in (
    (restored.actor, agent.actor),
    (restored.target_actor, agent.target_actor),
  ):
    np.testing.assert_allclose(mine(x).numpy(), theirs(x).numpy())


def test_stop_unblocks_train_step_and_bad_specs_are_refused():
  agent = agent_lib.TD3Agent(OBS, ACT, 4, _config(min_replay_size=100))
  agent.stop()
  assert agent.train_step() == {}
  with pytest.raises(ValueError, match="TD3 needs a continuous action spec"):
    agent_lib.TD3Agent(OBS, ArraySpec((), "int32", num_values=3), 4, _config())
  ddpg = _config(twin_critics=False, policy_noise=0.0, policy_delay=1)
  with pytest.raises(ValueError, match="DDPG squashes actions"):
    agent_lib.TD3Agent(OBS, ArraySpec((2,), "float32"), 4, ddpg)


# --------------------------------------------------------------- gin files ---


def _parse(env, agent):
  # The short name `ddpg` resolves to the td3 package's agent.
  assert registry.agent_module(agent) is agent_lib
  with gin_file_parsed(env, agent):
    return TD3Config(), gin.query_parameter(f"{env}.create_environment.env_id")


@pytest.mark.parametrize("env", ["classic", "mujoco"])
def test_gin_files_parse_into_valid_configs(env):
  td3, env_id = _parse(env, "td3")
  ddpg, ddpg_env_id = _parse(env, "ddpg")
  assert env_id == ddpg_env_id
  assert env_id == ("Pendulum-v1" if env == "classic" else "HalfCheetah-v5")
  assert td3.twin_critics and td3.policy_noise > 0 and td3.policy_delay == 2
  assert not td3.is_ddpg and ddpg.is_ddpg
  if env == "mujoco":
    assert td3.learning_rate == td3.policy_learning_rate == 3e-4
    assert (td3.exploration_noise, td3.noise_clip) == (0.1, 0.5)
    assert td3.random_steps == td3.min_replay_size == 25000


# -------------------------------------------------------------- end to end ---


@pytest.mark.timeout(120)  # the learner start (TF import, tracing) dominates
def test_pendulum_end_to_end(tmp_path):
  """The real launcher: a learner and two actor processes on Pendulum-v1,
  gRPC, replay, 20 TD3 updates, TensorBoard diagnostics and a checkpoint."""
  logdir = tmp_path / "run"
  bindings = [
    "TD3Config.min_replay_size = 64",
    "TD3Config.random_steps = 64",
    "TD3Config.batch_size = 32",
    "TD3Config.samples_per_insert = 32.0",
  ]
  launch.train_briefly(logdir, "classic", "td3", 20, bindings, timeout=180)
  want = {
    "loss/total",
    "loss/critic",
    "loss/actor",
    "q/mean",
    "q/td_error",
    "grad/norm",
    "opt/learning_rate",
    "perf/samples_per_env_step",
  }
  missing = want - launch.event_tags(logdir)
  assert not missing, sorted(missing)
