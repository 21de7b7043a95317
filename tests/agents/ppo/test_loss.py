"""PPO objectives and their gradients on hand-computed cases and NumPy
references written from Schulman et al. 2017 (eqs. 7 and 8) and Hilton et
al. 2021 (the decoupled objective, eq. 2)."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents import learning
from seed_rl.agents.advantages import normalize_advantages
from seed_rl.agents.ppo import loss as loss_lib

EPS = 0.2
# (ratio, advantage, objective, d objective / d log pi) by hand, eps = 0.2.
# d(r A)/d log pi = r A; a clipped term is constant, so its gradient is 0.
CLIP_CASES = [
  (0.5, 1.0, 0.5, 0.5),  # r < 1-eps, A > 0: unclipped r A is smaller
  (0.9, 1.0, 0.9, 0.9),  # inside the trust region
  (1.1, 1.0, 1.1, 1.1),
  (1.5, 1.0, 1.2, 0.0),  # r > 1+eps, A > 0: clipped, no incentive
  (0.5, -1.0, -0.8, 0.0),  # r < 1-eps, A < 0: clipped, no incentive
  (0.9, -1.0, -0.9, -0.9),
  (1.5, -1.0, -1.5, -1.5),  # r > 1+eps, A < 0: unclipped r A is smaller
  (1.3, 2.0, 2.4, 0.0),
  (0.7, -3.0, -2.4, 0.0),
]


def test_clipped_surrogate_values_and_gradients():
  ratio, adv, objective, grad = (
    np.array(c, np.float32) for c in zip(*CLIP_CASES)
  )
  log_prob = tf.Variable(np.log(ratio))
  with tf.GradientTape() as tape:
    per_sample = learning.clipped_surrogate(tf.exp(log_prob), adv, EPS)
    total = tf.reduce_sum(per_sample)
  np.testing.assert_allclose(per_sample.numpy(), objective, rtol=1e-6)
  np.testing.assert_allclose(
    tape.gradient(total, log_prob).numpy(), grad, rtol=1e-5, atol=1e-7
  )


def test_kl_penalty_surrogate_values_and_gradients():
  ratio = np.array([0.5, 1.0, 1.5], np.float32)
  adv = np.array([1.0, -2.0, 0.5], np.float32)
  kl = tf.Variable([0.01, 0.02, 0.1])
  log_prob = tf.Variable(np.log(ratio))
  beta = 3.0
  with tf.GradientTape(persistent=True) as tape:
    per_sample = loss_lib.kl_penalty_surrogate(tf.exp(log_prob), adv, kl, beta)
    total = tf.reduce_sum(per_sample)
  np.testing.assert_allclose(
    per_sample.numpy(), ratio * adv - beta * kl.numpy(), rtol=1e-6
  )
  # Unlike clipping, the penalty never zeroes the surrogate's gradient.
  np.testing.assert_allclose(
    tape.gradient(total, log_prob).numpy(), ratio * adv, rtol=1e-6
  )
  np.testing.assert_allclose(tape.gradient(total, kl).numpy(), [-beta] * 3)


def test_kl_cutoff_penalises_beyond_factor_times_target():
  kl = tf.constant([0.01, 0.05])
  per_sample = loss_lib.kl_penalty_surrogate(
    tf.ones(2),
    tf.zeros(2),
    kl,
    kl_coef=1.0,
    kl_target=0.01,
    cutoff_factor=2.0,
    cutoff_coef=1000.0,
  )
  # Only the second sample exceeds 2 * 0.01: 1000 * (0.05 - 0.02)^2 = 0.9.
  np.testing.assert_allclose(
    per_sample.numpy(), [-0.01, -0.05 - 0.9], rtol=1e-5
  )
  with pytest.raises(ValueError, match="kl_target"):
    loss_lib.kl_penalty_surrogate(
      tf.ones(1), tf.zeros(1), tf.zeros(1), 1.0, cutoff_factor=2.0
    )


def test_value_loss_clipping_by_hand():
  returns = np.ones(3, np.float32)
  old = np.zeros(3, np.float32)
  values = tf.Variable([0.1, 0.5, -0.5])
  with tf.GradientTape() as tape:
    per_sample = loss_lib.value_loss(values, returns, old, value_clip=0.2)
    total = tf.reduce_sum(per_sample)
  # 0.1: both branches give (0.9)^2; 0.5: clipped to 0.2 -> (0.8)^2 > 0.25,
  # so the constant clipped branch wins (gradient 0); -0.5: the unclipped
  # (1.5)^2 > (1.2)^2 wins, gradient V - R = -1.5.
  np.testing.assert_allclose(
    per_sample.numpy(), [0.5 * 0.81, 0.5 * 0.64, 0.5 * 2.25], rtol=1e-6
  )
  np.testing.assert_allclose(
    tape.gradient(total, values).numpy(),
    [-0.9, 0.0, -1.5],
    rtol=1e-5,
    atol=1e-7,
  )
  unclipped = loss_lib.value_loss(values, returns)
  np.testing.assert_allclose(
    unclipped.numpy(), 0.5 * (values.numpy() - 1) ** 2, rtol=1e-6
  )
  with pytest.raises(ValueError, match="old_values"):
    loss_lib.value_loss(values, returns, value_clip=0.2)


def _numpy_ppo_loss(
  log_prob,
  blp,
  adv,
  values,
  returns,
  old_values,
  entropy,
  eps,
  value_clip,
  ent_cost,
  v_cost,
):
  """Per-sample loops over the paper's formulas."""
  n = len(log_prob)
  adv = (adv - adv.mean()) / (adv.std() + 1e-8)
  policy, value, approx_kl, clipped = 0.0, 0.0, 0.0, 0.0
  for i in range(n):
    r = np.exp(log_prob[i] - blp[i])
    policy += min(r * adv[i], min(max(r, 1 - eps), 1 + eps) * adv[i])
    v_clipped = old_values[i] + min(
      max(values[i] - old_values[i], -value_clip), value_clip
    )
    value += 0.5 * max(
      (values[i] - returns[i]) ** 2, (v_clipped - returns[i]) ** 2
    )
    approx_kl += (r - 1) - np.log(r)
    clipped += abs(r - 1) > eps
  return {
    "loss/policy": -policy / n,
    "loss/value": v_cost * value / n,
    "loss/entropy": -ent_cost * entropy.mean(),
    "policy/approx_kl": approx_kl / n,
    "policy/clip_fraction": clipped / n,
  }


