"""Tests for SAC: losses against NumPy references of the paper's equations,
the squashed log-probability, config validation, the agent, gin files and
one short run through the real learner and actors."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gin
import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents.sac import agent as agent_lib
from seed_rl.agents.sac import loss as loss_lib
from seed_rl.agents.sac.config import SACConfig
from seed_rl.networks import mlp_torso
from seed_rl.agents import distributions
from seed_rl.common import transitions
from seed_rl.common.agent_api import ActInputs, Unroll
from seed_rl.common.specs import ArraySpec

from tests.support import launch
from tests.support.helpers import PENDULUM_ACT as ACT
from tests.support.helpers import PENDULUM_OBS as OBS
from tests.support.helpers import checkpoint_round_trip, fill, gin_file_parsed
from tests.support.helpers import pendulum_critics_agree, pendulum_unroll
from tests.support.helpers import random_act_inputs


# ------------------------------------------------ NumPy reference maths ---


def np_gaussian_log_density(u, mean, log_std):
  """log N(u; mean, exp(log_std)^2), summed over the last axis."""
  std = np.exp(log_std)
  return np.sum(
    -0.5 * ((u - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi),
    axis=-1,
  )


def np_squashed_log_prob(u, mean, log_std):
  """log pi(a) for a = tanh(u): change of variables, p(a) = p(u) / |da/du|
  with da/du = 1 - tanh(u)^2 computed directly (float64)."""
  u = np.asarray(u, np.float64)
  jacobian = 1.0 - np.tanh(u) ** 2
  return np_gaussian_log_density(u, mean, log_std) - np.sum(
    np.log(jacobian), axis=-1
  )


def np_soft_q_targets(
  reward,
  terminated,
  truncated,
  bootstrap_value,
  next_q1,
  next_q2,
  next_log_prob,
  alpha,
  gamma,
):
  """One-step soft targets of steps 0..T-1, time-major [T+1, B] inputs,
  written per transition from eq. (2)-(3) of Haarnoja et al. (2018):
    terminated[t+1]: y = r[t+1]                  (no bootstrap)
    truncated[t+1]:  y = r[t+1] + gamma * bootstrap_value[t+1]
    otherwise:       y = r[t+1] + gamma * (min(Q'1, Q'2) - alpha log pi)(t+1)
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
        soft_v = min(next_q1[t + 1, b], next_q2[t + 1, b])
        soft_v -= alpha * next_log_prob[t + 1, b]
        y += gamma * soft_v
      out[t, b] = y
  return out


# ------------------------------------------------------------------ losses ---


def test_squashed_log_prob_matches_change_of_variables():
  rng = np.random.default_rng(0)
  mean = rng.normal(size=(64, 3))
  log_std = rng.uniform(-2, 1, size=(64, 3))
  u = mean + np.exp(log_std) * rng.normal(size=(64, 3))
  got = loss_lib.squashed_log_prob(
    tf.constant(mean, tf.float32),
    tf.constant(log_std, tf.float32),
    tf.constant(u, tf.float32),
  ).numpy()
  np.testing.assert_allclose(
    got, np_squashed_log_prob(u, mean, log_std), rtol=1e-4, atol=1e-4
  )
  # The same density as the PPO family's tanh Gaussian on the Box [-1, 1].
  family = distributions.DiagGaussian(3, "tanh", -np.ones(3), np.ones(3))
  params = tf.constant(np.concatenate([mean, log_std], -1), tf.float32)
  np.testing.assert_allclose(
    family.log_prob(params, tf.constant(u, tf.float32)).numpy(),
    got,
    rtol=1e-4,
    atol=1e-4,
  )


