"""Advantage standardisation, shared by PPO and V-trace.

Why V-trace has it too: with clipped rewards the V-trace policy-gradient
advantages of an A2C-sized batch have a std of ~0.1 on BeamRider, Seaquest
and Pong (benchmarks/RESULTS.md, issue 20), so an entropy cost of 0.01 weighs
about ten times more against them than the same 0.01 does against PPO's
unit-std advantages, and the policy stays near uniform for millions of
steps. Standardising makes the balance the same on every game.
"""

from __future__ import annotations

import tensorflow as tf

from seed_rl.agents import multi_device


def normalize_advantages(
  advantages: tf.Tensor, epsilon: float = 1e-8
) -> tf.Tensor:
  """Any shape -> zero mean, unit (population) std over all its elements
  (over the whole batch when it is split over training devices)."""
  mean, var = multi_device.moments(advantages)
  return (advantages - mean) / (tf.sqrt(var) + epsilon)
