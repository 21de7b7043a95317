"""A watchdog for environment steps that never return.

An env whose step hangs (a deadlocked simulator, a network-backed env whose
server died) would stall its actor silently forever. The watchdog thread
checks how long the current step has run; past the timeout it prints a
message naming the actor and its domain and ends the process with
EXIT_ENV_ERROR, so the launcher (or a cluster) restarts it. A hung step
cannot be interrupted from Python, hence os._exit.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Optional

EXIT_ENV_HUNG = 3  # = actors.main.EXIT_ENV_ERROR: restarted by the launcher


class StepWatchdog:
  """Use as `with watchdog.step(): env.step(actions)`."""

  def __init__(
    self, timeout_s: Optional[float], what: str, poll_s: float = 0.5
  ):
    self.timeout_s = timeout_s
    self.what = what
    self._started: Optional[float] = None
    self._stop = threading.Event()
    self._poll_s = min(poll_s, timeout_s / 4) if timeout_s else poll_s
    self._thread: Optional[threading.Thread] = None
    if timeout_s is not None:
      if timeout_s <= 0:
        raise ValueError(f"env step timeout must be > 0, got {timeout_s}")
      self._thread = threading.Thread(
        target=self._watch, daemon=True, name="env-step-watchdog"
      )
      self._thread.start()

  def step(self):
    return _Guard(self)

  def close(self) -> None:
    self._stop.set()

  def _watch(self) -> None:
    timeout = self.timeout_s
    assert timeout is not None  # the thread only runs with a timeout
    while not self._stop.wait(self._poll_s):
      started = self._started
      if started is not None and time.monotonic() - started > timeout:
        print(
          f"{self.what}: an environment step has not returned after "
          f"{self.timeout_s:g} s (--env_step_timeout_s); the env hangs, "
          "exiting so that the actor is restarted",
          file=sys.stderr,
          flush=True,
        )
        os._exit(EXIT_ENV_HUNG)


class _Guard:
  def __init__(self, watchdog: StepWatchdog):
    self._watchdog = watchdog

  def __enter__(self):
    self._watchdog._started = time.monotonic()

  def __exit__(self, *exc):
    self._watchdog._started = None