def test_squashed_density_integrates_to_one_and_stays_finite():
  """pi(a) over a in (-1, 1) integrates to 1 (1-D, trapezoid in u space:
  integral pi(a) da = integral pi(tanh(u)) (1 - tanh(u)^2) du)."""
  u = np.linspace(-12, 12, 200001)
  log_pi = loss_lib.squashed_log_prob(
    tf.constant([[0.7]] * u.size, tf.float64),
    tf.constant([[0.3]] * u.size, tf.float64),
    tf.constant(u[:, None], tf.float64),
  ).numpy()
  integrand = np.exp(log_pi) * (1.0 - np.tanh(u) ** 2)
  assert np.trapezoid(integrand, u) == pytest.approx(1.0, abs=1e-6)
  # Where tanh(u) rounds to 1 in float32, the stable form stays finite and
  # equals log N(u) - 2 (log 2 - |u|) asymptotically.
  big = tf.constant([[30.0], [-30.0]], tf.float32)
  zeros = tf.zeros_like(big)
  got = loss_lib.squashed_log_prob(zeros, zeros, big).numpy()
  assert np.all(np.isfinite(got))
  want = np_gaussian_log_density(big.numpy(), 0.0, 0.0) - 2 * (np.log(2) - 30.0)
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_sample_action_is_reparameterised():
  mean = tf.Variable([[0.2, -0.4]])
  log_std = tf.Variable([[-0.5, 0.1]])
  noise = tf.constant([[0.3, -1.2]])
  with tf.GradientTape() as tape:
    action, log_prob = loss_lib.sample_action(mean, log_std, noise)
    objective = tf.reduce_sum(action) + log_prob[0]
  u = mean.numpy() + np.exp(log_std.numpy()) * noise.numpy()
  np.testing.assert_allclose(action.numpy(), np.tanh(u), rtol=1e-6)
  np.testing.assert_allclose(
    log_prob.numpy(),
    np_squashed_log_prob(u, mean.numpy(), log_std.numpy()),
    rtol=1e-5,
  )
  grads = tape.gradient(objective, [mean, log_std])
  assert all(g is not None and np.all(g.numpy() != 0) for g in grads)


def _random_case(seed, steps=12, batch=5, p_end=0.2):
  rng = np.random.default_rng(seed)
  terminated = rng.random((steps, batch)) < p_end
  truncated = (rng.random((steps, batch)) < p_end) & ~terminated
  bootstrap = np.where(truncated, rng.normal(size=(steps, batch)) * 5, 0.0)
  return dict(
    reward=rng.normal(size=(steps, batch)).astype(np.float32),
    terminated=terminated,
    truncated=truncated,
    bootstrap_value=bootstrap.astype(np.float32),
    next_q1=rng.normal(size=(steps, batch)).astype(np.float32) * 3,
    next_q2=rng.normal(size=(steps, batch)).astype(np.float32) * 3,
    next_log_prob=rng.normal(size=(steps, batch)).astype(np.float32),
  )


def _unroll(case, action=None):
  """A batch-major Unroll from a time-major case (observation[b, t] =
  [b, t, 0] so transitions can be traced back to their steps)."""
  steps, batch = case["reward"].shape
  obs = np.zeros((batch, steps, 3), np.float32)
  obs[:, :, 0] = np.arange(batch)[:, None]
  obs[:, :, 1] = np.arange(steps)[None, :]
  if action is None:
    action = np.zeros((batch, steps, 1), np.float32)
  return Unroll(
    env_ids=np.arange(batch, dtype=np.int32),
    observation=obs,
    reward=case["reward"].T.copy(),
    terminated=case["terminated"].T.copy(),
    truncated=case["truncated"].T.copy(),
    bootstrap_value=case["bootstrap_value"].T.copy(),
    prev_action=np.zeros_like(action),
    action=action,
    value=np.zeros((batch, steps), np.float32),
    extras={},
    core_state=(),
    policy_version=np.zeros((batch, steps), np.int64),
  )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_soft_q_target_matches_numpy_reference(seed):
  """Unroll -> replay transitions -> soft target, against the per-step
  reference: terminations stop, truncations bootstrap the stored value."""
  case = _random_case(seed)
  alpha, gamma = 0.3, 0.9
  items = transitions.unroll_transitions(_unroll(case), gamma, n_step=1)
  # Each transition's next observation names its step: the networks' values
  # at that step are looked up from the case (what the target nets return).
  env = items["next_observation"][:, 0].astype(int)
  step = items["next_observation"][:, 1].astype(int)
  got = loss_lib.soft_q_target(
    tf.constant(items["return"]),
    tf.constant(items["discount"]),
    tf.constant(case["next_q1"][step, env]),
    tf.constant(case["next_q2"][step, env]),
    tf.constant(case["next_log_prob"][step, env]),
    tf.constant(alpha),
  ).numpy()
  want = np_soft_q_targets(
    case["reward"],
    case["terminated"],
    case["truncated"],
    case["bootstrap_value"],
    case["next_q1"],
    case["next_q2"],
    case["next_log_prob"],
    alpha,
    gamma,
  )
  # items are batch-major (env 0's transitions first).
  np.testing.assert_allclose(got, want.T.reshape(-1), rtol=1e-5, atol=1e-5)
  assert case["terminated"][1:].any() and case["truncated"][1:].any()


