"""Advantage standardisation, shared by PPO and V-trace.

Why V-trace has it too (opt-in, VtraceConfig.normalize_advantages): with
clipped rewards the V-trace policy-gradient advantages of an A2C-sized
batch have a std of ~0.1-0.2 (BeamRider, Seaquest, Pong; benchmarks/
RESULTS.md, Atari V-trace), so an entropy cost of 0.01 weighs 5-10x more against
them than the same 0.01 does against PPO's unit-std advantages, and the
policy stays near uniform for millions of steps. Standardising fixes that
balance, but over V-trace's 80-transition batches without PPO's ratio clip
it also turns one rare reward into a large step: it lifted BeamRider's early
return and collapsed Seaquest's policy. With policy_loss 'clip' (the ratio
clip bounds that step) it is on in the Atari V-trace default.
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