def test_ppo_loss_matches_numpy_reference():
  rng = np.random.default_rng(0)
  n = 64
  f32 = lambda x: np.asarray(x, np.float32)
  blp = f32(rng.normal(size=n))
  log_prob = f32(blp + rng.normal(scale=0.3, size=n))
  adv, values = f32(rng.normal(size=n) * 3 + 1), f32(rng.normal(size=n))
  returns, old_values = f32(rng.normal(size=n)), f32(rng.normal(size=n))
  entropy = f32(rng.random(n))
  loss, metrics = loss_lib.ppo_loss(
    log_prob,
    blp,
    adv,
    values,
    returns,
    entropy,
    loss_type="clip",
    clip_ratio=EPS,
    old_values=old_values,
    value_clip=0.3,
    entropy_cost=0.01,
    value_cost=0.5,
  )
  expected = _numpy_ppo_loss(
    log_prob.astype(np.float64),
    blp,
    adv,
    values,
    returns,
    old_values,
    entropy,
    EPS,
    0.3,
    0.01,
    0.5,
  )
  for name, value in expected.items():
    np.testing.assert_allclose(
      metrics[name].numpy(), value, rtol=1e-4, atol=1e-6, err_msg=name
    )
  np.testing.assert_allclose(
    loss.numpy(),
    sum(expected[k] for k in ("loss/policy", "loss/value", "loss/entropy")),
    rtol=1e-4,
  )
  assert 0.0 < expected["policy/clip_fraction"] < 1.0  # both regimes exercised