def test_soft_q_target_by_hand():
  y = loss_lib.soft_q_target(
    tf.constant([1.0, 1.0, 1.0]),
    tf.constant([0.5, 0.0, 0.5]),
    tf.constant([2.0, 2.0, -1.0]),
    tf.constant([3.0, 3.0, -4.0]),
    tf.constant([-1.0, -1.0, 2.0]),
    tf.constant(0.5),
  ).numpy()
  # min(2, 3) + 0.5 = 2.5 -> 1 + 1.25; ended -> 1; min(-1, -4) - 1 -> -1.5.
  np.testing.assert_allclose(y, [2.25, 1.0, 1.0 - 2.5])


def test_critic_policy_and_temperature_losses_match_numpy():
  rng = np.random.default_rng(3)
  q1, q2, target, log_prob = (rng.normal(size=32) for _ in range(4))
  alpha, log_alpha, target_entropy = 0.2, np.log(0.2), -3.0
  c = lambda x: tf.constant(x, tf.float32)
  assert loss_lib.critic_loss(c(q1), c(q2), c(target)).numpy() == (
    pytest.approx(
      0.5 * np.mean((q1 - target) ** 2) + 0.5 * np.mean((q2 - target) ** 2),
      rel=1e-5,
    )
  )
  assert loss_lib.policy_loss(
    c(q1), c(q2), c(log_prob), c(alpha)
  ).numpy() == pytest.approx(
    np.mean(alpha * log_prob - np.minimum(q1, q2)), rel=1e-5
  )
  var = tf.Variable(log_alpha, dtype=tf.float32)
  with tf.GradientTape() as tape:
    loss = loss_lib.temperature_loss(var, c(log_prob), target_entropy)
  assert loss.numpy() == pytest.approx(
    -np.mean(log_alpha * (log_prob + target_entropy)), rel=1e-5
  )
  # d/d log alpha = entropy estimate - target: alpha falls while the policy
  # is more random than the target.
  entropy = -np.mean(log_prob)
  assert tape.gradient(loss, var).numpy() == pytest.approx(
    entropy - target_entropy, rel=1e-5
  )


def test_policy_loss_treats_alpha_as_a_constant():
  log_alpha = tf.Variable(0.0)
  log_prob = tf.Variable([0.5, -0.2])
  with tf.GradientTape() as tape:
    loss = loss_lib.policy_loss(
      tf.constant([1.0, 2.0]),
      tf.constant([0.0, 3.0]),
      log_prob,
      tf.exp(log_alpha),
    )
  g_alpha, g_log_prob = tape.gradient(loss, [log_alpha, log_prob])
  assert g_alpha is None
  np.testing.assert_allclose(g_log_prob.numpy(), [0.5, 0.5])


