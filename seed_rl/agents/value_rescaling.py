"""Invertible value rescaling h and its inverse (Pohlen et al. 2018).

"Observe and Look Further: Achieving Consistent Performance on Atari"
(arXiv 1805.11593): value-based agents regress h(target) where

    h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x,

so that returns of very different scales share one network. Targets bootstrap
through h^-1, whose closed form is Proposition A.2:

    h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1).

Both are written here in an algebraically equal form without catastrophic
cancellation (the textbook forms lose ~3 significant digits in float32 near 0
and the inverse divides by eps, so eps = 0 would fail):

    sqrt(a + 1) - 1 = a / (sqrt(a + 1) + 1),
    h^-1(y) = sign(y) v (v + 2),
    v = 2 |y| / (1 + 2 eps + sqrt((1 + 2 eps)^2 + 4 eps |y|)),

where v = sqrt(|x| + 1) - 1 solves eps v^2 + (1 + 2 eps) v = |y|.

Every function accepts tf.Tensor (eager or inside tf.function; returns a
tensor of the same dtype) or anything NumPy accepts (returns np.ndarray).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

DEFAULT_EPSILON = 1e-3  # Pohlen et al. 2018 and R2D2 (Kapturowski et al. 2019).


def _is_tf(x: Any) -> bool:
  return isinstance(x, (tf.Tensor, tf.Variable))


def _check_eps(eps: float) -> None:
  if not eps >= 0.0:
    raise ValueError(f"value rescaling eps must be >= 0, got {eps}")


def h(x: Any, eps: float = DEFAULT_EPSILON) -> Any:
  """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x, elementwise, any shape."""
  _check_eps(eps)
  if _is_tf(x):
    abs_x = tf.abs(x)
    root_minus_one = abs_x / (tf.sqrt(abs_x + 1.0) + 1.0)
    return tf.sign(x) * root_minus_one + eps * x
  x = np.asarray(x)
  if not np.issubdtype(x.dtype, np.floating):
    x = x.astype(np.float64)
  abs_x = np.abs(x)
  root_minus_one = abs_x / (np.sqrt(abs_x + 1.0) + 1.0)
  return (np.sign(x) * root_minus_one + eps * x).astype(x.dtype)


def h_inv(y: Any, eps: float = DEFAULT_EPSILON) -> Any:
  """The inverse of `h` (Pohlen et al. 2018, Prop. A.2), elementwise."""
  _check_eps(eps)
  b = 1.0 + 2.0 * eps
  if _is_tf(y):
    abs_y = tf.abs(y)
    v = 2.0 * abs_y / (b + tf.sqrt(b * b + 4.0 * eps * abs_y))
    return tf.sign(y) * v * (v + 2.0)
  y = np.asarray(y)
  if not np.issubdtype(y.dtype, np.floating):
    y = y.astype(np.float64)
  abs_y = np.abs(y)
  v = 2.0 * abs_y / (b + np.sqrt(b * b + 4.0 * eps * abs_y))
  return (np.sign(y) * v * (v + 2.0)).astype(y.dtype)
