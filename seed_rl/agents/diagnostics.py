"""Learning diagnostics shared by every agent (TensorFlow; learner only).

Every agent reports its training metrics under the names in
docs/METRICS.md, so TensorBoard and the console line read the same whatever
the algorithm. The helpers here compute the ones that are not a single
reduction: explained variance, advantage statistics and gradient norms per
parameter group.
"""

from __future__ import annotations

from typing import Dict, Sequence

import tensorflow as tf

# Parameter groups for grad/norm_<group>: a variable whose path contains
# "torso" belongs to the torso (conv stack or MLP), the rest to the heads
# (policy, value, Q, LSTM core).
TORSO, HEAD = "torso", "head"


def variable_group(variable: tf.Variable) -> str:
  path = getattr(variable, "path", None) or variable.name
  return TORSO if "torso" in path else HEAD


def explained_variance(values: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
  """1 - Var[targets - values] / Var[targets], over all elements.

  1 is a perfect value function, 0 no better than a constant, below 0 worse.
  Returns 0 where the targets do not vary (nothing to explain).
  """
  values = tf.reshape(tf.cast(values, tf.float32), [-1])
  targets = tf.reshape(tf.cast(targets, tf.float32), [-1])
  var_targets = tf.math.reduce_variance(targets)
  ev = 1.0 - tf.math.reduce_variance(targets - values) / tf.maximum(
    var_targets, 1e-12
  )
  return tf.where(var_targets > 1e-12, ev, 0.0)


def advantage_stats(advantages: tf.Tensor) -> Dict[str, tf.Tensor]:
  advantages = tf.cast(advantages, tf.float32)
  return {
    "advantage/mean": tf.reduce_mean(advantages),
    "advantage/std": tf.math.reduce_std(advantages),
  }


def gradient_norms(
  gradients: Sequence[tf.Tensor], variables: Sequence[tf.Variable]
) -> Dict[str, tf.Tensor]:
  """grad/norm (global, before clipping) and grad/norm_torso, _head
  (0 for a group without variables, so every agent emits the same keys)."""
  groups: Dict[str, list] = {TORSO: [], HEAD: []}
  for g, v in zip(gradients, variables):
    if g is not None:
      groups[variable_group(v)].append(g)
  out = {
    "grad/norm": tf.linalg.global_norm([g for g in gradients if g is not None])
  }
  for name, grads in groups.items():
    out[f"grad/norm_{name}"] = (
      tf.linalg.global_norm(grads) if grads else tf.constant(0.0)
    )
  return out