# ------------------------------------------------------------------ config ---


@pytest.mark.parametrize(
  "kwargs,match",
  [
    (dict(batch_size=0), "batch_size must be a positive integer"),
    (dict(tau=0.0), r"tau must be in \(0, 1\]"),
    (dict(discount=1.5), r"discount must be in \[0, 1\]"),
    (dict(unroll_length=2, n_step=3), "unroll_length .* must be >= n_step"),
    (
      dict(min_replay_size=10, batch_size=64),
      r"min_replay_size \(10\) must be >= batch_size",
    ),
    (
      dict(min_replay_size=100, replay_capacity=50),
      r"min_replay_size \(100\) must be <= replay_capacity",
    ),
    (dict(samples_per_insert=0.0), "samples_per_insert must be > 0"),
    (dict(random_steps=-1), "random_steps must be an integer >= 0"),
    (dict(initial_temperature=0.0), "initial_temperature must be > 0"),
    (dict(learning_rate=0.0), "learning_rate must be > 0"),
    (dict(actor_learning_rate=-1.0), "actor_learning_rate must be > 0"),
    (dict(optimizer_epsilon=0.0), "optimizer_epsilon must be > 0"),
    (dict(max_grad_norm=-1.0), "max_grad_norm must be >= 0"),
    (dict(head_hidden=(0,)), "head_hidden must hold positive"),
    (dict(min_log_std=2.0, max_log_std=2.0), "min_log_std .* must be <"),
    (dict(policy_delay=0), "policy_delay must be a positive integer"),
    (dict(torso=3), "torso must be a callable"),
    (
      dict(rate_limiter_error_buffer=10.0, batch_size=64),
      "rate_limiter_error_buffer",
    ),
  ],
)
def test_config_validation(kwargs, match):
  base = dict(min_replay_size=256, batch_size=64)
  base.update(kwargs)
  with pytest.raises(ValueError, match=r"SACConfig\." + match):
    SACConfig(**base)


def test_config_defaults_are_cleanrl():
  cfg = SACConfig()
  assert (cfg.batch_size, cfg.tau, cfg.discount) == (256, 0.005, 0.99)
  assert (cfg.learning_rate, cfg.policy_learning_rate) == (1e-3, 3e-4)
  assert cfg.unroll_overlap == cfg.n_step == 1
  assert SACConfig(actor_learning_rate=None).policy_learning_rate == 1e-3


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
    actor_learning_rate=1e-3,
    seed=0,
  )
  base.update(kwargs)
  return SACConfig(**base)


def test_agent_trains_on_pendulum_spec_with_finite_metrics():
  agent = agent_lib.create_agent(OBS, ACT, 4)  # gin defaults (CleanRL)
  assert agent.target_entropy == -1.0
  agent = agent_lib.SACAgent(OBS, ACT, 4, _config())
  fill(agent, pendulum_unroll)
  assert len(agent.replay) == 2 * 4 * 4
  metrics = agent.train_step()
  for name in (
    "loss/total",
    "loss/critic",
    "loss/actor",
    "loss/temperature",
    "policy/entropy",
    "sac/temperature",
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
    metrics["loss/critic"] + metrics["loss/actor"] + metrics["loss/temperature"]
  )
  assert metrics["opt/learning_rate"] == pytest.approx(1e-3)
  assert metrics["errors/nonfinite_updates"] == 0
  assert int(agent.step_counter.numpy()) == 1


