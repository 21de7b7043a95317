"""A batch resent after its stream failed is stepped once: real server and
channels on localhost, with a handler that holds a batch until released so
the stream can fail while the learner is stepping it."""

from __future__ import annotations

import threading
import time

import grpc
import numpy as np
import pytest

from seed_rl.grpc import codec
from seed_rl.grpc import protocol
from seed_rl.grpc import seed_rl_pb2_grpc
from seed_rl.grpc.server import LearnerServer
from tests.support.servers import (
  ACT,
  K,
  OBS,
  TOTAL,
  ArgmaxHandler,
  hello_request,
  make_batch,
)

pytestmark = pytest.mark.timeout(60)
ACTOR = 5  # envs 5K..6K-1


class HeldHandler(ArgmaxHandler):
  """Steps a batch only once `release` is set; `entered` says one arrived."""

  def __init__(self):
    super().__init__()
    self.entered = threading.Event()
    self.release = threading.Event()

  def step(self, batch):
    self.entered.set()
    assert self.release.wait(20), "never released"
    return super().step(batch)


@pytest.fixture()
def held():
  handler = HeldHandler()
  server = LearnerServer("localhost:0", OBS, ACT, TOTAL, handler)
  server.start()
  channel = grpc.insecure_channel(f"localhost:{server.port}")
  yield handler, seed_rl_pb2_grpc.SeedRLStub(channel)
  handler.release.set()
  channel.close()
  server.stop(0)


def _metadata(session_id):
  return ((protocol.SESSION_METADATA_KEY, session_id),)


def _hello(stub) -> str:
  """A new session for ACTOR once the learner released the old stream."""
  deadline = time.monotonic() + 5
  while True:
    try:
      return stub.Hello(hello_request(ACTOR), timeout=5).session_id
    except grpc.RpcError as e:
      assert e.code() == grpc.StatusCode.ALREADY_EXISTS, e
      assert time.monotonic() < deadline, "the old stream was never released"
      time.sleep(0.01)


def _request(sequence: int):
  batch = make_batch(ACTOR * K, np.random.default_rng(sequence))
  request = codec.encode_step_batch(batch)
  request.sequence = sequence
  expected = batch.observation.reshape(K, -1).argmax(axis=1) % ACT.num_values
  return request, expected.astype(np.int32)


def _stream_lost_while_stepped(handler, stub, request):
  """Sends `request`, then cancels its stream while the handler holds it."""
  call = stub.Step(iter([request]), metadata=_metadata(_hello(stub)))
  assert handler.entered.wait(10)
  call.cancel()


def _actions(response) -> np.ndarray:
  return codec.decode_tensor(response.action)


def test_a_batch_resent_while_it_is_stepped_waits_for_that_step(held):
  handler, stub = held
  request, expected = _request(4001)
  _stream_lost_while_stepped(handler, stub, request)
  session = _hello(stub)
  answers = []
  resend = threading.Thread(
    target=lambda: answers.append(
      next(stub.Step(iter([request]), metadata=_metadata(session), timeout=10))
    )
  )
  resend.start()
  time.sleep(0.3)
  assert not answers, "the resend was answered before the learner stepped it"
  handler.release.set()
  resend.join(10)
  np.testing.assert_array_equal(_actions(answers[0]), expected)
  assert len(handler.batches) == 1  # stepped once, for both streams


def test_a_batch_stepped_after_its_stream_failed_is_answered_from_the_cache(
  held,
):
  handler, stub = held
  request, expected = _request(4002)
  _stream_lost_while_stepped(handler, stub, request)
  session = _hello(stub)  # the learner let the old stream go
  handler.release.set()
  deadline = time.monotonic() + 5
  while not handler.batches:
    assert time.monotonic() < deadline
    time.sleep(0.01)
  again = next(
    stub.Step(iter([request]), metadata=_metadata(session), timeout=10)
  )
  np.testing.assert_array_equal(_actions(again), expected)
  assert len(handler.batches) == 1
  # The next batch is new: stepped.
  following, _ = _request(4003)
  next(
    stub.Step(iter([following]), metadata=_metadata(_hello(stub)), timeout=10)
  )
  assert len(handler.batches) == 2
