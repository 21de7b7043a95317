"""A rate limit for log lines (TensorFlow-free: actors use it too)."""

from __future__ import annotations

import time


class Throttle:
  """True at most once per `interval_s` (the first call included), so that
  waiting loops and repeated warnings do not flood the logs."""

  def __init__(self, interval_s: float):
    self._interval_s = interval_s
    self._last = -float("inf")

  def ready(self) -> bool:
    now = time.monotonic()
    if now - self._last < self._interval_s:
      return False
    self._last = now
    return True