def test_replay_holds_normalised_actions_and_truncation_bootstrap():
  agent = agent_lib.SACAgent(OBS, ACT, 4, _config())
  unroll = pendulum_unroll()
  agent.add_unrolls(unroll)
  _, items, _ = agent.replay.sample(1000)
  # Every stored action is the env action mapped from [-2, 2] to [-1, 1].
  env_actions = unroll.action[:, :4].reshape(-1)
  np.testing.assert_allclose(
    np.unique(items["action"][:, 0]), np.unique(env_actions / 2.0), rtol=1e-6
  )
  stored = transitions.unroll_transitions(unroll, 0.99, 1)
  # env 0 terminated at step 2: transition 1 has discount 0, return r only;
  # env 1 truncated at step 3: transition 4+2 adds 0.99 * -7.
  assert stored["discount"][1] == 0.0
  assert stored["return"][1] == pytest.approx(unroll.reward[0, 2])
  assert stored["discount"][4 + 2] == 0.0
  assert stored["return"][4 + 2] == pytest.approx(
    unroll.reward[1, 3] + 0.99 * -7.0
  )
  assert stored["discount"][0] == pytest.approx(0.99)


def test_targets_move_by_polyak_averaging():
  agent = agent_lib.SACAgent(OBS, ACT, 4, _config(tau=0.1))
  fill(agent, pendulum_unroll)
  for critic, target in zip(agent.critics, agent.target_critics):
    for c, t in zip(critic.trainable_variables, target.trainable_variables):
      np.testing.assert_array_equal(c.numpy(), t.numpy())  # copied at start
  before = [
    v.numpy() for t in agent.target_critics for v in t.trainable_variables
  ]
  agent.train_step()
  online = [v.numpy() for c in agent.critics for v in c.trainable_variables]
  after = [
    v.numpy() for t in agent.target_critics for v in t.trainable_variables
  ]
  for b, o, a in zip(before, online, after):
    np.testing.assert_allclose(a, 0.1 * o + 0.9 * b, rtol=1e-5, atol=1e-7)
  assert any(not np.allclose(b, a) for b, a in zip(before, after))


@pytest.mark.parametrize("target_entropy,direction", [(-50.0, -1), (50.0, 1)])
def test_temperature_moves_towards_the_target_entropy(
  target_entropy, direction
):
  agent = agent_lib.SACAgent(
    OBS, ACT, 4, _config(target_entropy=target_entropy)
  )
  fill(agent, pendulum_unroll)
  metrics = agent.train_step()
  assert np.sign(np.log(metrics["sac/temperature"])) == direction
  fixed = agent_lib.SACAgent(OBS, ACT, 4, _config(learn_temperature=False))
  fill(fixed, pendulum_unroll)
  assert fixed.train_step()["sac/temperature"] == pytest.approx(1.0)


def test_policy_delay_skips_actor_and_temperature():
  agent = agent_lib.SACAgent(OBS, ACT, 4, _config(policy_delay=2))
  fill(agent, pendulum_unroll)
  policy = lambda: [v.numpy() for v in agent.policy.trainable_variables]
  first = agent.train_step()  # step 0: critics, then 2 actor updates
  assert "loss/actor" in first
  p0, alpha0 = policy(), agent.log_alpha.numpy()
  second = agent.train_step()  # step 1: critics only
  assert "loss/actor" not in second and "policy/entropy" not in second
  for a, b in zip(p0, policy()):
    np.testing.assert_array_equal(a, b)
  assert agent.log_alpha.numpy() == alpha0
  assert second["loss/total"] == pytest.approx(second["loss/critic"])
  agent.train_step()  # step 2: the actor moves again
  assert any(not np.array_equal(a, b) for a, b in zip(p0, policy()))


