"""Dynamic batching: full-or-timeout, no stalls when sizes do not divide."""

import threading
import time

import pytest

from seed_rl.common.batcher import BatcherStopped, DynamicBatcher


def _run_clients(batcher, num_clients, calls, size):
  results, errors = {}, []

  def client(i):
    try:
      for c in range(calls):
        results[(i, c)] = batcher((i, c, size))
    except Exception as e:
      errors.append(e)

  threads = [
    threading.Thread(target=client, args=(i,)) for i in range(num_clients)
  ]
  for t in threads:
    t.start()
  for t in threads:
    t.join(timeout=20)
  assert not any(t.is_alive() for t in threads), "a client stalled"
  assert not errors, errors
  return results


def test_three_actors_batch_four_never_stalls():
  """3 actors x 1 env with batch size 4: only the timeout can release them."""
  seen_sizes = []

  def fn(requests):
    seen_sizes.append(sum(r[2] for r in requests))
    return [(r[0], r[1]) for r in requests]

  batcher = DynamicBatcher(
    fn, batch_size=4, timeout_s=0.005, size_fn=lambda r: r[2]
  )
  start = time.monotonic()
  results = _run_clients(batcher, num_clients=3, calls=50, size=1)
  batcher.stop()
  assert len(results) == 150
  assert all(v == k for k, v in results.items())  # each got its own answer
  assert max(seen_sizes) <= 4
  assert time.monotonic() - start < 10


def test_full_batch_runs_without_waiting_for_timeout():
  calls = []
  batcher = DynamicBatcher(
    lambda rs: calls.append(len(rs)) or rs,
    batch_size=2,
    timeout_s=30.0,
    size_fn=lambda r: r[2],
  )
  start = time.monotonic()
  _run_clients(batcher, num_clients=2, calls=20, size=1)
  batcher.stop()
  # With a 30 s timeout, finishing fast proves full batches ran at once.
  assert time.monotonic() - start < 5
  assert 2 in calls


def test_requests_larger_than_batch_are_served_alone():
  batcher = DynamicBatcher(
    lambda rs: [r[2] for r in rs],
    batch_size=4,
    timeout_s=0.001,
    size_fn=lambda r: r[2],
  )
  assert batcher((0, 0, 9)) == 9
  batcher.stop()


def test_error_fails_only_that_batch():
  def fn(requests):
    if any(r[0] == "bad" for r in requests):
      raise ValueError("bad request")
    return [r[0] for r in requests]

  batcher = DynamicBatcher(
    fn, batch_size=1, timeout_s=0.001, size_fn=lambda r: 1
  )
  with pytest.raises(ValueError, match="bad request"):
    batcher(("bad", 0, 1))
  assert batcher(("good", 0, 1)) == "good"
  batcher.stop()


def test_stop_releases_waiting_callers():
  gate = threading.Event()

  def fn(requests):
    gate.wait(5)
    return [None] * len(requests)

  batcher = DynamicBatcher(fn, batch_size=1, timeout_s=0.0, size_fn=lambda r: 1)
  errors = []

  def call():
    try:
      batcher(1)
    except BatcherStopped as e:
      errors.append(e)

  threads = [threading.Thread(target=call) for _ in range(3)]
  for t in threads:
    t.start()
  time.sleep(0.2)
  gate.set()
  batcher.stop()
  for t in threads:
    t.join(timeout=5)
  assert not any(t.is_alive() for t in threads)
  with pytest.raises(BatcherStopped):
    batcher(1)


def test_pending_requests_share_the_next_batch_up_to_the_cap():
  release = threading.Event()
  sizes = []

  def fn(requests):
    sizes.append(sum(r[2] for r in requests))
    if len(sizes) == 1:
      release.wait(10)  # hold the first batch while others queue up
    return [r[2] for r in requests]

  batcher = DynamicBatcher(
    fn, batch_size=2, timeout_s=30.0, size_fn=lambda r: r[2], max_batch_size=6
  )
  results = []
  callers = [
    threading.Thread(target=lambda n=n: results.append(batcher((0, 0, n))))
    for n in (2, 2, 2, 2, 2)
  ]
  callers[0].start()
  deadline = time.monotonic() + 10
  while not sizes and time.monotonic() < deadline:
    time.sleep(0.001)
  for c in callers[1:]:
    c.start()
  while batcher._pending_size < 8 and time.monotonic() < deadline:
    time.sleep(0.001)
  release.set()
  for c in callers:
    c.join(10)
  batcher.stop()
  # 2 alone, then the four that queued meanwhile: 6 (the cap), then 2.
  assert sizes == [2, 6, 2] and sorted(results) == [2] * 5