def test_ppo_loss_kl_penalty_and_entropy_gradient():
  log_prob = tf.Variable([0.0, 0.0])
  entropy = tf.Variable([1.0, 2.0])
  kl = tf.Variable([0.1, 0.3])
  with tf.GradientTape(persistent=True) as tape:
    loss, metrics = loss_lib.ppo_loss(
      log_prob,
      tf.zeros(2),
      tf.constant([1.0, -1.0]),
      tf.zeros(2),
      tf.zeros(2),
      entropy,
      loss_type="kl_penalty",
      kl=kl,
      kl_coef=2.0,
      entropy_cost=0.5,
      normalize_advantage=False,
    )
  # -(mean(r A) - beta mean(kl)) with r = 1: -(0 - 2 * 0.2) = 0.4.
  np.testing.assert_allclose(metrics["loss/policy"].numpy(), 0.4, rtol=1e-6)
  np.testing.assert_allclose(metrics["ppo/kl_coef"].numpy(), 2.0)
  np.testing.assert_allclose(tape.gradient(loss, kl).numpy(), [1.0, 1.0])
  np.testing.assert_allclose(
    tape.gradient(loss, entropy).numpy(), [-0.25, -0.25]
  )
  np.testing.assert_allclose(tape.gradient(loss, log_prob).numpy(), [-0.5, 0.5])
  with pytest.raises(ValueError, match="needs kl"):
    loss_lib.ppo_loss(
      log_prob,
      tf.zeros(2),
      tf.zeros(2),
      tf.zeros(2),
      tf.zeros(2),
      entropy,
      loss_type="kl_penalty",
    )
  with pytest.raises(ValueError, match="allowed: clip, kl_penalty"):
    loss_lib.ppo_loss(
      log_prob,
      tf.zeros(2),
      tf.zeros(2),
      tf.zeros(2),
      tf.zeros(2),
      entropy,
      loss_type="trpo",
    )


def test_clipped_loss_gradient_zero_where_clipped_through_ppo_loss():
  ratio = np.array([1.5, 0.5], np.float32)  # both past the clip, helpfully
  log_prob = tf.Variable(np.log(ratio))
  with tf.GradientTape() as tape:
    loss, metrics = loss_lib.ppo_loss(
      log_prob,
      tf.zeros(2),
      tf.constant([1.0, -1.0]),
      tf.zeros(2),
      tf.zeros(2),
      tf.zeros(2),
      clip_ratio=EPS,
      normalize_advantage=False,
    )
  np.testing.assert_allclose(tape.gradient(loss, log_prob).numpy(), [0, 0])
  np.testing.assert_allclose(metrics["policy/clip_fraction"].numpy(), 1.0)


def _numpy_decoupled(log_prob, prox, blp, adv, eps):
  """Per sample: (pi_prox / mu) min(r A, clip(r) A) with r = pi / pi_prox,
  and its derivative by log pi (r A where the unclipped term is the min
  and moves, else 0), times the weight."""
  objective, grad = [], []
  for lp, pp, bp, a in zip(log_prob, prox, blp, adv):
    w, r = np.exp(pp - bp), np.exp(lp - pp)
    unclipped, clipped = r * a, min(max(r, 1 - eps), 1 + eps) * a
    objective.append(w * min(unclipped, clipped))
    moves = unclipped <= clipped and (
      1 - eps <= r <= 1 + eps or unclipped < clipped
    )
    grad.append(w * r * a if moves else 0.0)
  return np.array(objective), np.array(grad)