def test_act_random_then_stochastic_eval_deterministic():
  agent = agent_lib.SACAgent(OBS, ACT, 64, _config(random_steps=20))
  eval_mask = np.arange(64) % 4 == 0
  inputs = random_act_inputs(OBS.shape, ACT, 64, eval_mask=eval_mask)
  out = agent.act(inputs)
  assert out.action.shape == (64, 1) and out.action.dtype == np.float32
  assert out.value.shape == (64,) and np.all(np.isfinite(out.value))
  assert np.all(np.abs(out.action) <= 2.0)
  mean, _ = agent.policy(inputs.observation)
  greedy = 2.0 * np.tanh(mean.numpy())
  np.testing.assert_allclose(
    out.action[eval_mask], greedy[eval_mask], rtol=1e-5, atol=1e-6
  )
  assert agent.random_phase()
  # Random phase: uniform over the whole Box, whatever the policy says.
  train = np.concatenate(
    [agent.act(inputs).action[~eval_mask] for _ in range(20)]
  )
  assert train.min() < -1.5 and train.max() > 1.5
  assert abs(train.mean()) < 0.2
  agent.add_unrolls(pendulum_unroll())  # 4 envs x 4 transitions < 20
  assert agent.env_steps == 16 and agent.random_phase()
  agent.add_unrolls(pendulum_unroll(seed=1))
  assert agent.env_steps == 32 and not agent.random_phase()
  # Policy phase: tanh-Gaussian samples around the mean (initial std ~ e^-1.5).
  sampled = np.stack([agent.act(inputs).action for _ in range(30)])
  spread = sampled[:, ~eval_mask].std(axis=0)
  assert np.all(spread > 0) and spread.mean() > 0.05
  np.testing.assert_allclose(
    sampled[:, eval_mask],
    np.broadcast_to(greedy[eval_mask], (30, 16, 1)),
    rtol=1e-5,
    atol=1e-6,
  )


def test_act_value_is_the_soft_value():
  """The reported value estimates V(s) = E[min_j Q_j(s, a) - alpha log pi(a|s)]
  with one sample; with a near-zero policy std, a = tanh(mean) and
  E[log pi] = log N(mean; mean, std) - 1/2 - log(1 - tanh(mean)^2) (the
  Gaussian term's E[-z^2 / 2] = -1/2), so the mean over many rows of one
  observation matches that expectation."""
  agent = agent_lib.SACAgent(
    OBS, ACT, 8, _config(min_log_std=-12.0, max_log_std=-11.0)
  )
  inputs = random_act_inputs(OBS.shape, ACT, 1)
  many = ActInputs(
    env_ids=np.zeros(4096, np.int32),
    observation=np.repeat(inputs.observation, 4096, axis=0),
    prev_action=np.zeros((4096, 1), np.float32),
    reward=np.zeros(4096, np.float32),
    done=np.zeros(4096, bool),
    core_state=(),
    eval_mask=np.zeros(4096, bool),
  )
  value = agent.act(many).value
  mean, log_std = (x.numpy() for x in agent.policy(inputs.observation))
  a = np.tanh(mean)
  q = np.minimum(*(c(inputs.observation, a).numpy() for c in agent.critics))
  expected_log_pi = np_squashed_log_prob(mean, mean, log_std) - 0.5
  assert value.mean() == pytest.approx(
    float(q[0] - 1.0 * expected_log_pi[0]), abs=0.05
  )
  assert value.std() == pytest.approx(np.sqrt(0.5), rel=0.1)  # std of z^2/2


def test_learns_a_bandit():
  """One-step episodes with reward -(a - 1)^2 on the [-2, 2] Box: the mean
  action of the policy moves to 1 (the critic and the actor gradient have
  the right signs end to end)."""
  cfg = _config(
    batch_size=64,
    min_replay_size=64,
    learning_rate=3e-3,
    actor_learning_rate=3e-3,
    target_entropy=-3.0,
    torso=lambda: mlp_torso((64, 64), "relu"),
  )
  agent = agent_lib.SACAgent(OBS, ACT, 64, cfg)
  rng = np.random.default_rng(0)
  steps = cfg.unroll_length + 1
  action = rng.uniform(-2, 2, size=(64, steps, 1)).astype(np.float32)
  reward = np.zeros((64, steps), np.float32)
  reward[:, 1:] = -((action[:, :-1, 0] - 1.0) ** 2)
  terminated = np.ones((64, steps), bool)
  case = dict(
    reward=reward.T,
    terminated=terminated.T,
    truncated=np.zeros((steps, 64), bool),
    bootstrap_value=np.zeros((steps, 64), np.float32),
  )
  unroll = _unroll(case, action)
  unroll.observation = np.zeros_like(unroll.observation)  # one state
  agent.add_unrolls(unroll)
  for _ in range(500):
    agent.train_step()
  inputs = random_act_inputs(OBS.shape, ACT, 4, eval_mask=np.ones(4, bool))
  inputs.observation[:] = 0.0
  # Random weights act near 0; 500 updates bring the mean action to ~1.
  np.testing.assert_allclose(agent.act(inputs).action, 1.0, atol=0.15)


