"""Target networks: one way to copy (or average) online weights into them."""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf


def _pairs(source: Sequence[tf.Variable], target: Sequence[tf.Variable]):
  if len(source) != len(target):
    raise ValueError(
      f"target network: {len(source)} source vs {len(target)} target "
      "variables; the networks differ in architecture"
    )
  for s, d in zip(source, target):
    if tuple(s.shape) != tuple(d.shape):
      raise ValueError(
        f"target network: {s.path} {list(s.shape)} vs {d.path} {list(d.shape)}"
      )
  return zip(source, target)


def hard_update(
  source: Sequence[tf.Variable], target: Sequence[tf.Variable]
) -> None:
  """target <- source, variable by variable (trainable variables: noise
  variables such as NoisyNet's stay each network's own)."""
  for s, d in _pairs(source, target):
    d.assign(s)


def soft_update(
  source: Sequence[tf.Variable], target: Sequence[tf.Variable], tau: float
) -> None:
  """Polyak averaging: target <- tau * source + (1 - tau) * target."""
  if not 0.0 < tau <= 1.0:
    raise ValueError(f"tau must be in (0, 1], got {tau}")
  for s, d in _pairs(source, target):
    d.assign(tau * s + (1.0 - tau) * d)