def test_decoupled_surrogate_matches_numpy_and_anchors_at_the_proximal_policy():
  rng = np.random.default_rng(1)
  n = 64
  f32 = lambda x: np.asarray(x, np.float32)
  blp = f32(rng.normal(size=n))
  # A lagging learner: the proximal policy has moved from mu, often past
  # eps; the current one a little further.
  prox = f32(blp + rng.normal(scale=0.3, size=n))
  log_prob = tf.Variable(f32(prox + rng.normal(scale=0.15, size=n)))
  adv = f32(rng.normal(size=n))
  with tf.GradientTape() as tape:
    per_sample = learning.decoupled_clipped_surrogate(
      log_prob, prox, blp, adv, EPS
    )
    total = tf.reduce_sum(per_sample)
  objective, grad = _numpy_decoupled(
    log_prob.numpy().astype(np.float64), prox, blp, adv, EPS
  )
  np.testing.assert_allclose(per_sample.numpy(), objective, rtol=1e-5)
  np.testing.assert_allclose(
    tape.gradient(total, log_prob).numpy(), grad, rtol=1e-4, atol=1e-6
  )
  # Where mu's ratio is past the clip but pi_prox's is not, the decoupled
  # objective still pushes; the behaviour-anchored one does not.
  r_mu = np.exp(log_prob.numpy() - blp)
  r_prox = np.exp(log_prob.numpy() - prox)
  stuck = (r_mu > 1 + EPS) & (adv > 0) & (np.abs(r_prox - 1) < EPS)
  assert stuck.any() and np.all(grad[stuck] > 0)
  # With mu = pi_prox it is the paper's L^CLIP.
  same = learning.decoupled_clipped_surrogate(log_prob, blp, blp, adv, EPS)
  np.testing.assert_allclose(
    same.numpy(),
    learning.clipped_surrogate(tf.exp(log_prob - blp), adv, EPS).numpy(),
    rtol=1e-6,
  )
  # The truncated weight, as V-trace's rho-bar.
  capped = learning.decoupled_clipped_surrogate(
    log_prob, prox, blp, adv, EPS, max_weight=1.0
  )
  w = np.exp(prox - blp)
  np.testing.assert_allclose(
    capped.numpy(), objective * np.minimum(w, 1.0) / w, rtol=1e-5, atol=1e-7
  )


def test_ppo_loss_with_the_proximal_anchor():
  rng = np.random.default_rng(2)
  n = 32
  f32 = lambda x: np.asarray(x, np.float32)
  blp = f32(rng.normal(size=n))
  prox = f32(blp + rng.normal(scale=0.3, size=n))
  log_prob = f32(prox + rng.normal(scale=0.1, size=n))
  adv = f32(rng.normal(size=n) * 2)
  zeros = np.zeros(n, np.float32)
  loss, metrics = loss_lib.ppo_loss(
    log_prob, blp, adv, zeros, zeros, zeros, clip_ratio=EPS,
    proximal_log_prob=prox,
  )  # fmt: skip
  norm = (adv - adv.mean()) / (adv.std() + 1e-8)
  objective, _ = _numpy_decoupled(log_prob, prox, blp, norm, EPS)
  np.testing.assert_allclose(
    metrics["loss/policy"].numpy(), -objective.mean(), rtol=1e-4
  )
  r = np.exp(log_prob.astype(np.float64) - prox)
  np.testing.assert_allclose(
    metrics["policy/clip_fraction"].numpy(), np.mean(np.abs(r - 1) > EPS)
  )
  np.testing.assert_allclose(
    metrics["ppo/proximal_weight"].numpy(), np.exp(prox - blp).mean(),
    rtol=1e-5,
  )  # fmt: skip
  with pytest.raises(ValueError, match="allowed with it: 'clip'"):
    loss_lib.ppo_loss(
      log_prob, blp, adv, zeros, zeros, zeros, loss_type="kl_penalty",
      kl=zeros, proximal_log_prob=prox,
    )  # fmt: skip


def test_adapt_kl_coef_doubles_and_halves():
  assert loss_lib.adapt_kl_coef(1.0, 0.02, 0.01) == 2.0  # > 1.5 x target
  assert loss_lib.adapt_kl_coef(1.0, 0.005, 0.01) == 0.5  # < target / 1.5
  assert loss_lib.adapt_kl_coef(1.0, 0.012, 0.01) == 1.0  # within tolerance
  assert loss_lib.adapt_kl_coef(1e6, 1.0, 0.01) == 1e6  # bounded


def test_normalize_advantages():
  adv = np.array([1.0, 2.0, 3.0, 10.0], np.float32)
  out = normalize_advantages(adv).numpy()
  np.testing.assert_allclose(
    out, (adv - adv.mean()) / (adv.std() + 1e-8), rtol=1e-5
  )
