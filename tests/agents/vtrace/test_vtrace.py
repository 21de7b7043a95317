"""V-trace targets and the IMPALA loss vs NumPy references.

The references are written with plain loops from Espeholt et al. 2018
(arXiv 1802.01561), eq. (1) in its n-step product form (not the backward
recursion the implementation uses), and from raw per-step episode flags (not
the discounts / next_values / trace_mask encoding).
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents import episode_ends
from seed_rl.agents.vtrace import loss as loss_lib
from seed_rl.agents.vtrace import vtrace
from seed_rl.agents import distributions

# ---------------------------------------------------------------- references


def reference_vtrace(
  log_rhos,
  discounts,
  rewards,
  values,
  next_values,
  trace_mask,
  rho_bar=1.0,
  c_bar=1.0,
  pg_rho_bar=1.0,
  lam=1.0,
):
  """Eq. (1) as an explicit sum of products, per (s, b), cut at episode ends.

  v_s = V(x_s) + sum_{t=s}^{k} (prod_{i=s}^{t-1} discounts_i c_i) delta_t with
  delta_t = rho_t (r_t + discounts_t next_values_t - V(x_t)) and
  c_i = lam min(c_bar, rho_i); k is the first t >= s with trace_mask_t = 0,
  or T-1.
  """
  num_steps, batch = values.shape
  rhos = np.exp(log_rhos)
  vs = np.zeros_like(values)
  advantages = np.zeros_like(values)
  for b in range(batch):
    for s in range(num_steps):
      total = values[s, b]
      for t in range(s, num_steps):
        coefficient = 1.0
        for i in range(s, t):
          coefficient *= discounts[i, b] * lam * min(c_bar, rhos[i, b])
        delta = min(rho_bar, rhos[t, b]) * (
          rewards[t, b] + discounts[t, b] * next_values[t, b] - values[t, b]
        )
        total += coefficient * delta
        if trace_mask[t, b] == 0:
          break
      vs[s, b] = total
    for s in range(num_steps):
      inside = s + 1 < num_steps and trace_mask[s, b] == 1
      v_next = vs[s + 1, b] if inside else next_values[s, b]
      advantages[s, b] = min(pg_rho_bar, rhos[s, b]) * (
        rewards[s, b] + discounts[s, b] * v_next - values[s, b]
      )
  return vs, advantages


def reference_from_flags(
  log_rhos,
  reward,
  terminated,
  truncated,
  bootstrap_value,
  values,
  gamma,
  rho_bar=1.0,
  c_bar=1.0,
  pg_rho_bar=1.0,
  lam=1.0,
):
  """V-trace over an unroll of T+1 steps from the raw Unroll fields.

  reward/terminated/truncated/bootstrap_value/values are [T+1, B] with the
  Unroll convention (flags of the transition INTO step t); log_rhos [T, B].
  Walks each episode segment directly: the transition s -> s+1 earns
  reward[s+1]; a segment ends at the first step whose next transition ends
  the episode; the value after it is 0 (terminated), bootstrap_value
  (truncated) or V(x_{t+1}) (unroll end / inside the episode).
  """
  num_steps = log_rhos.shape[0]
  batch = log_rhos.shape[1]
  rhos = np.exp(log_rhos)
  vs = np.zeros([num_steps, batch])
  advantages = np.zeros([num_steps, batch])

  def value_after(t, b):
    if terminated[t + 1, b]:
      return 0.0
    if truncated[t + 1, b]:
      return bootstrap_value[t + 1, b]
    return values[t + 1, b]

  def ends_after(t, b):
    return bool(terminated[t + 1, b] or truncated[t + 1, b])

  for b in range(batch):
    for s in range(num_steps):
      total = values[s, b]
      weight = 1.0
      for t in range(s, num_steps):
        delta = min(rho_bar, rhos[t, b]) * (
          reward[t + 1, b] + gamma * value_after(t, b) - values[t, b]
        )
        total += weight * delta
        if ends_after(t, b):
          break
        weight *= gamma * lam * min(c_bar, rhos[t, b])
      vs[s, b] = total
    for s in range(num_steps):
      if ends_after(s, b) or s + 1 == num_steps:
        v_next = value_after(s, b)
      else:
        v_next = vs[s + 1, b]
      advantages[s, b] = min(pg_rho_bar, rhos[s, b]) * (
        reward[s + 1, b] + gamma * v_next - values[s, b]
      )
  return vs, advantages


def random_boundary_inputs(rng, num_steps, batch):
  values = rng.normal(size=[num_steps, batch])
  next_values = np.concatenate([values[1:], rng.normal(size=[1, batch])])
  return dict(
    log_rhos=rng.normal(scale=1.0, size=[num_steps, batch]),
    discounts=np.full([num_steps, batch], 0.9),
    rewards=rng.normal(size=[num_steps, batch]),
    values=values,
    next_values=next_values,
    trace_mask=np.ones([num_steps, batch]),
  )


def run_vtrace(inputs, **clips):
  vs, adv = vtrace.vtrace_targets(
    **{k: tf.constant(v, tf.float32) for k, v in inputs.items()}, **clips
  )
  return vs.numpy(), adv.numpy()


# ------------------------------------------------------------ vtrace_targets


@pytest.mark.parametrize(
  "clips",
  [
    dict(
      clip_rho_threshold=1.0, clip_c_threshold=1.0, clip_pg_rho_threshold=1.0
    ),
    dict(
      clip_rho_threshold=1.7, clip_c_threshold=0.6, clip_pg_rho_threshold=1.2
    ),
    dict(
      clip_rho_threshold=1.7,
      clip_c_threshold=0.6,
      clip_pg_rho_threshold=1.2,
      trace_lambda=0.8,
    ),
  ],
)
def test_random_inputs_match_reference_with_clipping(clips):
  rng = np.random.default_rng(0)
  inputs = random_boundary_inputs(rng, num_steps=7, batch=5)
  rhos = np.exp(inputs["log_rhos"])
  # Clipping must actually bind on both sides for the test to mean anything.
  assert (rhos > 1.7).any() and (rhos < 0.6).any()
  vs, adv = run_vtrace(inputs, **clips)
  ref_vs, ref_adv = reference_vtrace(
    **inputs,
    rho_bar=clips["clip_rho_threshold"],
    c_bar=clips["clip_c_threshold"],
    pg_rho_bar=clips["clip_pg_rho_threshold"],
    lam=clips.get("trace_lambda", 1.0),
  )
  np.testing.assert_allclose(vs, ref_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lam", [1.0, 0.7])
def test_random_boundaries_match_reference(lam):
  rng = np.random.default_rng(1)
  inputs = random_boundary_inputs(rng, num_steps=9, batch=6)
  terminated = rng.random([9, 6]) < 0.2
  truncated = (rng.random([9, 6]) < 0.2) & ~terminated
  inputs["discounts"] = 0.95 * (1.0 - terminated)
  inputs["next_values"] = np.where(
    truncated, rng.normal(size=[9, 6]), inputs["next_values"]
  )
  inputs["trace_mask"] = 1.0 - (terminated | truncated)
  vs, adv = run_vtrace(inputs, trace_lambda=lam)
  ref_vs, ref_adv = reference_vtrace(**inputs, lam=lam)
  np.testing.assert_allclose(vs, ref_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)


def transition_targets(
  log_rhos,
  reward,
  terminated,
  truncated,
  bootstrap_value,
  values,
  gamma,
  **clips,
):
  """Implementation path: raw flags -> transition_inputs -> vtrace_targets."""
  discounts, next_values, trace_mask = episode_ends.transition_inputs(
    tf.constant(values, tf.float32),
    tf.constant(terminated),
    tf.constant(truncated),
    tf.constant(bootstrap_value, tf.float32),
    gamma,
  )
  vs, adv = vtrace.vtrace_targets(
    tf.constant(log_rhos, tf.float32),
    discounts,
    tf.constant(reward[1:], tf.float32),
    tf.constant(values[:-1], tf.float32),
    next_values,
    trace_mask,
    **clips,
  )
  return vs.numpy(), adv.numpy()


def unroll_flags(num_steps, batch, terminated_at=(), truncated_at=()):
  terminated = np.zeros([num_steps + 1, batch], bool)
  truncated = np.zeros([num_steps + 1, batch], bool)
  for t, b in terminated_at:
    terminated[t, b] = True
  for t, b in truncated_at:
    truncated[t, b] = True
  return terminated, truncated


def targets_matching_reference(
  log_rhos, reward, terminated, truncated, bootstrap, values, gamma, lam=1.0
):
  """transition_targets, asserted equal to reference_from_flags."""
  vs, adv = transition_targets(
    log_rhos,
    reward,
    terminated,
    truncated,
    bootstrap,
    values,
    gamma,
    trace_lambda=lam,
  )
  ref_vs, ref_adv = reference_from_flags(
    log_rhos, reward, terminated, truncated, bootstrap, values, gamma, lam=lam
  )
  np.testing.assert_allclose(vs, ref_vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
  return vs, adv


def test_termination_mid_unroll():
  rng = np.random.default_rng(2)
  num_steps, batch = 6, 3
  terminated, truncated = unroll_flags(
    num_steps, batch, terminated_at=[(3, 0), (1, 2), (6, 1)]
  )
  values = rng.normal(size=[num_steps + 1, batch])
  reward = rng.normal(size=[num_steps + 1, batch])
  log_rhos = rng.normal(size=[num_steps, batch])
  bootstrap = np.zeros_like(values)
  vs, _ = targets_matching_reference(
    log_rhos, reward, terminated, truncated, bootstrap, values, 0.9
  )
  # The step before a termination does not bootstrap at all.
  rho = min(1.0, math.exp(log_rhos[2, 0]))
  np.testing.assert_allclose(
    vs[2, 0], values[2, 0] + rho * (reward[3, 0] - values[2, 0]), rtol=1e-5
  )


def test_truncation_mid_unroll_bootstraps_and_cuts_trace():
  rng = np.random.default_rng(3)
  num_steps, batch = 6, 2
  terminated, truncated = unroll_flags(
    num_steps, batch, truncated_at=[(3, 0), (5, 1)]
  )
  values = rng.normal(size=[num_steps + 1, batch])
  reward = rng.normal(size=[num_steps + 1, batch])
  log_rhos = rng.normal(size=[num_steps, batch])
  bootstrap = np.zeros_like(values)
  bootstrap[3, 0], bootstrap[5, 1] = 7.5, -4.0
  vs, adv = targets_matching_reference(
    log_rhos, reward, terminated, truncated, bootstrap, values, 0.9
  )
  # The last step of the truncated episode bootstraps from bootstrap_value.
  rho = min(1.0, math.exp(log_rhos[2, 0]))
  np.testing.assert_allclose(
    vs[2, 0],
    values[2, 0] + rho * (reward[3, 0] + 0.9 * 7.5 - values[2, 0]),
    rtol=1e-5,
  )
  # Nothing from the next episode (rewards, values) reaches back across.
  changed_reward, changed_values = reward.copy(), values.copy()
  changed_reward[4:, 0] += 100.0
  changed_values[3:, 0] -= 50.0
  vs2, adv2 = transition_targets(
    log_rhos,
    changed_reward,
    terminated,
    truncated,
    bootstrap,
    changed_values,
    0.9,
  )
  np.testing.assert_allclose(vs2[:3, 0], vs[:3, 0], rtol=1e-6)
  np.testing.assert_allclose(adv2[:3, 0], adv[:3, 0], rtol=1e-6)
  assert not np.allclose(vs2[3:, 0], vs[3:, 0])


def test_discount_zero_is_one_step_targets():
  rng = np.random.default_rng(4)
  num_steps, batch = 5, 3
  terminated, truncated = unroll_flags(
    num_steps, batch, truncated_at=[(2, 1)], terminated_at=[(4, 2)]
  )
  values = rng.normal(size=[num_steps + 1, batch])
  reward = rng.normal(size=[num_steps + 1, batch])
  log_rhos = rng.normal(size=[num_steps, batch])
  bootstrap = rng.normal(size=values.shape)
  vs, adv = transition_targets(
    log_rhos, reward, terminated, truncated, bootstrap, values, 0.0
  )
  rhos = np.minimum(1.0, np.exp(log_rhos))
  np.testing.assert_allclose(
    vs, values[:-1] + rhos * (reward[1:] - values[:-1]), rtol=1e-5, atol=1e-6
  )
  np.testing.assert_allclose(
    adv, rhos * (reward[1:] - values[:-1]), rtol=1e-5, atol=1e-6
  )


def nstep_returns(
  reward, terminated, truncated, bootstrap_value, values, gamma
):
  """On-policy n-step returns to the end of the unroll or episode."""
  num_steps = reward.shape[0] - 1
  returns = np.zeros([num_steps, reward.shape[1]])
  for b in range(reward.shape[1]):
    for s in range(num_steps):
      total, weight = 0.0, 1.0
      for t in range(s, num_steps):
        total += weight * reward[t + 1, b]
        weight *= gamma
        if terminated[t + 1, b]:
          break
        if truncated[t + 1, b]:
          total += weight * bootstrap_value[t + 1, b]
          break
        if t + 1 == num_steps:
          total += weight * values[t + 1, b]
      returns[s, b] = total
  return returns


@pytest.mark.parametrize("gamma", [1.0, 0.97])
def test_on_policy_reduces_to_nstep_returns(gamma):
  rng = np.random.default_rng(5)
  num_steps, batch = 8, 4
  terminated, truncated = unroll_flags(
    num_steps,
    batch,
    terminated_at=[(2, 0), (8, 3)],
    truncated_at=[(5, 1), (5, 0)],
  )
  values = rng.normal(size=[num_steps + 1, batch])
  reward = rng.normal(size=[num_steps + 1, batch])
  bootstrap = rng.normal(size=values.shape)
  log_rhos = np.zeros([num_steps, batch])
  vs, adv = transition_targets(
    log_rhos, reward, terminated, truncated, bootstrap, values, gamma
  )
  expected = nstep_returns(
    reward, terminated, truncated, bootstrap, values, gamma
  )
  np.testing.assert_allclose(vs, expected, rtol=1e-5, atol=1e-5)
  # On-policy pg advantage = r + gamma * G_{t+1} - V = G_t - V (inside an
  # episode).
  np.testing.assert_allclose(adv, expected - values[:-1], rtol=1e-5, atol=1e-5)


def lambda_returns(
  reward, terminated, truncated, bootstrap_value, values, gamma, lam
):
  """On-policy lambda-returns (Sutton & Barto, eq. 12.2), recursively.

  G_s = r_{s+1} + gamma ((1 - lam) V(x_{s+1}) + lam G_{s+1}) inside an
  episode; G_s = r_{s+1} after a termination, r_{s+1} + gamma
  bootstrap_value after a truncation, and r_{s+1} + gamma V(x_T) at the
  unroll's last step (the unroll's end bootstraps like an n-step return).
  """
  num_steps = reward.shape[0] - 1
  returns = np.zeros([num_steps, reward.shape[1]])
  for b in range(reward.shape[1]):
    following = None
    for s in reversed(range(num_steps)):
      if terminated[s + 1, b]:
        g = reward[s + 1, b]
      elif truncated[s + 1, b]:
        g = reward[s + 1, b] + gamma * bootstrap_value[s + 1, b]
      elif s + 1 == num_steps:
        g = reward[s + 1, b] + gamma * values[s + 1, b]
      else:
        g = reward[s + 1, b] + gamma * (
          (1 - lam) * values[s + 1, b] + lam * following
        )
      returns[s, b] = g
      following = g
  return returns


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95])
def test_on_policy_lambda_reduces_to_lambda_returns(lam):
  rng = np.random.default_rng(8)
  num_steps, batch = 8, 4
  terminated, truncated = unroll_flags(
    num_steps, batch, terminated_at=[(3, 0), (8, 2)], truncated_at=[(5, 1)]
  )
  values = rng.normal(size=[num_steps + 1, batch])
  reward = rng.normal(size=[num_steps + 1, batch])
  bootstrap = rng.normal(size=values.shape)
  log_rhos = np.zeros([num_steps, batch])
  vs, adv = targets_matching_reference(
    log_rhos, reward, terminated, truncated, bootstrap, values, 0.97, lam
  )
  expected = lambda_returns(
    reward, terminated, truncated, bootstrap, values, 0.97, lam
  )
  np.testing.assert_allclose(vs, expected, rtol=1e-5, atol=1e-5)
  if lam == 0.0:
    # One-step targets: v_s - V(x_s) is the TD error.
    td = reward[1:] + 0.97 * (1 - terminated[1:]) * values[1:] - values[:-1]
    inside = ~(terminated[1:] | truncated[1:])
    np.testing.assert_allclose(
      (vs - values[:-1])[inside], td[inside], rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("lam", [1.0, 0.8])
def test_lambda_advantage_off_policy_is_vs_minus_values(lam):
  """advantage 'lambda' is v_s - V(x_s) of eq. (1) (the explicit sum), with
  clipped importance weights and episode ends inside the unroll."""
  rng = np.random.default_rng(11)
  inputs = random_boundary_inputs(rng, num_steps=9, batch=6)
  terminated = rng.random([9, 6]) < 0.2
  inputs["discounts"] = 0.95 * (1.0 - terminated)
  inputs["trace_mask"] = 1.0 - terminated
  _, adv = run_vtrace(
    inputs, trace_lambda=lam, advantage="lambda", weight_pg_advantages=False
  )
  ref_vs, _ = reference_vtrace(**inputs, lam=lam)
  np.testing.assert_allclose(adv, ref_vs - inputs["values"], atol=1e-5)


@pytest.mark.parametrize("lam", [0.0, 0.95, 1.0])
def test_lambda_advantage_on_policy_is_gae(lam):
  """On-policy, advantage 'lambda' is GAE(lambda) (the lambda-return minus
  V(x_s)); the paper's advantage adds gamma (1 - lambda) times the next
  step's GAE inside an episode, so the two agree only at lambda = 1."""
  rng = np.random.default_rng(12)
  num_steps, batch, gamma = 8, 4, 0.97
  terminated, truncated = unroll_flags(
    num_steps, batch, terminated_at=[(3, 0), (8, 2)], truncated_at=[(5, 1)]
  )
  values = rng.normal(size=[num_steps + 1, batch])
  reward = rng.normal(size=[num_steps + 1, batch])
  bootstrap = rng.normal(size=values.shape)
  args = (reward, terminated, truncated, bootstrap, values, gamma)
  log_rhos = np.zeros([num_steps, batch])
  _, adv = transition_targets(
    log_rhos,
    *args,
    trace_lambda=lam,
    advantage="lambda",
    weight_pg_advantages=False,
  )
  gae = lambda_returns(*args, lam) - values[:-1]
  np.testing.assert_allclose(adv, gae, rtol=1e-5, atol=1e-5)
  _, paper = transition_targets(log_rhos, *args, trace_lambda=lam)
  # Zero after an episode end and at the unroll's last step (no next step).
  next_gae = np.concatenate([gae[1:], np.zeros([1, batch])])
  next_gae *= ~(terminated[1:] | truncated[1:])
  np.testing.assert_allclose(
    paper, gae + gamma * (1 - lam) * next_gae, rtol=1e-5, atol=1e-5
  )
  assert lam == 1.0 or not np.allclose(paper, adv, atol=1e-3)