def test_max_batch_size_below_trigger_is_refused():
  with pytest.raises(
    ValueError,
    match=r"max_batch_size \(2\) must be >= "
    r"batch_size \(4\)",
  ):
    DynamicBatcher(
      lambda rs: rs,
      batch_size=4,
      timeout_s=0.0,
      size_fn=lambda r: 1,
      max_batch_size=2,
    )


def test_submit_calls_on_done_once_per_request_without_blocking():
  """The asyncio server's path: submit returns at once; on_done gets each
  request's own result (or the batch's error) on the batching thread."""
  done = threading.Event()

  def fn(requests):
    done.wait(5)  # the first batch holds until every submit returned
    if any(r == "bad" for r in requests):
      raise ValueError("bad request")
    return [r * 2 for r in requests]

  batcher = DynamicBatcher(fn, 1, 0.0, size_fn=lambda r: 1, max_batch_size=8)
  outcomes = []
  lock = threading.Lock()

  def on_done(request):
    def record(result, error):
      with lock:
        outcomes.append((request, result, error, threading.current_thread()))

    return record

  try:
    start = time.monotonic()
    for r in (1, 2, 3):
      batcher.submit(r, on_done(r))
    assert time.monotonic() - start < 1.0  # nothing waited for fn
    done.set()
    deadline = time.monotonic() + 5
    while len(outcomes) < 3 and time.monotonic() < deadline:
      time.sleep(0.01)
    assert sorted((r, res, err) for r, res, err, _ in outcomes) == [
      (1, 2, None),
      (2, 4, None),
      (3, 6, None),
    ]
    assert all(t.name == "inference" for *_, t in outcomes)
    failed = []
    batcher.submit("bad", lambda res, err: failed.append((res, err)))
    deadline = time.monotonic() + 5
    while not failed and time.monotonic() < deadline:
      time.sleep(0.01)
    assert failed[0][0] is None and isinstance(failed[0][1], ValueError)
  finally:
    batcher.stop()
  with pytest.raises(BatcherStopped):
    batcher.submit(4, lambda res, err: None)


def test_stop_fails_submitted_requests_with_batcher_stopped():
  release = threading.Event()
  batcher = DynamicBatcher(
    lambda rs: release.wait(5) and [0] * len(rs),
    1,
    0.0,
    size_fn=lambda r: 1,
  )
  errors = []
  batcher.submit("first", lambda res, err: None)  # occupies the thread
  time.sleep(0.1)
  batcher.submit("queued", lambda res, err: errors.append(err))
  stopper = threading.Thread(target=batcher.stop)
  stopper.start()
  time.sleep(0.1)
  release.set()
  stopper.join(10)
  assert len(errors) == 1 and isinstance(errors[0], BatcherStopped)


def test_notify_scope_wraps_each_batchs_answers_and_may_fail():
  """notify_scope is entered once per batch, around all of its on_done
  calls; a scope that fails to enter or exit is logged, and the requests
  are answered all the same."""
  events = []
  release = threading.Event()

  def fn(requests):
    release.wait(5)
    return [r * 10 for r in requests]

  batcher = DynamicBatcher(fn, batch_size=3, timeout_s=5.0, size_fn=lambda r: 1)

  class Scope:
    def __init__(self, fail_on=None):
      self.fail_on = fail_on

    def __enter__(self):
      events.append("enter")
      if self.fail_on == "enter":
        raise RuntimeError("enter failed")

    def __exit__(self, *exc):
      events.append("exit")
      if self.fail_on == "exit":
        raise RuntimeError("exit failed")

  def run_batch(scope_fn, base):
    batcher.notify_scope = scope_fn
    results = []
    done = threading.Event()

    def on_done(result, error):
      events.append(result)
      results.append(result)
      if len(results) == 3:
        done.set()

    for i in range(3):
      batcher.submit(base + i, on_done)
    release.set()
    assert done.wait(5), "a request was not answered"
    time.sleep(0.05)  # the scope's exit follows the last answer
    release.clear()

  try:
    run_batch(Scope, 1)
    assert events == ["enter", 10, 20, 30, "exit"]
    events.clear()
    run_batch(lambda: Scope("enter"), 4)
    assert events == ["enter", 40, 50, 60]
    events.clear()
    run_batch(lambda: Scope("exit"), 7)
    assert events == ["enter", 70, 80, 90, "exit"]
    events.clear()
    run_batch(Scope, 10)  # still batching after both failures
    assert events == ["enter", 100, 110, 120, "exit"]
  finally:
    release.set()
    batcher.stop()
