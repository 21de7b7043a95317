"""Property-based fuzzing of the learner's message validation, over a real
server and real channels: random and mutated Step messages never crash the
server; each is served (if the mutation kept it valid) or refused with
INVALID_ARGUMENT naming a field; a well-behaved actor is served throughout.

The suite runs a few hundred cases; `benchmarks/fuzz_protocol.py` runs
10,000+ (SEED_RL_FUZZ_EXAMPLES)."""

from __future__ import annotations

import os
import time

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seed_rl.grpc import codec
from seed_rl.grpc import protocol
from seed_rl.grpc import seed_rl_pb2
from seed_rl.grpc.client import ActorClient
from seed_rl.grpc.server import LearnerServer
from tests.support.servers import (
  ACT,
  OBS,
  TOTAL,
  ArgmaxHandler,
  check_good_client,
  hello_request,
  make_batch,
)

EXAMPLES = int(os.environ.get("SEED_RL_FUZZ_EXAMPLES", "300"))
FUZZ_ACTOR = 3  # owns env ids 12..15
TENSOR_FIELDS = [
  f.name
  for f in seed_rl_pb2.StepRequest.DESCRIPTOR.fields
  if f.message_type is not None and f.message_type.name == "Tensor"
]
FIELD_NAMES = tuple(TENSOR_FIELDS) + ("session", "request", "terminated")
DTYPES = sorted(codec.WIRE_DTYPES) + ["object", "", "float16x", "<f4", "V8"]


@pytest.fixture(scope="module")
def fuzz_server():
  learner = LearnerServer("localhost:0", OBS, ACT, TOTAL, ArgmaxHandler())
  learner.start()
  address = f"localhost:{learner.port}"
  channel = grpc.insecure_channel(address)
  raw_step = channel.stream_stream(
    "/seed_rl.SeedRL/Step",
    request_serializer=lambda b: b,
    response_deserializer=seed_rl_pb2.StepResponse.FromString,
  )
  hello = channel.unary_unary(
    "/seed_rl.SeedRL/Hello",
    request_serializer=seed_rl_pb2.HelloRequest.SerializeToString,
    response_deserializer=seed_rl_pb2.HelloResponse.FromString,
  )
  good = ActorClient(address, 0, 4, OBS, ACT, connect_timeout_s=5)
  good.connect()
  yield raw_step, hello, good
  good.close()
  channel.close()
  learner.stop()


def _hello(hello) -> str:
  """Hello for the fuzzing actor; the previous case's stream is released
  asynchronously after its cancel, so ALREADY_EXISTS is retried briefly."""
  deadline = time.monotonic() + 5
  while True:
    try:
      return hello(hello_request(FUZZ_ACTOR), timeout=5).session_id
    except grpc.RpcError as e:
      if (
        e.code() != grpc.StatusCode.ALREADY_EXISTS
        or time.monotonic() > deadline
      ):
        raise
      time.sleep(0.002)


def _mutate(request: seed_rl_pb2.StepRequest, data) -> bytes:
  """One random structural mutation, or raw byte damage."""
  kind = data.draw(
    st.sampled_from(
      ["dtype", "shape", "data", "truncate", "extend", "bytes", "clear"]
    )
  )
  field = data.draw(st.sampled_from(TENSOR_FIELDS))
  tensor = getattr(request, field)
  if kind == "dtype":
    tensor.dtype = data.draw(st.sampled_from(DTYPES))
  elif kind == "shape":
    tensor.ClearField("shape")
    tensor.shape.extend(
      data.draw(
        st.lists(st.integers(-3, 2**31 - 1) | st.integers(0, 9), max_size=4)
      )
    )
  elif kind == "data":
    payload = bytearray(tensor.data)
    if payload:
      i = data.draw(st.integers(0, len(payload) - 1))
      payload[i] = data.draw(st.integers(0, 255))
    tensor.data = bytes(payload)
  elif kind == "truncate":
    tensor.data = tensor.data[: data.draw(st.integers(0, len(tensor.data)))]
  elif kind == "extend":
    tensor.data += data.draw(st.binary(min_size=1, max_size=64))
  elif kind == "clear":
    request.ClearField(field)
  wire = bytearray(request.SerializeToString())
  if kind == "bytes" and wire:
    for _ in range(data.draw(st.integers(1, 8))):
      i = data.draw(st.integers(0, len(wire) - 1))
      wire[i] = data.draw(st.integers(0, 255))
  return bytes(wire)


@settings(
  max_examples=EXAMPLES,
  deadline=None,
  derandomize=True,
  suppress_health_check=[
    HealthCheck.function_scoped_fixture,
    HealthCheck.too_slow,
  ],
)
@given(
  data=st.data(),
  seed=st.integers(0, 2**31 - 1),
  truncated=st.sets(st.integers(0, 3), max_size=2),
)
def test_mutated_messages_are_served_or_refused_by_field(
  fuzz_server, data, seed, truncated
):
  raw_step, hello, good = fuzz_server
  rng = np.random.default_rng(seed)
  session = _hello(hello)
  request = codec.encode_step_batch(
    make_batch(4 * FUZZ_ACTOR, rng, truncated=sorted(truncated))
  )
  wire = _mutate(request, data)
  call = raw_step(
    iter([wire]),
    timeout=5,
    metadata=((protocol.SESSION_METADATA_KEY, session),),
  )
  try:
    response = next(call)
    assert len(response.action.data) > 0  # it stayed valid and was served
  except grpc.RpcError as e:
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (
      e.code(),
      e.details(),
    )
    field = e.details().split(":")[0].split(",")[0]
    assert field in FIELD_NAMES, e.details()
  finally:
    call.cancel()
  if seed % 20 == 0:
    check_good_client(good, rng)


def test_good_actor_is_served_after_the_fuzzing(fuzz_server):
  _, _, good = fuzz_server
  check_good_client(good, np.random.default_rng(0))
