"""Dynamic inference batching: run a batch when it is full OR a timeout passed.

SEED RL's C++ op ran inference only when exactly N requests had arrived, which
stalls whenever actor counts do not divide N. Here a batch runs as soon as the
pending requests hold `batch_size` environments, or the oldest request has
waited `timeout_s`, whichever comes first, and it takes every pending request
up to `max_batch_size` environments: requests that arrived while the previous
batch ran share the next one, so batches grow with load and latency stays low
without it. Requests are never split: one request is one actor's whole batch
of environments.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from typing import (
  Any,
  Callable,
  ContextManager,
  Deque,
  Generic,
  List,
  Optional,
  Sequence,
  TypeVar,
  cast,
)

Request = TypeVar("Request")
Result = TypeVar("Result")


class BatcherStopped(RuntimeError):
  """Raised to callers whose request cannot be served because of shutdown."""


# on_done(result, error) of DynamicBatcher.submit.
OnDone = Callable[[Optional[Result], Optional[BaseException]], None]


class _Slot(Generic[Result]):
  __slots__ = ("request", "size", "arrival", "on_done")

  def __init__(self, request, size: int, on_done: OnDone):
    self.request = request
    self.size = size
    self.arrival = time.monotonic()
    self.on_done = on_done


class DynamicBatcher(Generic[Request, Result]):
  """Collects requests from many threads and serves them in batches.

  Args:
    fn: called on the batching thread with a list of requests; returns one
      result per request, in order. An exception fails every request of that
      batch (each caller re-raises it) and the batcher keeps serving.
    batch_size: pending environments that trigger an immediate run.
    timeout_s: longest time the oldest pending request waits for company.
    size_fn: environments in one request.
    max_batch_size: most environments one run takes (a request larger than
      this runs alone); None means `batch_size`.
  """

  def __init__(
    self,
    fn: Callable[[List[Request]], Sequence[Result]],
    batch_size: int,
    timeout_s: float,
    size_fn: Callable[[Request], int],
    max_batch_size: Optional[int] = None,
  ):
    if batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if max_batch_size is None:
      max_batch_size = batch_size
    if max_batch_size < batch_size:
      raise ValueError(
        f"max_batch_size ({max_batch_size}) must be >= "
        f"batch_size ({batch_size})"
      )
    if timeout_s < 0:
      raise ValueError(f"timeout_s must be >= 0, got {timeout_s}")
    self._fn = fn
    self._batch_size = batch_size
    self._max_batch_size = max_batch_size
    self._timeout_s = timeout_s
    self._size_fn = size_fn
    self._pending: Deque[_Slot[Result]] = collections.deque()
    self._pending_size = 0
    self._cond = threading.Condition()
    self._stopped = False
    # Stats read by the learner's logger (a race on these is harmless).
    self.batches_run = 0
    self.requests_served = 0
    self.envs_served = 0
    # Entered around each batch's on_done calls: a caller that answers
    # through another thread's queue can hand over one batch's answers at
    # once instead of one wake-up per request.
    self.notify_scope: Callable[[], ContextManager[Any]] = (
      contextlib.nullcontext
    )
    self._thread = threading.Thread(
      target=self._loop, name="inference", daemon=True
    )
    self._thread.start()

  def __call__(self, request: Request) -> Result:
    """Blocks until `request` was served; returns its result."""
    done = threading.Event()
    outcome: List[Any] = [None, None]

    def on_done(result, error):
      outcome[0], outcome[1] = result, error
      done.set()

    self.submit(request, on_done)
    done.wait()
    if outcome[1] is not None:
      raise outcome[1]
    # Done without an error: _loop passed fn's result, which may itself be
    # None when Result allows it, so this is a cast rather than a check.
    return cast(Result, outcome[0])

  def submit(self, request: Request, on_done: OnDone) -> None:
    """Queues `request` without blocking; `on_done(result, error)` is called
    once, on the batching thread, when its batch ran (error: the batch
    function's exception, or BatcherStopped at shutdown).

    Raises:
      BatcherStopped: the batcher was stopped (on_done is not called).
    """
    slot: _Slot[Result] = _Slot(request, self._size_fn(request), on_done)
    with self._cond:
      if self._stopped:
        raise BatcherStopped("the learner is shutting down")
      self._pending.append(slot)
      self._pending_size += slot.size
      if self._pending_size >= self._batch_size or len(self._pending) == 1:
        self._cond.notify()

  def _take_batch(self) -> Optional[List[_Slot[Result]]]:
    with self._cond:
      while True:
        if self._stopped:
          return None
        if self._pending:
          if self._pending_size >= self._batch_size:
            break
          wait = self._pending[0].arrival + self._timeout_s - time.monotonic()
          if wait <= 0:
            break
          self._cond.wait(wait)
        else:
          self._cond.wait()
      # Take requests in arrival order up to the cap (at least one).
      taken: List[_Slot[Result]] = []
      size = 0
      while self._pending and (
        not taken or size + self._pending[0].size <= self._max_batch_size
      ):
        slot = self._pending.popleft()
        taken.append(slot)
        size += slot.size
      self._pending_size -= size
      return taken

  def _loop(self):
    while True:
      slots = self._take_batch()
      if slots is None:
        return
      error: Optional[BaseException] = None
      try:
        results = self._fn([s.request for s in slots])
        if len(results) != len(slots):
          raise RuntimeError(
            f"batch function returned {len(results)} results "
            f"for {len(slots)} requests"
          )
      except BaseException as e:
        error, results = e, [None] * len(slots)
      self.batches_run += 1
      self.requests_served += len(slots)
      self.envs_served += sum(s.size for s in slots)
      scope = _entered(self.notify_scope)
      for slot, result in zip(slots, results):
        _notify(slot, result, error)
      if scope is not None:
        _exit(scope)

  def stop(self):
    """Fails pending and future requests with BatcherStopped."""
    with self._cond:
      self._stopped = True
      pending, self._pending = self._pending, collections.deque()
      self._pending_size = 0
      self._cond.notify_all()
    for slot in pending:
      _notify(slot, None, BatcherStopped("the learner is shutting down"))
    self._thread.join(timeout=10)


def _entered(scope_fn: Callable[[], ContextManager[Any]]) -> Optional[Any]:
  """The entered scope, or None when entering failed (the requests are
  answered all the same, one by one)."""
  try:
    scope = scope_fn()
    scope.__enter__()
    return scope
  except Exception:
    logging.exception("DynamicBatcher: notify_scope failed")
    return None


def _exit(scope: Any) -> None:
  try:
    scope.__exit__(None, None, None)
  except Exception:
    logging.exception("DynamicBatcher: notify_scope failed")


def _notify(slot: _Slot, result, error: Optional[BaseException]) -> None:
  """Calls the slot's on_done; a failing callback must not stop batching."""
  try:
    slot.on_done(result, error)
  except Exception:
    logging.exception("DynamicBatcher: on_done callback failed")
