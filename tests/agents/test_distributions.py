"""Action distributions against NumPy references.

The tanh reference applies the change of variables directly,
log p(a) = log N(u) - sum log |da/du| with da/du = s (1 - tanh(u)^2), and a
density that integrates to 1 over the Box. Clip mode is checked to give an
unbiased score-function gradient only when the log-prob is of the raw sample.
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents import distributions
from seed_rl.common.specs import ArraySpec


def np_normal_log_prob(u, mean, std):
  return np.sum(
    -0.5 * ((u - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi),
    axis=-1,
  )


def _params(mean, log_std):
  return np.concatenate([mean, log_std], axis=-1).astype(np.float32)


def test_categorical_against_numpy():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(5, 4)).astype(np.float32)
  other = rng.normal(size=(5, 4)).astype(np.float32)
  actions = np.array([0, 3, 1, 2, 3], np.int32)
  dist = distributions.Categorical(4)
  probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  q = np.exp(other) / np.exp(other).sum(-1, keepdims=True)
  np.testing.assert_allclose(
    dist.log_prob(logits, actions).numpy(),
    np.log(probs[np.arange(5), actions]),
    rtol=1e-5,
  )
  np.testing.assert_allclose(
    dist.entropy(logits).numpy(), -(probs * np.log(probs)).sum(-1), rtol=1e-5
  )
  np.testing.assert_allclose(
    dist.kl(logits, other).numpy(),
    (probs * np.log(probs / q)).sum(-1),
    rtol=1e-4,
    atol=1e-6,
  )
  action, raw = dist.mode(logits)
  np.testing.assert_array_equal(action.numpy(), logits.argmax(-1))
  np.testing.assert_array_equal(raw.numpy(), action.numpy())


def test_categorical_sampling_frequencies():
  logits = np.log(np.array([[0.1, 0.6, 0.3]] * 20000, np.float32))
  gen = tf.random.Generator.from_seed(0)
  action, _ = distributions.Categorical(3).sample(logits, gen)
  freq = np.bincount(action.numpy(), minlength=3) / 20000
  np.testing.assert_allclose(freq, [0.1, 0.6, 0.3], atol=0.015)


def test_gaussian_log_prob_entropy_kl_against_numpy():
  rng = np.random.default_rng(1)
  mean, log_std = rng.normal(size=(6, 3)), rng.normal(size=(6, 3)) * 0.5
  mean2, log_std2 = rng.normal(size=(6, 3)), rng.normal(size=(6, 3)) * 0.5
  u = rng.normal(size=(6, 3)).astype(np.float32)
  dist = distributions.DiagGaussian(3, bounds="none")
  p, q = _params(mean, log_std), _params(mean2, log_std2)
  std, std2 = np.exp(log_std), np.exp(log_std2)
  np.testing.assert_allclose(
    dist.log_prob(p, u).numpy(), np_normal_log_prob(u, mean, std), rtol=1e-4
  )
  np.testing.assert_allclose(
    dist.entropy(p).numpy(),
    np.sum(log_std + 0.5 * np.log(2 * np.pi * np.e), -1),
    rtol=1e-5,
  )
  kl = np.sum(
    log_std2 - log_std + (std**2 + (mean - mean2) ** 2) / (2 * std2**2) - 0.5,
    -1,
  )
  np.testing.assert_allclose(dist.kl(p, q).numpy(), kl, rtol=1e-4, atol=1e-5)


def test_tanh_log_prob_against_change_of_variables():
  rng = np.random.default_rng(2)
  low, high = np.array([-1.0, 0.0]), np.array([1.0, 4.0])
  dist = distributions.DiagGaussian(2, "tanh", low, high)
  mean, log_std = rng.normal(size=(8, 2)), rng.normal(size=(8, 2)) * 0.3
  u = rng.normal(size=(8, 2)) * 2
  u[0] = [12.0, -15.0]  # tanh(u) rounds to +-1 in float32
  params = _params(mean, log_std)
  scale = (high - low) / 2
  # Written from the definition in float64: dtanh/du = 1 - tanh(u)^2; use the
  # identity 1 - tanh^2 = 4 e^{-2|u|} / (1 + e^{-2|u|})^2 to stay finite.
  log_dtanh = np.log(4.0) - 2 * np.abs(u) - 2 * np.log1p(np.exp(-2 * np.abs(u)))
  expected = np_normal_log_prob(u, mean, np.exp(log_std)) - np.sum(
    np.log(scale) + log_dtanh, -1
  )
  got = dist.log_prob(params, u.astype(np.float32)).numpy()
  assert np.all(np.isfinite(got))
  np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)
  # Moderate u, against the naive formula too.
  v = u[1:]
  naive = np_normal_log_prob(v, mean[1:], np.exp(log_std[1:])) - np.sum(
    np.log(scale * (1 - np.tanh(v) ** 2)), -1
  )
  np.testing.assert_allclose(got[1:], naive, rtol=1e-4, atol=1e-3)


def test_tanh_density_integrates_to_one_over_the_box():
  low, high = -2.0, 3.0
  dist = distributions.DiagGaussian(1, "tanh", [low], [high])
  params = np.array([[0.7, math.log(0.8)]], np.float32)
  # Integrate p(a) da over a grid of actions, mapping each back to u.
  a = np.linspace(low, high, 200001)[1:-1]
  y = (a - (high + low) / 2) / ((high - low) / 2)
  u = np.arctanh(y).astype(np.float32)[:, None]
  log_p = dist.log_prob(np.repeat(params, len(a), 0), u).numpy()
  integral = np.trapezoid(np.exp(log_p.astype(np.float64)), a)
  np.testing.assert_allclose(integral, 1.0, atol=2e-3)


def test_tanh_sample_and_mode_inside_bounds():
  low, high = np.array([-1.0, 10.0]), np.array([1.0, 12.0])
  dist = distributions.DiagGaussian(2, "tanh", low, high)
  params = np.tile(
    _params(np.array([[5.0, -5.0]]), np.array([[1.0, 1.0]])), (1000, 1)
  )
  gen = tf.random.Generator.from_seed(3)
  action, raw = dist.sample(params, gen)
  assert np.all(action.numpy() >= low) and np.all(action.numpy() <= high)
  np.testing.assert_allclose(
    action.numpy(),
    (high + low) / 2 + (high - low) / 2 * np.tanh(raw.numpy()),
    rtol=1e-5,
  )
  mode, mode_raw = dist.mode(params[:1])
  np.testing.assert_allclose(mode_raw.numpy(), [[5.0, -5.0]])
  np.testing.assert_allclose(
    mode.numpy(), [[np.tanh(5.0), 11 + np.tanh(-5.0)]], rtol=1e-5
  )


def test_clip_mode_env_action_clipped_log_prob_of_raw():
  dist = distributions.DiagGaussian(1, "clip", [-1.0], [1.0])
  params = np.tile(np.array([[0.8, math.log(0.5)]], np.float32), (500, 1))
  action, raw = dist.sample(params, tf.random.Generator.from_seed(4))
  action, raw = action.numpy(), raw.numpy()
  np.testing.assert_array_equal(action, np.clip(raw, -1, 1))
  assert np.any(raw > 1.0)  # some samples really were clipped
  np.testing.assert_allclose(
    dist.log_prob(params, raw).numpy(),
    np_normal_log_prob(raw, 0.8, 0.5),
    rtol=1e-5,
  )


def test_clip_mode_score_function_gradient_is_unbiased():
  """E[clip(u)] for u ~ N(mu, s): d/dmu = P(-1 < u < 1) exactly.

  The score-function estimate mean(f(a) d log p / d mu) hits it when log p
  is evaluated at the raw sample u, and misses it at the clipped action.
  """
  mu, std, n = 0.8, 0.5, 200000
  dist = distributions.DiagGaussian(1, "clip", [-1.0], [1.0])
  mean = tf.Variable(tf.fill([n, 1], mu))
  params = tf.concat([mean, tf.fill([n, 1], math.log(std))], axis=-1)
  action, raw = dist.sample(params, tf.random.Generator.from_seed(5))
  f = tf.stop_gradient(action[:, 0])

  def score_estimate(evaluated_at):
    with tf.GradientTape() as tape:
      params = tf.concat([mean, tf.fill([n, 1], math.log(std))], axis=-1)
      surrogate = tf.reduce_sum(f * dist.log_prob(params, evaluated_at))
    return float(tf.reduce_sum(tape.gradient(surrogate, mean)) / n)

  phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))
  exact = phi((1 - mu) / std) - phi((-1 - mu) / std)
  assert abs(score_estimate(raw) - exact) < 0.02
  assert abs(score_estimate(action) - exact) > 0.05


def test_tanh_kl_equals_base_gaussian_kl():
  p = _params(np.array([[0.3]]), np.array([[-0.2]]))
  q = _params(np.array([[-0.1]]), np.array([[0.1]]))
  tanh = distributions.DiagGaussian(1, "tanh", [-1.0], [1.0])
  base = distributions.DiagGaussian(1, "none")
  np.testing.assert_allclose(tanh.kl(p, q).numpy(), base.kl(p, q).numpy())


def test_for_action_spec_picks_family_and_rejects_bad_specs():
  discrete = ArraySpec((), "int64", "action", num_values=6)
  assert isinstance(
    distributions.for_action_spec(discrete), distributions.Categorical
  )
  box = ArraySpec((3,), "float32", "action", minimum=-1.0, maximum=1.0)
  dist = distributions.for_action_spec(box, "tanh")
  assert isinstance(dist, distributions.DiagGaussian) and dist.bounds == "tanh"
  assert dist.num_params == 6
  unbounded = ArraySpec((2,), "float32", "action")
  assert distributions.for_action_spec(unbounded).bounds == "none"
  with pytest.raises(ValueError, match="float32 vectors"):
    distributions.for_action_spec(ArraySpec((2, 2), "float32", "action"))
  with pytest.raises(ValueError, match="float32 vectors"):
    distributions.for_action_spec(ArraySpec((2,), "float64", "action"))
  with pytest.raises(ValueError, match="both minimum and maximum"):
    distributions.for_action_spec(
      ArraySpec((2,), "float32", "action", minimum=-1.0)
    )
  with pytest.raises(ValueError, match="'tanh' or 'clip'"):
    distributions.for_action_spec(box, "none")
  with pytest.raises(ValueError, match="allowed: tanh, clip, none"):
    distributions.DiagGaussian(2, "squash", [-1, -1], [1, 1])
  with pytest.raises(ValueError, match="low < high"):
    distributions.DiagGaussian(1, "clip", [1.0], [1.0])
