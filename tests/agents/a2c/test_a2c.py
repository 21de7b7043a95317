"""A2C: the loss against NumPy references written from the definitions, the
config's validation, the agent on fake unrolls, and one short run through
the real launcher (learner + 2 actor processes, gRPC, CartPole).

The n-step return reference is the explicit sum of A3C's forward view
(Mnih et al. 2016, Algorithm S3): R_t = sum_{k=t}^{e} gamma^{k-t} r_k +
gamma^{e-t+1} V_after, walking forward from t to the first episode end or the
unroll end e, with V_after = 0 after a termination, the bootstrap value after
a truncation and V(x_T) at the unroll end -- not the backward recursion the
implementation uses.
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gin
import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents.a2c import agent as agent_lib
from seed_rl.agents.a2c import loss as loss_lib
from seed_rl.agents.a2c.config import A2CConfig
from seed_rl.networks import mlp_torso
from seed_rl.agents import distributions
from seed_rl.common.specs import ArraySpec

from tests.support import launch
from tests.support.helpers import (
  fake_unroll,
  gin_file_parsed,
  random_act_inputs,
)


# ---------------------------------------------------------------- references


def reference_returns(
  values, rewards, terminated, truncated, bootstrap_value, gamma, lam=1.0
):
  """Lambda-returns by explicit forward sums; lam = 1: n-step returns.

  values [T+1, B]; rewards / flags / bootstrap_value [T, B] for the
  transitions t -> t+1 (the Unroll's fields [1:]).
  """
  num_steps, batch = rewards.shape
  returns = np.zeros((num_steps, batch))
  for b in range(batch):
    for t in range(num_steps):
      if lam == 1.0:
        total = 0.0
        for k in range(t, num_steps):
          total += gamma ** (k - t) * rewards[k, b]
          if terminated[k, b]:
            break  # nothing follows a terminal state
          if truncated[k, b]:
            total += gamma ** (k - t + 1) * bootstrap_value[k, b]
            break
          if k == num_steps - 1:
            total += gamma ** (k - t + 1) * values[num_steps, b]
        returns[t, b] = total
      else:
        # GAE (Schulman et al. 2016, eq. 16): sum of (gamma lam)^l delta.
        total, weight = 0.0, 1.0
        for k in range(t, num_steps):
          if terminated[k, b]:
            after = 0.0
          elif truncated[k, b]:
            after = bootstrap_value[k, b]
          else:
            after = values[k + 1, b]
          total += weight * (rewards[k, b] + gamma * after - values[k, b])
          if terminated[k, b] or truncated[k, b]:
            break
          weight *= gamma * lam
        returns[t, b] = total + values[t, b]
  return returns


def _softmax(logits):
  z = np.exp(logits - logits.max(-1, keepdims=True))
  return z / z.sum(-1, keepdims=True)


def reference_loss(
  logits,
  values,
  actions,
  rewards,
  terminated,
  truncated,
  bootstrap,
  gamma,
  lam,
  entropy_cost,
  value_cost,
):
  """The three A2C terms for a categorical policy, from the definitions.

  logits [T+1, B, A], values [T+1, B], actions [T, B], the rest [T, B].
  """
  returns = reference_returns(
    values, rewards, terminated, truncated, bootstrap, gamma, lam
  )
  advantages = returns - values[:-1]
  probs = _softmax(logits[:-1].astype(np.float64))
  log_pi = np.log(np.take_along_axis(probs, actions[..., None], -1)[..., 0])
  entropy = -(probs * np.log(probs)).sum(-1).mean()
  return {
    "loss/policy": -(log_pi * advantages).mean(),
    "loss/value": value_cost * 0.5 * ((values[:-1] - returns) ** 2).mean(),
    "loss/entropy": -entropy_cost * entropy,
    "policy/entropy": entropy,
    "value/target_mean": returns.mean(),
    "advantage/mean": advantages.mean(),
  }


def _random_batch(rng, num_steps=6, batch=5, num_actions=3):
  terminated = rng.random((num_steps, batch)) < 0.2
  truncated = (rng.random((num_steps, batch)) < 0.2) & ~terminated
  # At least one of each, inside the unroll and on its last transition.
  terminated[1, 0], truncated[1, 0] = True, False
  truncated[2, 1], terminated[2, 1] = True, False
  truncated[-1, 2], terminated[-1, 2] = True, False
  terminated[-1, 3], truncated[-1, 3] = True, False
  return dict(
    logits=rng.normal(size=(num_steps + 1, batch, num_actions)),
    values=rng.normal(size=(num_steps + 1, batch)),
    actions=rng.integers(0, num_actions, (num_steps, batch)),
    rewards=rng.normal(size=(num_steps, batch)),
    terminated=terminated,
    truncated=truncated,
    bootstrap=np.where(truncated, rng.normal(size=(num_steps, batch)), 0.0),
  )


def _tf_loss(inputs, gamma, lam, entropy_cost, value_cost, **kwargs):
  num_actions = inputs["logits"].shape[-1]
  logits = tf.constant(inputs["logits"], tf.float32)
  values = tf.constant(inputs["values"], tf.float32)
  with tf.GradientTape() as tape:
    tape.watch([logits, values])
    total, metrics = loss_lib.a2c_loss(
      distributions.Categorical(num_actions),
      logits,
      values,
      tf.constant(inputs["actions"], tf.int32),
      tf.constant(inputs["rewards"], tf.float32),
      tf.constant(inputs["terminated"]),
      tf.constant(inputs["truncated"]),
      tf.constant(inputs["bootstrap"], tf.float32),
      discount=gamma,
      gae_lambda=lam,
      entropy_cost=entropy_cost,
      value_cost=value_cost,
      **kwargs,
    )
  return total, metrics, tape.gradient(metrics["loss/policy"], logits)


# ------------------------------------------------------------------- loss ---


@pytest.mark.parametrize("gamma,lam", [(0.99, 1.0), (0.9, 1.0), (0.95, 0.8)])
def test_loss_matches_numpy_reference(gamma, lam):
  inputs = _random_batch(np.random.default_rng(0))
  total, metrics, _ = _tf_loss(inputs, gamma, lam, 0.01, 0.5)
  expected = reference_loss(
    **inputs, gamma=gamma, lam=lam, entropy_cost=0.01, value_cost=0.5
  )
  for name, value in expected.items():
    np.testing.assert_allclose(
      float(metrics[name]), value, rtol=1e-4, atol=1e-5, err_msg=name
    )
  np.testing.assert_allclose(
    float(total),
    expected["loss/policy"] + expected["loss/value"] + expected["loss/entropy"],
    rtol=1e-4,
    atol=1e-5,
  )


def test_nstep_returns_by_hand_termination_vs_truncation():
  """One env, T = 3: an episode terminates after step 0, the next one is
  truncated after step 1, the third runs to the unroll end."""
  gamma = 0.5
  inputs = dict(
    logits=np.zeros((4, 1, 2)),
    values=np.array([[1.0], [2.0], [3.0], [4.0]]),
    actions=np.zeros((3, 1), np.int64),
    rewards=np.array([[1.0], [2.0], [4.0]]),
    terminated=np.array([[True], [False], [False]]),
    truncated=np.array([[False], [True], [False]]),
    bootstrap=np.array([[0.0], [10.0], [0.0]]),
  )
  # R_0 = r_0 (termination: no bootstrap, although V(x_1) = 2);
  # R_1 = r_1 + gamma * 10 (the truncated episode's final value, not V(x_2));
  # R_2 = r_2 + gamma * V(x_3) (unroll end).
  expected = np.array([1.0, 2.0 + 0.5 * 10.0, 4.0 + 0.5 * 4.0])
  np.testing.assert_allclose(
    reference_returns(
      inputs["values"],
      inputs["rewards"],
      inputs["terminated"],
      inputs["truncated"],
      inputs["bootstrap"],
      gamma,
    )[:, 0],
    expected,
  )
  _, metrics, _ = _tf_loss(inputs, gamma, 1.0, 0.0, 1.0)
  np.testing.assert_allclose(
    float(metrics["value/target_mean"]), expected.mean(), rtol=1e-6
  )
  np.testing.assert_allclose(
    float(metrics["loss/value"]),
    0.5 * np.mean((expected - inputs["values"][:-1, 0]) ** 2),
    rtol=1e-6,
  )


def test_nstep_returns_span_the_unroll():
  """Without episode ends, step t's return bootstraps from V(x_T), T - t
  steps away: A3C's forward view, not one-step TD."""
  gamma, num_steps = 0.9, 5
  values = np.arange(num_steps + 1, dtype=np.float64)[:, None]
  rewards = np.ones((num_steps, 1))
  flags = np.zeros((num_steps, 1), bool)
  inputs = dict(
    logits=np.zeros((num_steps + 1, 1, 2)),
    values=values,
    actions=np.zeros((num_steps, 1), np.int64),
    rewards=rewards,
    terminated=flags,
    truncated=flags,
    bootstrap=np.zeros((num_steps, 1)),
  )
  expected = [
    sum(gamma**k for k in range(num_steps - t))
    + gamma ** (num_steps - t) * values[-1, 0]
    for t in range(num_steps)
  ]
  _, metrics, _ = _tf_loss(inputs, gamma, 1.0, 0.0, 1.0)
  np.testing.assert_allclose(
    float(metrics["value/target_mean"]), np.mean(expected), rtol=1e-6
  )


def test_policy_gradient_is_advantage_times_score():
  """d loss/policy / d logits = -(onehot(a) - pi) A / N: no gradient flows
  through the advantages (they depend on V, not on the logits)."""
  inputs = _random_batch(np.random.default_rng(1))
  gamma = 0.97
  _, _, grad = _tf_loss(inputs, gamma, 1.0, 0.0, 0.5)
  returns = reference_returns(
    inputs["values"],
    inputs["rewards"],
    inputs["terminated"],
    inputs["truncated"],
    inputs["bootstrap"],
    gamma,
  )
  advantages = returns - inputs["values"][:-1]
  probs = _softmax(inputs["logits"][:-1])
  onehot = np.eye(probs.shape[-1])[inputs["actions"]]
  expected = -(onehot - probs) * advantages[..., None] / advantages.size
  np.testing.assert_allclose(grad.numpy()[:-1], expected, atol=1e-6)
  np.testing.assert_allclose(grad.numpy()[-1], 0.0)  # step T only bootstraps


def test_normalized_advantages_and_gaussian_policy():
  """Continuous actions: the Gaussian log-density of the raw action, and
  advantages standardised over the batch in the policy term only."""
  rng = np.random.default_rng(2)
  t, b, d = 4, 4, 2
  inputs = _random_batch(rng, t, b, 2)
  mean = rng.normal(size=(t + 1, b, d))
  log_std = rng.normal(scale=0.3, size=(t + 1, b, d))
  raw_action = rng.normal(size=(t, b, d))
  gamma = 0.9
  _, metrics = loss_lib.a2c_loss(
    distributions.DiagGaussian(d, "none"),
    tf.constant(np.concatenate([mean, log_std], -1), tf.float32),
    tf.constant(inputs["values"], tf.float32),
    tf.constant(raw_action, tf.float32),
    tf.constant(inputs["rewards"], tf.float32),
    tf.constant(inputs["terminated"]),
    tf.constant(inputs["truncated"]),
    tf.constant(inputs["bootstrap"], tf.float32),
    discount=gamma,
    entropy_cost=0.1,
    normalize_advantages=True,
  )
  returns = reference_returns(
    inputs["values"],
    inputs["rewards"],
    inputs["terminated"],
    inputs["truncated"],
    inputs["bootstrap"],
    gamma,
  )
  adv = returns - inputs["values"][:-1]
  adv = (adv - adv.mean()) / (adv.std() + 1e-8)
  std = np.exp(log_std[:-1])
  log_prob = (
    -0.5 * ((raw_action - mean[:-1]) / std) ** 2
    - np.log(std)
    - 0.5 * math.log(2 * math.pi)
  ).sum(-1)
  entropy = (0.5 + 0.5 * math.log(2 * math.pi) + np.log(std)).sum(-1).mean()
  np.testing.assert_allclose(
    float(metrics["loss/policy"]), -(log_prob * adv).mean(), rtol=1e-4
  )
  np.testing.assert_allclose(
    float(metrics["loss/entropy"]), -0.1 * entropy, rtol=1e-5
  )


# ----------------------------------------------------------------- config ---


@pytest.mark.parametrize(
  "kwargs, match",
  [
    ({"unroll_length": 0}, "A2CConfig.unroll_length must be a positive"),
    ({"batch_size": 2.5}, "A2CConfig.batch_size must be a positive"),
    ({"gae_lambda": 1.5}, r"A2CConfig.gae_lambda must be in \[0, 1\]"),
    ({"discount": -0.1}, "A2CConfig.discount"),
    ({"reward_clipping": "clip"}, "reward_clipping 'clip' is unknown"),
    ({"entropy_cost": -1.0}, "entropy_cost must be >= 0"),
    ({"learning_rate": 0.0}, "learning_rate must be > 0"),
    ({"lr_schedule": "cosine"}, "lr_schedule 'cosine' is unknown"),
    ({"lr_schedule": "linear"}, "total_learner_steps must be a positive"),
    ({"optimizer": "sgd"}, "optimizer 'sgd' is unknown"),
    ({"optimizer_epsilon": 0.0}, "optimizer_epsilon must be > 0"),
    ({"max_grad_norm": -1.0}, "max_grad_norm must be >= 0"),
    ({"rmsprop_decay": 1.0}, r"rmsprop_decay must be in \[0, 1\)"),
    ({"torso": 3}, "torso must be a callable"),
    ({"bound_handling": "none"}, "bound_handling 'none' is unknown"),
    ({"queue_capacity": 2}, r"queue_capacity \(2\) must be >= batch_size"),
  ],
)
def test_config_validation(kwargs, match):
  with pytest.raises(ValueError, match=match):
    A2CConfig(**kwargs)


def test_config_defaults_are_sb3_a2c():
  cfg = A2CConfig()
  assert (cfg.unroll_length, cfg.discount, cfg.gae_lambda) == (5, 0.99, 1.0)
  assert (cfg.optimizer, cfg.learning_rate, cfg.rmsprop_decay) == (
    "rmsprop",
    7e-4,
    0.99,
  )
  assert (cfg.value_cost, cfg.max_grad_norm) == (0.5, 0.5)


# ------------------------------------------------------------------ agent ---

OBS = ArraySpec((4,), "float32")
DISCRETE = ArraySpec((), "int32", num_values=2)
CONTINUOUS = ArraySpec(
  (2,), "float32", minimum=np.asarray(-1.0), maximum=np.asarray(1.0)
)


def _config(**kwargs):
  defaults = dict(
    unroll_length=5,
    batch_size=4,
    torso=lambda: mlp_torso((16,)),
    learning_rate=1e-2,
  )
  defaults.update(kwargs)
  return A2CConfig(**defaults)


@pytest.mark.parametrize("action_spec", [DISCRETE, CONTINUOUS])
def test_agent_trains_on_fake_unrolls_with_finite_metrics(action_spec):
  agent = agent_lib.A2CAgent(OBS, action_spec, 4, _config())
  out = agent.act(random_act_inputs(OBS.shape, action_spec, 3))
  assert out.action.shape == (3,) + action_spec.shape
  assert out.action.dtype == np.dtype(action_spec.dtype)
  assert out.value.shape == (3,)
  if action_spec.is_discrete:
    assert out.extras == {}
  else:
    assert out.extras[agent_lib.RAW_ACTION].shape == (3, 2)
  agent.add_unrolls(fake_unroll(OBS.shape, action_spec, gaussian=True))
  metrics = agent.train_step()
  for name in (
    "loss/total",
    "loss/policy",
    "loss/value",
    "loss/entropy",
    "policy/entropy",
    "value/explained_variance",
    "advantage/mean",
    "advantage/std",
    "opt/learning_rate",
    "grad/norm",
    "grad/norm_torso",
    "grad/norm_head",
    "perf/policy_lag",
  ):
    assert np.isfinite(metrics[name]), name
  assert metrics["loss/total"] == pytest.approx(
    metrics["loss/policy"] + metrics["loss/value"] + metrics["loss/entropy"],
    rel=1e-5,
  )
  assert metrics["errors/nonfinite_updates"] == 0
  assert metrics["perf/samples_trained"] == 5 * 4
  assert int(agent.step_counter.numpy()) == 1


def test_act_is_greedy_for_eval_envs():
  agent = agent_lib.A2CAgent(OBS, CONTINUOUS, 4, _config())
  inputs = random_act_inputs(
    OBS.shape, CONTINUOUS, 3, eval_mask=np.array([True, True, False])
  )
  params, _ = agent.network(inputs.observation)
  mean = params.numpy()[:, :2]
  out = agent.act(inputs)
  np.testing.assert_allclose(
    out.action[:2], np.clip(mean[:2], -1, 1), rtol=1e-5, atol=1e-7
  )
  np.testing.assert_allclose(
    out.extras[agent_lib.RAW_ACTION][:2], mean[:2], rtol=1e-5, atol=1e-7
  )


def test_linear_schedule_and_reward_clipping():
  agent = agent_lib.A2CAgent(
    OBS,
    DISCRETE,
    4,
    _config(
      lr_schedule="linear",
      total_learner_steps=4,
      reward_clipping="abs_one",
      discount=0.0,
      gae_lambda=0.0,
    ),
  )
  rates = []
  for i in range(3):
    unroll = fake_unroll(OBS.shape, DISCRETE, seed=i)
    unroll.reward[:] = 100.0  # clipped to 1: with gamma 0, R_t = 1
    agent.add_unrolls(unroll)
    metrics = agent.train_step()
    rates.append(metrics["opt/learning_rate"])
    assert metrics["value/target_mean"] == pytest.approx(1.0)
  np.testing.assert_allclose(rates, [1e-2, 0.75e-2, 0.5e-2], rtol=1e-5)


def test_learns_a_bandit():
  """Reward 1 for action 1, 0 for action 0: pi(1) must grow."""
  agent = agent_lib.A2CAgent(
    OBS, DISCRETE, 4, _config(learning_rate=3e-2, entropy_cost=0.0)
  )
  obs = random_act_inputs(OBS.shape, DISCRETE, 4)

  def prob_one():
    params, _ = agent.network(obs.observation)
    return float(tf.reduce_mean(tf.nn.softmax(params)[:, 1]))

  before = prob_one()
  for i in range(30):
    unroll = fake_unroll(
      OBS.shape,
      DISCRETE,
      seed=i,
      reward_fn=lambda a: np.roll(a == 1, 1, axis=1) * 1.0,
    )
    agent.add_unrolls(unroll)
    agent.train_step()
  assert before == pytest.approx(0.5, abs=0.02)
  assert prob_one() > 0.8


def test_checkpoint_objects_and_stop():
  agent = agent_lib.A2CAgent(OBS, DISCRETE, 4, _config())
  assert set(agent.checkpoint_objects()) == {"network", "optimizer", "step"}
  agent.stop()
  assert agent.train_step() == {}
  with pytest.raises(ValueError, match="Unroll.reward: shape"):
    unroll = fake_unroll(OBS.shape, DISCRETE)
    unroll.reward = unroll.reward[:, :3]
    agent_lib.A2CAgent(OBS, DISCRETE, 4, _config()).add_unrolls(unroll)
  with pytest.raises(ValueError, match="lacks 'raw_action'"):
    unroll = fake_unroll(OBS.shape, CONTINUOUS, gaussian=True)
    unroll.extras = {}
    agent_lib.A2CAgent(OBS, CONTINUOUS, 4, _config()).add_unrolls(unroll)


# --------------------------------------------------------------- gin file ---


def test_gin_file_parses_into_a_valid_config():
  with gin_file_parsed("classic", "a2c"):
    config = A2CConfig()
    env_id = gin.query_parameter("classic.create_environment.env_id")
  assert env_id == "CartPole-v1"
  assert config.gae_lambda == 1.0  # n-step returns: A2C, not GAE


# -------------------------------------------------------------- end to end ---


@pytest.mark.timeout(180)  # the learner start (TF import, tracing) dominates
def test_cartpole_end_to_end(tmp_path):
  """The real launcher: a learner and two actor processes on CartPole-v1,
  gRPC, 20 A2C updates, TensorBoard diagnostics and a checkpoint."""
  logdir = tmp_path / "run"
  launch.train_briefly(
    logdir, "classic", "a2c", 20, ["A2CConfig.batch_size = 8"]
  )
  want = {
    "loss/total",
    "loss/policy",
    "loss/value",
    "loss/entropy",
    "policy/entropy",
    "value/explained_variance",
    "grad/norm",
    "grad/norm_torso",
    "grad/norm_head",
    "opt/learning_rate",
    "perf/policy_lag",
    "perf/samples_per_env_step",
  }
  missing = want - launch.event_tags(logdir)
  assert not missing, sorted(missing)