def test_checkpoint_round_trip(tmp_path):
  cfg = _config()
  agent = agent_lib.SACAgent(OBS, ACT, 4, cfg)
  fill(agent, pendulum_unroll)
  for _ in range(3):
    agent.train_step()
  restored = checkpoint_round_trip(
    agent, lambda: agent_lib.SACAgent(OBS, ACT, 4, cfg), tmp_path
  )
  assert int(restored.step_counter.numpy()) == 3
  assert restored.env_steps == agent.env_steps == 32
  # The restored networks compute with the restored weights.
  x = pendulum_critics_agree(restored, agent)
  np.testing.assert_allclose(
    restored.policy(x)[0].numpy(), agent.policy(x)[0].numpy()
  )


def test_stop_unblocks_train_step_and_bad_specs_are_refused():
  agent = agent_lib.SACAgent(OBS, ACT, 4, _config(min_replay_size=100))
  agent.stop()
  assert agent.train_step() == {}
  with pytest.raises(ValueError, match="continuous action spec"):
    agent_lib.SACAgent(OBS, ArraySpec((), "int32", num_values=2), 4, _config())
  with pytest.raises(ValueError, match="must be bounded"):
    agent_lib.SACAgent(OBS, ArraySpec((2,), "float32"), 4, _config())
  with pytest.raises(ValueError, match="Unroll.reward: shape"):
    unroll = pendulum_unroll()
    unroll.reward = unroll.reward[:, :3]
    agent_lib.SACAgent(OBS, ACT, 4, _config()).add_unrolls(unroll)


# --------------------------------------------------------------- gin files ---


@pytest.mark.parametrize("env", ["classic", "mujoco"])
def test_gin_files_parse_into_a_valid_config(env):
  with gin_file_parsed(env, "sac"):
    config = SACConfig()
    env_id = gin.query_parameter(f"{env}.create_environment.env_id")
  if env == "classic":
    assert env_id == "Pendulum-v1" and config.learning_rate == 1e-3
  else:
    assert env_id == "HalfCheetah-v5"
    assert (config.learning_rate, config.actor_learning_rate) == (1e-3, 3e-4)
    assert config.samples_per_insert == config.batch_size == 256
    assert config.policy_delay == 2 and config.random_steps == 5000


# -------------------------------------------------------------- end to end ---


@pytest.mark.timeout(120)  # the learner start (TF import, tracing) dominates
def test_pendulum_end_to_end(tmp_path):
  """The real launcher: a learner and two actor processes on Pendulum-v1,
  gRPC, replay, 20 SAC updates, TensorBoard diagnostics and a checkpoint."""
  logdir = tmp_path / "run"
  bindings = [
    "SACConfig.min_replay_size = 64",
    "SACConfig.random_steps = 64",
    "SACConfig.batch_size = 32",
    "SACConfig.samples_per_insert = 32.0",
  ]
  launch.train_briefly(logdir, "classic", "sac", 20, bindings, timeout=180)
  want = {
    "loss/total",
    "loss/critic",
    "loss/actor",
    "loss/temperature",
    "policy/entropy",
    "sac/temperature",
    "q/mean",
    "q/td_error",
    "grad/norm",
    "opt/learning_rate",
    "perf/samples_per_env_step",
  }
  missing = want - launch.event_tags(logdir)
  assert not missing, sorted(missing)
