"""Tests for seed_rl.agents.value_rescaling against the paper's formulas."""

from __future__ import annotations

import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents import value_rescaling


def _h_reference(x, eps):
  """Pohlen et al. 2018, Eq. (1), one scalar at a time."""
  x = float(x)
  sign = (x > 0) - (x < 0)
  return sign * (math.sqrt(abs(x) + 1.0) - 1.0) + eps * x


def _h_inv_reference(y, eps):
  """Pohlen et al. 2018, Prop. A.2, one scalar at a time (eps > 0)."""
  y = float(y)
  sign = (y > 0) - (y < 0)
  root = math.sqrt(1.0 + 4.0 * eps * (abs(y) + 1.0 + eps))
  return sign * (((root - 1.0) / (2.0 * eps)) ** 2 - 1.0)


def _wide_grid():
  magnitudes = np.logspace(-6, 6, 400)
  return np.concatenate([-magnitudes[::-1], [0.0], magnitudes])


def test_h_matches_paper_formula():
  xs = _wide_grid()
  got = value_rescaling.h(xs)
  want = np.array([_h_reference(x, 1e-3) for x in xs])
  np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_h_inv_matches_paper_closed_form():
  ys = value_rescaling.h(_wide_grid())
  got = value_rescaling.h_inv(ys)
  want = np.array([_h_inv_reference(y, 1e-3) for y in ys])
  # The paper's form cancels near 0 in float64 too, hence the atol.
  np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("eps", [1e-3, 1e-2, 0.0])
def test_inverse_numpy_float64(eps):
  xs = _wide_grid()
  np.testing.assert_allclose(
    value_rescaling.h_inv(value_rescaling.h(xs, eps), eps),
    xs,
    rtol=1e-5,
    atol=1e-5,
  )
  np.testing.assert_allclose(
    value_rescaling.h(value_rescaling.h_inv(xs, eps), eps),
    xs,
    rtol=1e-5,
    atol=1e-5,
  )


def test_inverse_tensorflow_float32_eager_and_graph():
  xs = _wide_grid().astype(np.float32)

  @tf.function
  def roundtrip(x):
    return value_rescaling.h_inv(value_rescaling.h(x))

  for got in (
    value_rescaling.h_inv(value_rescaling.h(tf.constant(xs))),
    roundtrip(tf.constant(xs)),
  ):
    assert got.dtype == tf.float32
    np.testing.assert_allclose(got.numpy(), xs, rtol=1e-5, atol=1e-5)


def test_tf_and_numpy_agree_and_types():
  xs = np.linspace(-50, 50, 101).astype(np.float32)
  from_tf = value_rescaling.h(tf.constant(xs)).numpy()
  from_np = value_rescaling.h(xs)
  assert isinstance(from_np, np.ndarray) and from_np.dtype == np.float32
  np.testing.assert_allclose(from_tf, from_np, rtol=1e-6, atol=1e-6)
  # Integer input is promoted instead of truncated.
  assert value_rescaling.h(np.array([3]))[0] == pytest.approx(1.003)


def test_h_is_odd_and_monotone():
  xs = _wide_grid()
  hx = value_rescaling.h(xs)
  np.testing.assert_allclose(value_rescaling.h(-xs), -hx)
  assert np.all(np.diff(hx) > 0)


def test_negative_eps_rejected():
  with pytest.raises(ValueError, match="eps"):
    value_rescaling.h(1.0, eps=-1e-3)
