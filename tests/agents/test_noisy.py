"""Tests for seed_rl.agents.noisy (NoisyNet, Fortunato et al. 2017)."""

from __future__ import annotations

import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents import noisy


def _layer(noise_type, p=5, q=3, **kwargs):
  layer = noisy.NoisyDense(q, noise_type=noise_type, **kwargs)
  layer(tf.zeros([1, p]))
  return layer


def _numpy_forward(layer, x, kernel_noise, bias_noise):
  """y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b, Eq. (9)."""
  kernel = layer.kernel_mu.numpy() + layer.kernel_sigma.numpy() * kernel_noise
  bias = layer.bias_mu.numpy() + layer.bias_sigma.numpy() * bias_noise
  return x @ kernel + bias


@pytest.mark.parametrize("noise_type", ["ig", "fg"])
def test_noise_shapes_and_forward_matches_numpy(noise_type):
  layer = _layer(noise_type)
  kernel_noise, bias_noise = (n.numpy() for n in layer.noise())
  assert kernel_noise.shape == (5, 3) and bias_noise.shape == (3,)
  x = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
  np.testing.assert_allclose(
    layer(x).numpy(),
    _numpy_forward(layer, x, kernel_noise, bias_noise),
    rtol=1e-5,
    atol=1e-6,
  )
  # Stored noise: repeated calls agree until reset_noise().
  np.testing.assert_array_equal(layer(x).numpy(), layer(x).numpy())


def test_factorised_noise_is_outer_product_of_f():
  layer = _layer("fg", p=6, q=4)
  kernel_noise, bias_noise = (n.numpy() for n in layer.noise())
  assert [w.shape for w in layer.non_trainable_weights] == [(6,), (4,)]
  e_in, e_out = (w.numpy() for w in layer.non_trainable_weights)
  np.testing.assert_allclose(kernel_noise, np.outer(e_in, e_out), rtol=1e-6)
  np.testing.assert_allclose(bias_noise, e_out)
  assert np.linalg.matrix_rank(kernel_noise) == 1
  # f(x) = sign(x) sqrt(|x|) of Gaussian draws: |f|^2 is chi-square(1) with
  # mean 1; over many resets the mean of e^4 = E[x^2] = 1 (loose check).
  samples = []
  for _ in range(300):
    layer.reset_noise()
    samples.append(layer.non_trainable_weights[0].numpy())
  assert abs(np.mean(np.concatenate(samples) ** 4) - 1.0) < 0.15


@pytest.mark.parametrize("noise_type", ["ig", "fg"])
def test_reset_changes_noise_and_deterministic_mode(noise_type):
  layer = _layer(noise_type)
  before = [n.numpy() for n in layer.noise()]
  layer.reset_noise()
  after = [n.numpy() for n in layer.noise()]
  assert not np.allclose(before[0], after[0])
  assert not np.allclose(before[1], after[1])
  x = np.ones((2, 5), np.float32)
  expected = x @ layer.kernel_mu.numpy() + layer.bias_mu.numpy()
  np.testing.assert_allclose(
    layer(x, deterministic=True).numpy(), expected, rtol=1e-6
  )
  assert not np.allclose(layer(x).numpy(), expected)


def test_reset_inside_tf_function_and_per_call_resampling():
  layer = _layer("ig")

  @tf.function
  def reset_and_call(x):
    layer.reset_noise()
    return layer(x)

  x = tf.ones([1, 5])
  assert not np.allclose(reset_and_call(x).numpy(), reset_and_call(x).numpy())
  per_call = _layer("fg", resample_every_call=True)
  stored = [n.numpy() for n in per_call.noise()]
  assert not np.allclose(per_call(x).numpy(), per_call(x).numpy())
  for old, new in zip(stored, per_call.noise()):  # stored sample untouched
    np.testing.assert_array_equal(old, new.numpy())


def test_initialisation_follows_the_paper():
  p = 64
  ig = _layer("ig", p=p, q=32)
  bound = math.sqrt(3.0 / p)
  assert np.abs(ig.kernel_mu.numpy()).max() <= bound
  assert np.abs(ig.kernel_mu.numpy()).max() > 0.8 * bound
  np.testing.assert_allclose(ig.kernel_sigma.numpy(), 0.017)
  np.testing.assert_allclose(ig.bias_sigma.numpy(), 0.017)
  fg = _layer("fg", p=p, q=32)
  assert np.abs(fg.kernel_mu.numpy()).max() <= 1.0 / math.sqrt(p)
  np.testing.assert_allclose(
    fg.kernel_sigma.numpy(), 0.5 / math.sqrt(p), rtol=1e-6
  )
  custom = _layer("fg", p=p, sigma0=0.1)
  np.testing.assert_allclose(
    custom.bias_sigma.numpy(), 0.1 / math.sqrt(p), rtol=1e-6
  )


def test_gradients_reach_mu_and_sigma_only_when_noisy():
  layer = _layer("fg")
  x = tf.ones([3, 5])
  with tf.GradientTape(persistent=True) as tape:
    noisy_out = tf.reduce_sum(layer(x))
    clean_out = tf.reduce_sum(layer(x, deterministic=True))
  names = [w.name for w in layer.trainable_weights]
  assert names == ["kernel_mu", "kernel_sigma", "bias_mu", "bias_sigma"]
  grads = tape.gradient(noisy_out, layer.trainable_weights)
  assert all(g is not None and np.any(g.numpy() != 0) for g in grads)
  clean = tape.gradient(clean_out, layer.trainable_weights)
  assert clean[1] is None and clean[3] is None


def test_bad_arguments():
  with pytest.raises(ValueError, match="noise_type"):
    noisy.NoisyDense(3, noise_type="gaussian")
  with pytest.raises(ValueError, match="sigma0"):
    noisy.NoisyDense(3, sigma0=0.0)
  with pytest.raises(ValueError, match="units"):
    noisy.NoisyDense(0)