def test_vtrace_rejects_bad_inputs():
  good = random_boundary_inputs(np.random.default_rng(6), 3, 2)
  with pytest.raises(ValueError, match="clip_c_threshold must be > 0"):
    run_vtrace(good, clip_c_threshold=0.0)
  with pytest.raises(ValueError, match=r"trace_lambda must be in \[0, 1\]"):
    run_vtrace(good, trace_lambda=1.5)
  with pytest.raises(ValueError, match=r"advantage 'lambda' is not allowed"):
    run_vtrace(good, advantage="lambda")  # weighted by rho: the paper's only
  with pytest.raises(ValueError, match=r"advantage 'gae' is not allowed"):
    run_vtrace(good, advantage="gae", weight_pg_advantages=False)
  bad = dict(good, rewards=np.zeros([3, 3]))
  with pytest.raises(ValueError, match="rewards has shape"):
    run_vtrace(bad)
  bad = dict(good, trace_mask=np.zeros([3]))
  with pytest.raises(ValueError, match=r"trace_mask must be time-major"):
    run_vtrace(bad)


# ---------------------------------------------------------------- loss

EPS = 0.2  # clip_ratio of the 'clip' policy loss in these tests


def np_log_softmax(logits):
  shifted = logits - logits.max(-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


@pytest.mark.parametrize("lam", [1.0, 0.9])
@pytest.mark.parametrize("policy_loss", ["pg", "clip", "clip-proximal"])
@pytest.mark.parametrize("normalize", [False, True])
def test_impala_loss_matches_numpy_reference(normalize, policy_loss, lam):
  # 'clip-proximal': the clipped surrogate anchored at the round's starting
  # policy (Hilton et al. 2021), weighted by min(pi_prox / mu, 1).
  proximal = policy_loss == "clip-proximal"
  policy_loss = "clip" if proximal else policy_loss
  rng = np.random.default_rng(7)
  num_steps, batch, num_actions = 6, 4, 3
  gamma, value_cost, entropy_cost = 0.9, 0.5, 0.02
  logits = rng.normal(size=[num_steps + 1, batch, num_actions])
  behaviour = rng.normal(size=logits.shape)
  action = rng.integers(0, num_actions, size=[num_steps + 1, batch])
  values = rng.normal(size=[num_steps + 1, batch])
  reward = rng.normal(size=[num_steps + 1, batch])
  terminated, truncated = unroll_flags(
    num_steps, batch, terminated_at=[(2, 1)], truncated_at=[(4, 2)]
  )
  bootstrap = np.where(truncated, rng.normal(size=values.shape), 0.0)
  # Between mu and pi_theta, as a lagging learner's round start is.
  prox_logits = 0.5 * (logits + behaviour)

  total, metrics = loss_lib.impala_loss(
    distributions.Categorical(num_actions),
    tf.constant(logits, tf.float32),
    tf.constant(values, tf.float32),
    tf.constant(action, tf.int32),
    tf.constant(behaviour, tf.float32),
    tf.constant(reward, tf.float32),
    tf.constant(terminated),
    tf.constant(truncated),
    tf.constant(bootstrap, tf.float32),
    discount=gamma,
    value_cost=value_cost,
    entropy_cost=entropy_cost,
    normalize_advantage=normalize,
    policy_loss=policy_loss,
    clip_ratio=EPS,
    trace_lambda=lam,
    proximal_params=tf.constant(prox_logits, tf.float32) if proximal else None,
  )

  log_pi = np_log_softmax(logits)[:-1]
  log_mu = np_log_softmax(behaviour)[:-1]
  picked = np.take_along_axis(log_pi, action[:-1, :, None], -1)[..., 0]
  log_rhos = (
    picked - np.take_along_axis(log_mu, action[:-1, :, None], -1)[..., 0]
  )
  vs, adv = reference_from_flags(
    log_rhos, reward, terminated, truncated, bootstrap, values, gamma, lam=lam
  )
  rhos = np.exp(log_rhos)
  if policy_loss == "clip":  # the ratio carries the importance weight
    adv = adv / np.minimum(1.0, rhos)
  np.testing.assert_allclose(metrics["advantage/std"], adv.std(), rtol=1e-4)
  if normalize:  # over all T x B advantages, population std (as PPO)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
  if policy_loss == "clip":  # PPO eq. 7, per element of [T, B]
    ratio, log_ratio, weight = rhos, log_rhos, 1.0
    if proximal:
      log_prox = np.take_along_axis(
        np_log_softmax(prox_logits)[:-1], action[:-1, :, None], -1
      )[..., 0]
      log_ratio = picked - log_prox
      ratio = np.exp(log_ratio)
      weight = np.minimum(np.exp(log_prox - (picked - log_rhos)), 1.0)
      np.testing.assert_allclose(
        metrics["vtrace/proximal_weight"],
        np.mean(np.exp(log_prox - (picked - log_rhos))),
        rtol=1e-4,
      )
    surrogate = np.minimum(ratio * adv, np.clip(ratio, 1 - EPS, 1 + EPS) * adv)
    policy = -np.mean(weight * surrogate)
    np.testing.assert_allclose(
      metrics["policy/clip_fraction"], np.mean(np.abs(ratio - 1) > EPS)
    )
    np.testing.assert_allclose(
      metrics["policy/approx_kl"], np.mean(ratio - 1 - log_ratio), rtol=1e-4
    )
  else:
    policy = -np.mean(picked * adv)
  baseline = value_cost * 0.5 * np.mean((vs - values[:-1]) ** 2)
  entropy = np.mean(-(np.exp(log_pi) * log_pi).sum(-1))
  expected_total = policy + baseline - entropy_cost * entropy
  np.testing.assert_allclose(metrics["loss/policy"], policy, rtol=1e-4)
  np.testing.assert_allclose(metrics["loss/value"], baseline, rtol=1e-4)
  np.testing.assert_allclose(metrics["policy/entropy"], entropy, rtol=1e-4)
  np.testing.assert_allclose(total, expected_total, rtol=1e-4)
  np.testing.assert_allclose(
    metrics["vtrace/rho_mean"], np.mean(np.exp(log_rhos)), rtol=1e-4
  )


def test_loss_value_and_gradient_direction_hand_built():
  # One transition, two actions, uniform policy acting as the behaviour
  # policy; action 0 earns reward 1 and ends the episode; V(x_0) = 0.25.
  logits = tf.Variable([[[0.0, 0.0]], [[0.0, 0.0]]])
  baseline = tf.Variable([[0.25], [0.0]])
  terminated = tf.constant([[False], [True]])
  with tf.GradientTape() as tape:
    total, metrics = loss_lib.impala_loss(
      distributions.Categorical(2),
      logits,
      baseline,
      tf.constant([[0], [0]]),
      tf.zeros([2, 1, 2]),
      tf.constant([[0.0], [1.0]]),
      terminated,
      tf.zeros([2, 1], tf.bool),
      tf.zeros([2, 1]),
      discount=0.99,
      value_cost=0.5,
      entropy_cost=0.1,
    )
  ln2 = math.log(2.0)
  # vs = 1, advantage = 1 - 0.25.
  np.testing.assert_allclose(metrics["value/target_mean"], 1.0, rtol=1e-6)
  np.testing.assert_allclose(metrics["loss/policy"], 0.75 * ln2, rtol=1e-6)
  np.testing.assert_allclose(
    metrics["loss/value"], 0.5 * 0.5 * 0.75**2, rtol=1e-6
  )
  np.testing.assert_allclose(metrics["loss/entropy"], -0.1 * ln2, rtol=1e-6)
  np.testing.assert_allclose(
    total, 0.75 * ln2 + 0.25 * 0.75**2 - 0.1 * ln2, rtol=1e-6
  )
  grad_logits, grad_baseline = tape.gradient(total, [logits, baseline])
  # Descending the loss raises the rewarded action's logit, lowers the other,
  # raises V(x_0) towards 1, and leaves the bootstrap step untouched.
  assert grad_logits[0, 0, 0] < 0 < grad_logits[0, 0, 1]
  assert grad_baseline[0, 0] < 0
  np.testing.assert_allclose(grad_logits[1], 0.0)
  np.testing.assert_allclose(grad_baseline[1], 0.0)


@pytest.mark.parametrize("reward, moves", [(1.0, False), (-1.0, True)])
def test_clip_loss_stops_the_gradient_past_the_trust_region(reward, moves):
  # One transition; mu is uniform over 2 actions and pi_theta already puts
  # 0.8 on the action taken (r = 1.6 > 1 + EPS). With a positive advantage
  # the clipped term is the min, so the policy gets no gradient; with a
  # negative one the unclipped term is the min and pushes r back down.
  logits = tf.Variable([[[math.log(4.0), 0.0]], [[0.0, 0.0]]])
  with tf.GradientTape() as tape:
    total, metrics = loss_lib.impala_loss(
      distributions.Categorical(2),
      logits,
      tf.zeros([2, 1]),
      tf.constant([[0], [0]]),
      tf.zeros([2, 1, 2]),
      tf.constant([[0.0], [reward]]),
      tf.constant([[False], [True]]),
      tf.zeros([2, 1], tf.bool),
      tf.zeros([2, 1]),
      discount=0.99,
      value_cost=0.0,
      entropy_cost=0.0,
      policy_loss="clip",
      clip_ratio=EPS,
    )
  np.testing.assert_allclose(metrics["policy/clip_fraction"], 1.0)
  # A = reward (V = 0, episode ends): min(1.6 A, 1.2 A).
  expected = -min(1.6 * reward, (1 + EPS) * reward)
  np.testing.assert_allclose(metrics["loss/policy"], expected, rtol=1e-5)
  grad = tape.gradient(total, logits)
  if moves:
    assert grad[0, 0, 0] > 0 > grad[0, 0, 1]  # descent lowers pi(a_0)
  else:
    np.testing.assert_allclose(grad, 0.0, atol=1e-7)


def test_unknown_policy_loss_is_named():
  with pytest.raises(
    ValueError, match="policy_loss 'ppo' is unknown.*pg, clip"
  ):
    loss_lib.impala_loss(
      distributions.Categorical(2),
      tf.zeros([2, 1, 2]),
      tf.zeros([2, 1]),
      tf.constant([[0], [0]]),
      tf.zeros([2, 1, 2]),
      tf.zeros([2, 1]),
      tf.zeros([2, 1], tf.bool),
      tf.zeros([2, 1], tf.bool),
      tf.zeros([2, 1]),
      discount=0.99,
      value_cost=0.5,
      entropy_cost=0.0,
      policy_loss="ppo",
    )


@pytest.mark.parametrize("lam", [1.0, 0.95])
def test_round_targets_are_held_over_the_round(lam):
  """targets 'round': v_s and the unweighted advantages come from the
  round's starting policy and values (NumPy V-trace with those rhos), and
  each later update's loss uses them as they are, against its own values
  and ratio pi_theta / mu."""
  rng = np.random.default_rng(11)
  num_steps, batch, num_actions = 6, 4, 3
  gamma, value_cost, entropy_cost = 0.9, 0.5, 0.02
  behaviour = rng.normal(size=[num_steps + 1, batch, num_actions])
  start_logits = behaviour + 0.3 * rng.normal(size=behaviour.shape)
  start_values = rng.normal(size=[num_steps + 1, batch])
  logits = start_logits + 0.3 * rng.normal(size=behaviour.shape)
  values = start_values + 0.5 * rng.normal(size=start_values.shape)
  action = rng.integers(0, num_actions, size=[num_steps + 1, batch])
  reward = rng.normal(size=[num_steps + 1, batch])
  terminated, truncated = unroll_flags(
    num_steps, batch, terminated_at=[(2, 1)], truncated_at=[(4, 2)]
  )
  bootstrap = np.where(truncated, rng.normal(size=values.shape), 0.0)
  dist = distributions.Categorical(num_actions)
  common = (
    tf.constant(action, tf.int32),
    tf.constant(behaviour, tf.float32),
    tf.constant(reward, tf.float32),
    tf.constant(terminated),
    tf.constant(truncated),
    tf.constant(bootstrap, tf.float32),
  )
  vs, adv = loss_lib.round_targets(
    dist,
    tf.constant(start_logits, tf.float32),
    tf.constant(start_values, tf.float32),
    *common,
    discount=gamma,
    trace_lambda=lam,
  )

  def picked(x):
    return np.take_along_axis(np_log_softmax(x)[:-1], action[:-1, :, None], -1)[
      ..., 0
    ]

  start_log_rhos = picked(start_logits) - picked(behaviour)
  ref_vs, ref_adv = reference_from_flags(
    start_log_rhos,
    reward,
    terminated,
    truncated,
    bootstrap,
    start_values,
    gamma,
    lam=lam,
  )
  ref_adv = ref_adv / np.minimum(1.0, np.exp(start_log_rhos))  # unweighted
  np.testing.assert_allclose(vs, ref_vs, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-6)

  def update_loss(**settings):
    """impala_loss of the later update (its own logits and values)."""
    return loss_lib.impala_loss(
      dist,
      tf.constant(logits, tf.float32),
      tf.constant(values, tf.float32),
      *common,
      discount=gamma,
      value_cost=value_cost,
      entropy_cost=entropy_cost,
      trace_lambda=lam,
      **settings,
    )

  total, metrics = update_loss(
    policy_loss="clip", clip_ratio=EPS, fixed_targets=(vs, adv)
  )
  ratio = np.exp(picked(logits) - picked(behaviour))
  policy = -np.mean(
    np.minimum(ratio * ref_adv, np.clip(ratio, 1 - EPS, 1 + EPS) * ref_adv)
  )
  value = value_cost * 0.5 * np.mean((ref_vs - values[:-1]) ** 2)
  log_pi = np_log_softmax(logits)[:-1]
  entropy = np.mean(-(np.exp(log_pi) * log_pi).sum(-1))
  np.testing.assert_allclose(metrics["loss/policy"], policy, rtol=1e-4)
  np.testing.assert_allclose(metrics["loss/value"], value, rtol=1e-4)
  np.testing.assert_allclose(
    total, policy + value - entropy_cost * entropy, rtol=1e-4
  )
  # The update's own targets differ (its values and rhos moved): the fixed
  # ones were used, not recomputed.
  _, own = update_loss(policy_loss="clip", clip_ratio=EPS)
  assert abs(float(own["loss/value"]) - value) > 1e-3
  with pytest.raises(ValueError, match="fixed_targets hold unweighted"):
    update_loss(policy_loss="pg", fixed_targets=(vs, adv))


@pytest.mark.parametrize("value_clip", [None, 0.2])
@pytest.mark.parametrize("proximal", [False, True])
@pytest.mark.parametrize("normalize", [False, True])
def test_transition_loss_matches_numpy_reference(
  normalize, proximal, value_clip
):
  """minibatch_unit 'transition': the clipped surrogate, value and entropy
  terms over single steps with the round's v_s and advantages (PPO eq. 7;
  with 'proximal' Hilton et al.'s decoupled surrogate weighted by
  min(pi_prox / mu, 1)); advantages standardised over the minibatch; with
  value_clip PPO's clipped value error against the round's start values."""
  rng = np.random.default_rng(13)
  n, num_actions, value_cost, entropy_cost = 24, 4, 0.5, 0.01
  old_values = rng.normal(size=[n])
  behaviour = rng.normal(size=[n, num_actions])
  prox_logits = behaviour + 0.2 * rng.normal(size=behaviour.shape)
  logits = prox_logits + 0.3 * rng.normal(size=behaviour.shape)
  values, vs, adv = rng.normal(size=[3, n])
  action = rng.integers(0, num_actions, size=[n])
  total, metrics = loss_lib.transition_loss(
    distributions.Categorical(num_actions),
    tf.constant(logits, tf.float32),
    tf.constant(values, tf.float32),
    tf.constant(action, tf.int32),
    tf.constant(behaviour, tf.float32),
    tf.constant(vs, tf.float32),
    tf.constant(adv, tf.float32),
    value_cost=value_cost,
    entropy_cost=entropy_cost,
    normalize_advantage=normalize,
    clip_ratio=EPS,
    proximal_params=tf.constant(prox_logits, tf.float32) if proximal else None,
    old_values=tf.constant(old_values, tf.float32),
    value_clip=value_clip,
  )

  def picked(x):
    return np.take_along_axis(np_log_softmax(x), action[:, None], -1)[:, 0]

  a = (adv - adv.mean()) / (adv.std() + 1e-8) if normalize else adv
  anchor = picked(prox_logits) if proximal else picked(behaviour)
  ratio = np.exp(picked(logits) - anchor)
  weight = np.minimum(np.exp(anchor - picked(behaviour)), 1.0)
  policy = -np.mean(
    weight * np.minimum(ratio * a, np.clip(ratio, 1 - EPS, 1 + EPS) * a)
  )
  error = (vs - values) ** 2
  if value_clip is not None:  # PPO2's: the larger of plain and clipped
    moved = old_values + np.clip(values - old_values, -value_clip, value_clip)
    assert np.sum((moved - vs) ** 2 > error) >= 3  # the clip binds somewhere
    error = np.maximum(error, (moved - vs) ** 2)
  value = value_cost * 0.5 * np.mean(error)
  log_pi = np_log_softmax(logits)
  entropy = np.mean(-(np.exp(log_pi) * log_pi).sum(-1))
  np.testing.assert_allclose(metrics["loss/policy"], policy, rtol=1e-4)
  np.testing.assert_allclose(metrics["loss/value"], value, rtol=1e-4)
  np.testing.assert_allclose(metrics["policy/entropy"], entropy, rtol=1e-4)
  np.testing.assert_allclose(
    total, policy + value - entropy_cost * entropy, rtol=1e-4
  )
  np.testing.assert_allclose(
    metrics["policy/clip_fraction"], np.mean(np.abs(ratio - 1) > EPS)
  )
  np.testing.assert_allclose(metrics["advantage/std"], adv.std(), rtol=1e-4)
  np.testing.assert_allclose(
    metrics["vtrace/rho_mean"],
    np.mean(np.exp(picked(logits) - picked(behaviour))),
    rtol=1e-4,
  )
