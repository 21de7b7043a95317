"""ACER: Retrace targets, the truncated importance-weighted policy gradient
with bias correction and the trust-region projection against NumPy
references written from Wang et al. 2017 (arXiv 1611.01224) and Munos et al.
2016; config validation; the agent on fake unrolls; one short run through
the real launcher (learner + 2 actor processes, gRPC, CartPole).

The Retrace reference is the explicit sum of Munos et al. 2016, eq. (3),
walking forward from each step over raw Unroll flags:

  Q_ret(x_t, a_t) = Q(x_t, a_t) + sum_{s=t}^{e} gamma^{s-t}
                    (prod_{i=t+1}^{s} c_i) (r_s + gamma V_after_s - Q(x_s, a_s)),

with e the first episode end or the unroll end, V_after_s = V(x_{s+1})
inside an episode and at the unroll end, 0 after a termination and the
bootstrap value after a truncation -- not the backward recursion of
Algorithm 2 that the implementation uses.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gin
import keras
import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents.acer import agent as agent_lib
from seed_rl.agents.acer import loss as loss_lib
from seed_rl.agents.acer.config import ACERConfig
from seed_rl.networks import mlp_torso
from seed_rl.common.specs import ArraySpec

from tests.support import launch
from tests.support.helpers import (
  fake_unroll,
  gin_file_parsed,
  random_act_inputs,
)


# ---------------------------------------------------------------- references


def _softmax(logits):
  z = np.exp(logits - logits.max(-1, keepdims=True))
  return z / z.sum(-1, keepdims=True)


def reference_acer(
  logits,
  q,
  behaviour_logits,
  action,
  reward,
  terminated,
  truncated,
  bootstrap_value,
  gamma,
  lam=1.0,
  c_bar=10.0,
  entropy_cost=0.01,
  value_cost=0.5,
):
  """ACER's targets and loss terms from raw Unroll-layout inputs.

  logits, q, behaviour_logits [T+1, B, A]; action, reward, flags,
  bootstrap_value [T+1, B] (flags and reward of the transition INTO step t).
  Returns a dict with q_ret [T, B], the loss terms and d L_pi / d logits
  [T, B, A] from the paper's gradient expression.
  """
  t1, batch, num_actions = logits.shape
  num_steps = t1 - 1
  pi = _softmax(logits.astype(np.float64))
  mu = _softmax(behaviour_logits.astype(np.float64))
  values = (pi * q).sum(-1)  # V(x) = sum_a pi(a|x) Q(x, a), [T+1, B]
  rho_all = pi / mu
  q_ret = np.zeros((num_steps, batch))
  for b in range(batch):
    q_taken = [q[t, b, action[t, b]] for t in range(t1)]
    rho = [rho_all[t, b, action[t, b]] for t in range(t1)]
    for t in range(num_steps):
      total, weight = q_taken[t], 1.0
      for s in range(t, num_steps):
        if s > t:
          weight *= gamma * lam * min(1.0, rho[s])
        if terminated[s + 1, b]:
          after, ended = 0.0, True
        elif truncated[s + 1, b]:
          after, ended = bootstrap_value[s + 1, b], True
        else:
          after, ended = values[s + 1, b], False
        total += weight * (reward[s + 1, b] + gamma * after - q_taken[s])
        if ended:
          break
      q_ret[t, b] = total

  n = num_steps * batch
  policy_loss, bias_loss, value_loss, entropy = 0.0, 0.0, 0.0, 0.0
  grad = np.zeros((num_steps, batch, num_actions))
  for t in range(num_steps):
    for b in range(batch):
      a = action[t, b]
      p, v = pi[t, b], values[t, b]
      rho = rho_all[t, b]
      advantage = q_ret[t, b] - v
      weight = min(c_bar, rho[a]) * advantage
      correction = np.maximum(0.0, 1.0 - c_bar / rho) * p * (q[t, b] - v)
      policy_loss -= weight * np.log(p[a]) / n
      bias_loss -= (correction * np.log(p)).sum() / n
      value_loss += value_cost * 0.5 * (q_ret[t, b] - q[t, b, a]) ** 2 / n
      entropy += -(p * np.log(p)).sum() / n
      # grad_logits log pi(a|x) = onehot(a) - pi (eq. 9, as a loss).
      onehot = np.eye(num_actions)[a]
      g = weight * (onehot - p)
      for a2 in range(num_actions):
        g += correction[a2] * (np.eye(num_actions)[a2] - p)
      grad[t, b] = -g / n
  return {
    "q_ret": q_ret,
    "loss/policy": policy_loss + bias_loss,
    "acer/bias_correction_loss": bias_loss,
    "loss/value": value_loss,
    "loss/entropy": -entropy_cost * entropy,
    "policy/entropy": entropy,
    "grad_logits": grad,
    "rho": np.take_along_axis(rho_all[:-1], action[:-1, :, None], -1)[..., 0],
  }


def _random_unroll(rng, num_steps=6, batch=5, num_actions=3, mu_scale=1.0):
  t1 = num_steps + 1
  terminated = rng.random((t1, batch)) < 0.15
  truncated = (rng.random((t1, batch)) < 0.15) & ~terminated
  # Each kind of episode end inside the unroll and on its last transition.
  terminated[2, 0], truncated[2, 0] = True, False
  truncated[3, 1], terminated[3, 1] = True, False
  truncated[-1, 2], terminated[-1, 2] = True, False
  terminated[-1, 3], truncated[-1, 3] = True, False
  return dict(
    logits=rng.normal(size=(t1, batch, num_actions)),
    q=rng.normal(size=(t1, batch, num_actions)),
    behaviour_logits=rng.normal(scale=mu_scale, size=(t1, batch, num_actions)),
    action=rng.integers(0, num_actions, (t1, batch)),
    reward=rng.normal(size=(t1, batch)),
    terminated=terminated,
    truncated=truncated,
    bootstrap_value=np.where(truncated, rng.normal(size=(t1, batch)), 0.0),
  )


def _tf_acer(inputs, **kwargs):
  logits = tf.constant(inputs["logits"], tf.float32)
  q = tf.constant(inputs["q"], tf.float32)
  with tf.GradientTape() as tape:
    tape.watch([logits, q])
    terms, metrics = loss_lib.acer_loss(
      tf.nn.softmax(logits),
      q,
      tf.constant(inputs["behaviour_logits"], tf.float32),
      tf.constant(inputs["action"], tf.int32),
      tf.constant(inputs["reward"], tf.float32),
      tf.constant(inputs["terminated"]),
      tf.constant(inputs["truncated"]),
      tf.constant(inputs["bootstrap_value"], tf.float32),
      **kwargs,
    )
  grads = tape.gradient(terms["policy"], [logits, q])
  return terms, metrics, grads


# ---------------------------------------------------------------- Retrace ---


@pytest.mark.parametrize("gamma,lam", [(0.99, 1.0), (0.9, 0.7), (1.0, 1.0)])
def test_retrace_matches_the_explicit_sum(gamma, lam):
  inputs = _random_unroll(np.random.default_rng(0))
  expected = reference_acer(**inputs, gamma=gamma, lam=lam)
  _, metrics, _ = _tf_acer(inputs, discount=gamma, retrace_lambda=lam)
  np.testing.assert_allclose(
    float(metrics["q/target_mean"]), expected["q_ret"].mean(), rtol=1e-4
  )
  np.testing.assert_allclose(
    float(metrics["loss/value"]), expected["loss/value"], rtol=1e-4
  )


def test_retrace_targets_elementwise_with_episode_ends():
  """retrace_targets itself, fed the per-transition encoding built from the
  raw flags, against the explicit sum element by element."""
  from seed_rl.agents.episode_ends import transition_inputs

  rng = np.random.default_rng(1)
  inputs = _random_unroll(rng, num_steps=8, batch=6)
  gamma, lam = 0.95, 0.9
  pi = _softmax(inputs["logits"])
  values = (pi * inputs["q"]).sum(-1)
  rho = np.take_along_axis(
    pi / _softmax(inputs["behaviour_logits"]), inputs["action"][..., None], -1
  )[..., 0]
  q_taken = np.take_along_axis(inputs["q"], inputs["action"][..., None], -1)[
    ..., 0
  ]
  discounts, next_values, trace_mask = transition_inputs(
    tf.constant(values, tf.float32),
    inputs["terminated"],
    inputs["truncated"],
    tf.constant(inputs["bootstrap_value"], tf.float32),
    gamma,
  )
  q_ret = loss_lib.retrace_targets(
    inputs["reward"][1:],
    discounts,
    next_values,
    trace_mask,
    q_taken[:-1],
    lam * np.minimum(1.0, rho[:-1]),
  )
  expected = reference_acer(**inputs, gamma=gamma, lam=lam)["q_ret"]
  np.testing.assert_allclose(q_ret.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_retrace_by_hand_termination_truncation_unroll_end():
  """One env, A = 1 (so pi = mu, rho = 1, c = 1 and V = Q), T = 4:
  termination into step 1, truncation into step 3, unroll end at step 4."""
  gamma = 0.5
  q = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
  inputs = dict(
    logits=np.zeros((5, 1, 1)),
    q=q[:, None, None],
    behaviour_logits=np.zeros((5, 1, 1)),
    action=np.zeros((5, 1), np.int64),
    reward=np.array([0.0, 1.0, 2.0, 4.0, 8.0])[:, None],
    terminated=np.array([0, 1, 0, 0, 0], bool)[:, None],
    truncated=np.array([0, 0, 0, 1, 0], bool)[:, None],
    bootstrap_value=np.array([0.0, 0.0, 0.0, 10.0, 0.0])[:, None],
  )
  # Q_ret_3 = r + gamma V(x_4) (unroll end): 8 + 0.5 * 5.
  # Q_ret_2 = 4 + 0.5 * 10 (truncated: the ended episode's bootstrap).
  # Q_ret_1 = 2 + 0.5 * (c (Q_ret_2 - Q_2) + V_2) = 2 + 0.5 * Q_ret_2.
  # Q_ret_0 = 1 (terminated: nothing follows; V(x_1) = 2 is ignored).
  q_ret_2 = 4.0 + 0.5 * 10.0
  expected = np.array([1.0, 2.0 + 0.5 * q_ret_2, q_ret_2, 8.0 + 0.5 * 5.0])
  np.testing.assert_allclose(
    reference_acer(**inputs, gamma=gamma)["q_ret"][:, 0], expected
  )
  _, metrics, _ = _tf_acer(inputs, discount=gamma, value_cost=1.0)
  np.testing.assert_allclose(
    float(metrics["q/target_mean"]), expected.mean(), rtol=1e-6
  )
  np.testing.assert_allclose(
    float(metrics["loss/value"]),
    0.5 * np.mean((expected - q[:-1]) ** 2),
    rtol=1e-6,
  )


def test_traces_are_cut_by_small_importance_weights():
  """c_t = lambda min(1, rho_t): a near-zero rho at step 1 stops the
  correction from step 1 on reaching Q_ret_0 (one-step target there)."""
  gamma = 0.9
  logits = np.zeros((4, 1, 2))
  behaviour = np.zeros((4, 1, 2))  # mu = 0.5 everywhere
  logits[1, 0] = [-20.0, 20.0]  # pi(a=0|x_1) ~ 0: rho_1 = pi / mu ~ 0
  inputs = dict(
    logits=logits,
    q=np.arange(8, dtype=np.float64).reshape(4, 1, 2),
    behaviour_logits=behaviour,
    action=np.zeros((4, 1), np.int64),
    reward=np.ones((4, 1)),
    terminated=np.zeros((4, 1), bool),
    truncated=np.zeros((4, 1), bool),
    bootstrap_value=np.zeros((4, 1)),
  )
  ref = reference_acer(**inputs, gamma=gamma)
  assert ref["rho"][1, 0] < 1e-8
  pi = _softmax(logits)
  v1 = (pi[1, 0] * inputs["q"][1, 0]).sum()
  np.testing.assert_allclose(ref["q_ret"][0, 0], 1.0 + gamma * v1, rtol=1e-6)
  _, metrics, _ = _tf_acer(inputs, discount=gamma, value_cost=1.0)
  np.testing.assert_allclose(
    float(metrics["q/target_mean"]), ref["q_ret"].mean(), rtol=1e-5
  )


# ---------------------------------------------------------- policy gradient ---


@pytest.mark.parametrize("mu_scale,c_bar", [(1.0, 10.0), (4.0, 2.0)])
def test_policy_loss_and_gradient_match_the_paper(mu_scale, c_bar):
  """The truncated importance-weighted term plus the bias correction (eq. 9,
  Algorithm 2): loss values and d L_pi / d logits against NumPy, with no
  gradient reaching Q (it enters the policy term only as a constant)."""
  inputs = _random_unroll(np.random.default_rng(3), mu_scale=mu_scale)
  gamma = 0.97
  expected = reference_acer(**inputs, gamma=gamma, c_bar=c_bar)
  # Both regimes occur: some rho_t above c_bar (truncated), some below.
  assert 0 < np.mean(expected["rho"] > c_bar) < 1
  terms, metrics, (grad_logits, grad_q) = _tf_acer(
    inputs, discount=gamma, truncation_threshold=c_bar
  )
  for name in (
    "loss/policy",
    "acer/bias_correction_loss",
    "loss/entropy",
    "policy/entropy",
  ):
    np.testing.assert_allclose(
      float(metrics[name]), expected[name], rtol=1e-4, atol=1e-6, err_msg=name
    )
  np.testing.assert_allclose(
    float(metrics["acer/truncated_fraction"]),
    np.mean(expected["rho"] > c_bar),
    rtol=1e-6,
  )
  np.testing.assert_allclose(
    float(metrics["acer/importance_weight_mean"]),
    expected["rho"].mean(),
    rtol=1e-4,
  )
  np.testing.assert_allclose(
    grad_logits.numpy()[:-1], expected["grad_logits"], rtol=1e-3, atol=1e-6
  )
  np.testing.assert_allclose(grad_logits.numpy()[-1], 0.0)
  assert grad_q is None or not np.any(grad_q.numpy())
  assert float(terms["policy"]) == pytest.approx(float(metrics["loss/policy"]))


def test_no_bias_correction_below_the_truncation_threshold():
  """With every rho(a) <= c_bar the correction vanishes and the policy term
  is the plain importance-weighted actor-critic gradient."""
  inputs = _random_unroll(np.random.default_rng(4), mu_scale=0.1)
  expected = reference_acer(**inputs, gamma=0.9, c_bar=100.0)
  _, metrics, _ = _tf_acer(inputs, discount=0.9, truncation_threshold=100.0)
  assert float(metrics["acer/bias_correction_loss"]) == 0.0
  assert float(metrics["acer/truncated_fraction"]) == 0.0
  np.testing.assert_allclose(
    float(metrics["loss/policy"]), expected["loss/policy"], rtol=1e-4
  )


def test_value_gradient_reaches_only_the_taken_action():
  inputs = _random_unroll(np.random.default_rng(5))
  q = tf.constant(inputs["q"], tf.float32)
  with tf.GradientTape() as tape:
    tape.watch(q)
    terms, _ = loss_lib.acer_loss(
      tf.nn.softmax(tf.constant(inputs["logits"], tf.float32)),
      q,
      inputs["behaviour_logits"],
      inputs["action"],
      inputs["reward"],
      inputs["terminated"],
      inputs["truncated"],
      inputs["bootstrap_value"],
      discount=0.9,
      value_cost=1.0,
    )
  grad = tape.gradient(terms["value"], q).numpy()
  expected = reference_acer(**inputs, gamma=0.9)["q_ret"]
  q_taken = np.take_along_axis(inputs["q"], inputs["action"][..., None], -1)
  onehot = np.eye(3)[inputs["action"][:-1]]
  want = -(expected - q_taken[:-1, :, 0])[..., None] * onehot / expected.size
  np.testing.assert_allclose(grad[:-1], want, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(grad[-1], 0.0)


# ------------------------------------------------------------- trust region ---


def reference_trust_region(loss_gradient, probs, average_probs, delta):
  """Eq. (12)-(13) per step on g = -N dL/dphi, returned as a loss gradient."""
  n = loss_gradient.shape[0] * loss_gradient.shape[1]
  out = np.zeros_like(loss_gradient)
  for t in range(loss_gradient.shape[0]):
    for b in range(loss_gradient.shape[1]):
      g = -n * loss_gradient[t, b]
      k = -average_probs[t, b] / probs[t, b]
      scale = max(0.0, (k @ g - delta) / (k @ k))
      out[t, b] = -(g - scale * k) / n
  return out


def test_trust_region_projection_matches_numpy():
  rng = np.random.default_rng(6)
  t, b, a = 5, 4, 3
  probs = _softmax(rng.normal(size=(t, b, a)))
  average = _softmax(rng.normal(size=(t, b, a)))
  grad = rng.normal(scale=0.2, size=(t, b, a))
  delta = 1.0
  adjusted, metrics = loss_lib.trust_region_gradient(
    grad, probs, average, delta
  )
  expected = reference_trust_region(grad, probs, average, delta)
  np.testing.assert_allclose(adjusted.numpy(), expected, rtol=1e-4, atol=1e-6)
  # The constraint holds after the projection: k . z <= delta per step.
  z = -(t * b) * adjusted.numpy()
  k = -average / probs
  assert np.all((k * z).sum(-1) <= delta + 1e-4)
  g = -(t * b) * grad
  active = (k * g).sum(-1) > delta
  assert 0 < active.mean() < 1  # both cases occur
  np.testing.assert_allclose(
    float(metrics["acer/trust_region_active"]), active.mean()
  )
  # Steps inside the region keep their gradient unchanged.
  np.testing.assert_allclose(
    adjusted.numpy()[~active], grad[~active], rtol=1e-5
  )
  kl = (average * (np.log(average) - np.log(probs))).sum(-1).mean()
  np.testing.assert_allclose(
    float(metrics["acer/average_policy_kl"]), kl, rtol=1e-4
  )


# ----------------------------------------------------------------- config ---


@pytest.mark.parametrize(
  "kwargs, match",
  [
    ({"unroll_length": 0}, "ACERConfig.unroll_length must be a positive"),
    ({"replay_capacity": 10}, r"min_replay_size \(64\) must be <= replay"),
    ({"min_replay_size": 8}, r"min_replay_size \(8\) must be >= batch_size"),
    ({"replay_ratio": -1.0}, "replay_ratio must be >= 0"),
    ({"replay_draw": "uniform"}, "replay_draw 'uniform' is unknown"),
    ({"retrace_lambda": 1.5}, r"retrace_lambda must be in \[0, 1\]"),
    ({"reward_clipping": "tanh"}, "reward_clipping 'tanh' is unknown"),
    ({"value_cost": -1.0}, "value_cost must be >= 0"),
    ({"truncation_threshold": 0.0}, "truncation_threshold must be > 0"),
    ({"trust_region_delta": 0.0}, "trust_region_delta must be > 0"),
    ({"average_policy_decay": 1.0}, r"average_policy_decay must be in \[0"),
    ({"lr_schedule": "linear"}, "total_learner_steps must be a positive"),
    ({"optimizer": "sgd"}, "optimizer 'sgd' is unknown"),
    ({"max_grad_norm": -1.0}, "max_grad_norm must be >= 0"),
    ({"head_hidden": 64}, "head_hidden must be a tuple"),
    ({"torso": None}, "torso must be a callable"),
    ({"queue_capacity": 4}, r"queue_capacity \(4\) must be >= batch_size"),
  ],
)
def test_config_validation(kwargs, match):
  with pytest.raises(ValueError, match=match):
    ACERConfig(**kwargs)


def test_config_defaults_follow_the_paper():
  cfg = ACERConfig()
  assert (cfg.truncation_threshold, cfg.retrace_lambda) == (10.0, 1.0)
  assert (cfg.replay_ratio, cfg.replay_draw) == (4.0, "poisson")
  assert cfg.trust_region and cfg.trust_region_delta == 1.0
  assert cfg.average_policy_decay == 0.99
  assert ACERConfig(head_hidden=[32]).head_hidden == (32,)


# ------------------------------------------------------------------ agent ---

OBS = ArraySpec((4,), "float32")
ACT = ArraySpec((), "int32", num_values=2)


def _config(**kwargs):
  defaults = dict(
    unroll_length=5,
    batch_size=4,
    min_replay_size=4,
    replay_capacity=32,
    torso=lambda: mlp_torso((16,)),
    learning_rate=1e-2,
    optimizer="adam",
  )
  defaults.update(kwargs)
  return ACERConfig(**defaults)


def _behaviour_logits(rng, action):
  """ACER's behaviour extras: the acting policy's logits, drawn last."""
  logits = rng.normal(size=action.shape + (ACT.num_values,))
  return {agent_lib.BEHAVIOUR_LOGITS: logits.astype(np.float32)}


def _fake_unroll(**kwargs):
  return fake_unroll(OBS.shape, ACT, extras_fn=_behaviour_logits, **kwargs)


@pytest.mark.parametrize("trust_region", [True, False])
def test_agent_trains_on_fake_unrolls_with_finite_metrics(trust_region):
  agent = agent_lib.ACERAgent(
    OBS,
    ACT,
    4,
    _config(trust_region=trust_region, replay_ratio=1.0, replay_draw="fixed"),
  )
  agent.add_unrolls(_fake_unroll())
  on_policy = agent.train_step()
  replayed = agent.train_step()  # owed: replay_ratio 1, 'fixed'
  assert on_policy["acer/replay_fraction"] == 0.0
  assert replayed["acer/replay_fraction"] == 1.0
  assert replayed["perf/policy_lag"] == 1.0  # data acted at step 0
  names = [
    "loss/total",
    "loss/policy",
    "loss/value",
    "loss/entropy",
    "policy/entropy",
    "value/explained_variance",
    "q/mean",
    "q/target_mean",
    "acer/importance_weight_mean",
    "acer/truncated_fraction",
    "opt/learning_rate",
    "grad/norm",
    "grad/norm_torso",
    "grad/norm_head",
    "replay/size",
  ]
  if trust_region:
    names += ["acer/trust_region_active", "acer/average_policy_kl"]
  for metrics in (on_policy, replayed):
    for name in names:
      assert np.isfinite(metrics[name]), name
    assert metrics["loss/total"] == pytest.approx(
      metrics["loss/policy"] + metrics["loss/value"] + metrics["loss/entropy"],
      rel=1e-5,
    )
    assert metrics["errors/nonfinite_updates"] == 0
  assert ("acer/trust_region_active" in on_policy) == trust_region
  assert int(agent.step_counter.numpy()) == 2


def test_trust_region_path_equals_backprop_when_inactive():
  """With a delta so large the constraint never binds, the trust-region
  path (gradient via the probabilities) gives the same update as plain
  back-propagation of the loss."""
  weights = {}
  for trust_region in (False, True):
    keras.utils.set_random_seed(0)
    agent = agent_lib.ACERAgent(
      OBS,
      ACT,
      4,
      _config(
        trust_region=trust_region, trust_region_delta=1e9, replay_ratio=0.0
      ),
    )
    agent.add_unrolls(_fake_unroll())
    metrics = agent.train_step()
    if trust_region:
      assert metrics["acer/trust_region_active"] == 0.0
    weights[trust_region] = [v.numpy() for v in agent.network.weights]
  for a, b in zip(weights[False], weights[True]):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_average_network_moves_by_polyak_averaging():
  agent = agent_lib.ACERAgent(
    OBS, ACT, 4, _config(average_policy_decay=0.9, replay_ratio=0.0)
  )
  average = agent.average_network
  assert average is not None
  before = [v.numpy() for v in agent.network.trainable_variables]
  for v, a in zip(before, average.trainable_variables):
    np.testing.assert_array_equal(v, a.numpy())  # starts as a copy
  agent.add_unrolls(_fake_unroll())
  agent.train_step()
  for old, new, avg in zip(
    before, agent.network.trainable_variables, average.trainable_variables
  ):
    np.testing.assert_allclose(
      avg.numpy(), 0.9 * old + 0.1 * new.numpy(), rtol=1e-5, atol=1e-7
    )


def test_replay_draws():
  """'fixed' owes the running floor of the ratio; 'poisson' a Poisson draw
  with that mean; replay updates wait for min_replay_size unrolls."""
  agent = agent_lib.ACERAgent(
    OBS, ACT, 4, _config(replay_ratio=0.5, replay_draw="fixed")
  )
  assert [agent._draw_replay_updates() for _ in range(6)] == [0, 1, 0, 1, 0, 1]
  agent = agent_lib.ACERAgent(
    OBS, ACT, 4, _config(replay_ratio=3.0, replay_draw="poisson")
  )
  draws = [agent._draw_replay_updates() for _ in range(4000)]
  assert np.mean(draws) == pytest.approx(3.0, rel=0.05)
  assert np.var(draws) == pytest.approx(3.0, rel=0.15)

  agent = agent_lib.ACERAgent(
    OBS,
    ACT,
    4,
    _config(replay_ratio=2.0, replay_draw="fixed", min_replay_size=8),
  )
  sources = []
  for i in range(3):
    agent.add_unrolls(_fake_unroll(seed=i))
    sources.append(agent.train_step()["acer/replay_fraction"])
    while agent._owed_replay_updates and len(agent.replay) >= 8:
      sources.append(agent.train_step()["acer/replay_fraction"])
  # 4 unrolls in replay after the first update: below min_replay_size.
  assert sources == [0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]
  assert len(agent.replay) == 12


def test_act_samples_and_is_greedy_for_eval_envs():
  agent = agent_lib.ACERAgent(OBS, ACT, 4, _config())
  inputs = random_act_inputs(
    OBS.shape, ACT, 3, eval_mask=np.array([True, False, True])
  )
  logits, q = agent.network(inputs.observation)
  out = agent.act(inputs)
  assert out.action.dtype == np.int32
  np.testing.assert_array_equal(
    out.action[[0, 2]], np.argmax(logits.numpy(), -1)[[0, 2]]
  )
  np.testing.assert_allclose(
    out.value,
    (tf.nn.softmax(logits) * q).numpy().sum(-1),
    rtol=1e-5,
    atol=1e-6,
  )
  np.testing.assert_allclose(
    out.extras[agent_lib.BEHAVIOUR_LOGITS], logits.numpy(), rtol=1e-6
  )


def test_learns_a_bandit():
  """Reward 1 for action 1, 0 for action 0: pi(1) must grow, with replayed
  (off-policy) updates in the mix."""
  agent = agent_lib.ACERAgent(
    OBS,
    ACT,
    4,
    _config(learning_rate=3e-2, entropy_cost=0.0, replay_ratio=1.0),
  )
  obs = random_act_inputs(OBS.shape, ACT, 4).observation

  def prob_one():
    logits, _ = agent.network(obs)
    return float(tf.reduce_mean(tf.nn.softmax(logits)[:, 1]))

  before = prob_one()
  for i in range(40):
    if not agent._owed_replay_updates or len(agent.replay) < 4:
      agent.add_unrolls(
        _fake_unroll(
          seed=i, reward_fn=lambda a: np.roll(a == 1, 1, axis=1) * 1.0
        )
      )
    agent.train_step()
  assert before == pytest.approx(0.5, abs=0.02)
  assert prob_one() > 0.8


def test_specs_checkpoint_and_stop():
  with pytest.raises(ValueError, match="discrete scalar action spec"):
    agent_lib.ACERAgent(OBS, ArraySpec((2,), "float32"), 4, _config())
  agent = agent_lib.ACERAgent(OBS, ACT, 4, _config())
  assert {"network", "optimizer", "step", "average_network"} <= set(
    agent.checkpoint_objects()
  )
  plain = agent_lib.ACERAgent(OBS, ACT, 4, _config(trust_region=False))
  assert "average_network" not in plain.checkpoint_objects()
  with pytest.raises(ValueError, match="lacks 'logits'"):
    unroll = _fake_unroll()
    unroll.extras = {}
    agent.add_unrolls(unroll)
  agent.stop()
  assert agent.train_step() == {}


# --------------------------------------------------------------- gin file ---


def test_gin_file_parses_into_a_valid_config():
  with gin_file_parsed("classic", "acer"):
    config = ACERConfig()
    env_id = gin.query_parameter("classic.create_environment.env_id")
  assert env_id == "CartPole-v1"
  assert config.trust_region and config.truncation_threshold == 10.0


# -------------------------------------------------------------- end to end ---


@pytest.mark.timeout(180)  # the learner start (TF import, tracing) dominates
def test_cartpole_end_to_end(tmp_path):
  """The real launcher: a learner and two actor processes on CartPole-v1,
  gRPC, 30 ACER updates (on-policy and replayed), TensorBoard diagnostics
  and a checkpoint."""
  logdir = tmp_path / "run"
  bindings = [
    "ACERConfig.batch_size = 8",
    "ACERConfig.min_replay_size = 16",
    "ACERConfig.replay_ratio = 2.0",
  ]
  launch.train_briefly(logdir, "classic", "acer", 30, bindings)
  want = {
    "loss/total",
    "loss/policy",
    "loss/value",
    "loss/entropy",
    "policy/entropy",
    "value/explained_variance",
    "q/mean",
    "acer/importance_weight_mean",
    "acer/truncated_fraction",
    "acer/replay_fraction",
    "acer/trust_region_active",
    "grad/norm",
    "opt/learning_rate",
    "perf/policy_lag",
    "perf/samples_per_env_step",
  }
  missing = want - launch.event_tags(logdir)
  assert not missing, sorted(missing)
