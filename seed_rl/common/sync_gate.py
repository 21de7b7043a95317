"""Synchronous on-policy training (LearnerConfig.synchronous).

SEED's learner answers inference while it trains, so the unrolls of the
next batch are collected by weights one or more updates old (the
`perf/policy_lag` metric). CleanRL's and Stable-Baselines3's PPO and A2C
alternate instead: collect a batch, update, collect the next with the new
weights. The gate gives the learner that schedule: once the unrolls handed
to the agent hold a whole training batch that no finished update has
consumed, inference waits until that update is done. Actors then wait for
their actions while the learner trains, so the pipeline no longer overlaps
stepping with training; what it buys is data from the latest weights (a
lag of 1 only at the step shared by consecutive unrolls, whose action is
chosen before the update).
"""

from __future__ import annotations

import threading


class SyncGate:
  """Counts unrolls handed to a queue-fed agent against finished updates.

  Thread-safe: `added` and `wait` run on the inference thread, `trained` on
  the training thread, `release` on whichever stops the learner.
  """

  def __init__(self, batch_unrolls: int):
    if batch_unrolls < 1:
      raise ValueError(
        f"SyncGate: batch_unrolls {batch_unrolls}, expected >= 1"
      )
    self.batch_unrolls = batch_unrolls
    self._added = 0  # unrolls (batch rows) handed to the agent
    self._trained = 0  # updates finished
    self._released = False
    self._cond = threading.Condition()

  def _pending(self) -> int:
    return self._added - self._trained * self.batch_unrolls

  def added(self, unrolls: int) -> None:
    with self._cond:
      self._added += unrolls

  def trained(self) -> None:
    """One update finished: its batch's unrolls no longer hold inference."""
    with self._cond:
      self._trained += 1
      self._cond.notify_all()

  def wait(self) -> None:
    """Blocks while a whole batch waits to be trained on (or is training)."""
    with self._cond:
      while self._pending() >= self.batch_unrolls and not self._released:
        self._cond.wait()

  def release(self) -> None:
    """The learner is stopping: no wait blocks again."""
    with self._cond:
      self._released = True
      self._cond.notify_all()
