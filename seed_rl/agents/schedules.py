"""Schedules of hyperparameters, as functions of the learner step.

One clock drives every schedule: the agent's learner step counter
(checkpointed, so a resumed run continues mid-schedule). TensorFlow-free.
"""

from __future__ import annotations

from typing import Callable

Schedule = Callable[[float], float]


def linear(initial: float, final: float, steps: float) -> Schedule:
  """step -> initial, moving linearly to `final` at `steps`, then flat."""
  if steps <= 0:
    raise ValueError(f"schedule steps must be > 0, got {steps}")
  initial, final, steps = float(initial), float(final), float(steps)

  def value(step: float) -> float:
    frac = min(1.0, max(0.0, float(step)) / steps)
    return initial + frac * (final - initial)

  return value


def constant(value: float) -> Schedule:
  value = float(value)
  return lambda step: value
