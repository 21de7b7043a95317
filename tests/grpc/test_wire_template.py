"""wire_template: the usual StepRequest read from its bytes without a parse.

The template only ever accepts, and what it accepts must be exactly what a
protobuf parse and validation.check_step_request make of the same bytes
(sequence and every array, bit for bit). These tests learn templates from
messages serialized by the protobuf runtime the actors use, then compare the
two readings on later messages, on messages the template must leave to the
parse (episode ends, life losses, other env orders, rewards beyond the
limits), and on random byte mutations. Over a real server:
test_protocol's and test_resend's streams run through it as well.
"""

from __future__ import annotations

import queue
from typing import Optional, Tuple

import grpc
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seed_rl.common.specs import StepBatch
from seed_rl.grpc import codec, protocol, seed_rl_pb2, seed_rl_pb2_grpc
from seed_rl.grpc import validation, wire_template
from seed_rl.grpc.server import LearnerServer
from seed_rl.grpc.sessions import Session
from tests.grpc.test_validation import (
  K,
  SPECS,
  TOTAL,
  assert_same_batch,
  make_request,
  owner_of,
  session,
)
from tests.support import servers

LIMITS = validation.ValueLimits()
ATARI = SPECS["frames"]


def wire_of(request: seed_rl_pb2.StepRequest, sequence: int = 0) -> bytes:
  request.sequence = sequence
  return request.SerializeToString()


def parsed(wire: bytes, spec, sess: Session) -> Tuple[int, object]:
  """(sequence, batch or the error) by the protobuf parse and full checks."""
  request = seed_rl_pb2.StepRequest.FromString(wire)
  try:
    return request.sequence, validation.check_step_request(
      request, spec, sess, TOTAL, owner_of, LIMITS
    )
  except ValueError as e:
    return request.sequence, str(e)


def learned(spec, seed: int = 0) -> Session:
  """session() with the template of one usual message of `spec`."""
  sess = session()
  wire = wire_of(make_request(spec, seed), 12345)
  _, batch = parsed(wire, spec, sess)
  assert isinstance(batch, StepBatch), batch
  wire_template.remember(wire, batch, sess)
  assert isinstance(sess.wire_template, wire_template.WireTemplate)
  return sess


def fast(wire: bytes, spec, sess: Session) -> Optional[Tuple[int, StepBatch]]:
  return wire_template.check_wire(wire, spec, sess, LIMITS)


@pytest.mark.parametrize("spec", sorted(SPECS))
@pytest.mark.parametrize("sequence", [0, 1, 300, 2**63 + 5, 2**64 - 1])
def test_usual_messages_read_as_the_parse_reads_them(spec, sequence):
  spec = SPECS[spec]
  sess = learned(spec)
  for seed in range(1, 4):
    wire = wire_of(make_request(spec, seed), sequence)
    got = fast(wire, spec, sess)
    assert got is not None
    expected_sequence, expected = parsed(wire, spec, sess)
    assert got[0] == expected_sequence == sequence
    assert_same_batch(got[1], expected)


def test_atari_frames_are_a_view_of_the_received_bytes():
  sess = learned(ATARI)
  wire = wire_of(make_request(ATARI, 7), 9)
  _, batch = fast(wire, ATARI, sess)
  assert batch.observation.base is wire or batch.observation.base.obj is wire
  assert batch.run_ids.flags.aligned and batch.reward.flags.aligned
  assert batch.env_ids is sess.expected_layout.env_ids


@pytest.mark.parametrize(
  "make",
  [
    pytest.param(lambda: make_request(ATARI, 3, terminated=(1,)), id="ended"),
    pytest.param(
      lambda: make_request(ATARI, 3, truncated=(2,)), id="truncated"
    ),
    pytest.param(
      lambda: _with(
        make_request(ATARI, 3), "life_lost", np.eye(K, dtype=bool)[0]
      ),
      id="life_lost",
    ),
    pytest.param(
      lambda: _with(
        make_request(ATARI, 3), "env_ids", np.arange(3 * K - 1, 2 * K - 1, -1)
      ),
      id="env_ids_reversed",
    ),
    pytest.param(
      lambda: _reward(make_request(ATARI, 3), float("nan")), id="nan_reward"
    ),
    pytest.param(lambda: _reward(make_request(ATARI, 3), 2e6), id="big_reward"),
  ],
)
def test_other_messages_are_left_to_the_parse(make):
  sess = learned(ATARI)
  wire = wire_of(make(), 5)
  assert fast(wire, ATARI, sess) is None
  # The parse still reads them (the reversed env ids and the life loss are
  # valid, the bad rewards are refused with their field named).
  _, result = parsed(wire, ATARI, sess)
  assert isinstance(result, StepBatch) or result.startswith("reward:")


def _with(request, field, array):
  codec.fill_tensor(
    getattr(request, field),
    np.asarray(array).astype("int32" if field == "env_ids" else bool),
  )
  return request


def _reward(request, value):
  reward = codec.decode_tensor(request.reward).copy()
  reward[1] = value
  codec.fill_tensor(request.reward, reward)
  return request


def test_no_template_from_messages_with_ends_or_fields_out_of_order():
  sess = session()
  wire = wire_of(make_request(ATARI, 1, terminated=(0,)))
  _, batch = parsed(wire, ATARI, sess)
  wire_template.remember(wire, batch, sess)
  assert sess.wire_template is None  # not yet: waits for a usual message
  # The same fields serialized in another order (valid protobuf: the parse
  # reads it) fit no template; the session is not tried again.
  request = make_request(ATARI, 2)
  pieces = []
  for field in reversed(codec.STEP_FIELDS):
    single = seed_rl_pb2.StepRequest()
    getattr(single, field).CopyFrom(getattr(request, field))
    pieces.append(single.SerializeToString())
  wire = b"".join(pieces)
  _, batch = parsed(wire, ATARI, sess)
  assert isinstance(batch, StepBatch)
  wire_template.remember(wire, batch, sess)
  assert sess.wire_template is wire_template.UNLEARNABLE
  assert fast(wire_of(make_request(ATARI, 3)), ATARI, sess) is None


def test_a_template_is_used_only_under_the_layout_it_was_learned_with():
  sess = learned(ATARI)
  wire = wire_of(make_request(ATARI, 4))
  other = validation.ValueLimits(max_abs_reward=10.0)
  assert wire_template.check_wire(wire, ATARI, sess, other) is None


@pytest.mark.parametrize(
  "data, expected",
  [
    (b"\x00", (0, 1)),
    (b"\x96\x01", (150, 2)),
    (b"\x80\x00", (0, 2)),  # overlong zero: valid protobuf
    (b"\xff" * 9 + b"\x01", (2**64 - 1, 10)),
  ],
)
def test_read_varint(data, expected):
  assert wire_template.read_varint(data, 0, len(data)) == expected


@pytest.mark.parametrize(
  "data", [b"", b"\x80", b"\xff" * 10 + b"\x01", b"\xff" * 9 + b"\x02"]
)
def test_read_varint_refuses_truncated_overlong_and_over_64_bits(data):
  with pytest.raises(ValueError):
    wire_template.read_varint(data, 0, len(data))


@st.composite
def mutated_wires(draw):
  spec_name = draw(st.sampled_from(sorted(SPECS)))
  request = make_request(SPECS[spec_name], draw(st.integers(1, 2**16)))
  wire = bytearray(wire_of(request, draw(st.integers(0, 2**64 - 1))))
  for _ in range(draw(st.integers(1, 3))):
    kind = draw(st.sampled_from(["byte", "cut", "append", "insert"]))
    at = draw(st.integers(0, len(wire)))
    if kind == "byte" and at < len(wire):
      wire[at] = draw(st.integers(0, 255))
    elif kind == "cut":
      del wire[at : at + draw(st.integers(1, 4))]
    elif kind == "append":
      wire += draw(st.binary(min_size=1, max_size=12))
    else:
      wire[at:at] = draw(st.binary(min_size=1, max_size=3))
  return spec_name, bytes(wire)


@settings(max_examples=500, deadline=None, derandomize=True)
@given(case=mutated_wires())
def test_the_template_accepts_only_what_the_parse_accepts_the_same(case):
  spec_name, wire = case
  spec = SPECS[spec_name]
  sess = learned(spec)
  got = fast(wire, spec, sess)
  if got is None:
    return
  sequence, expected = parsed(wire, spec, sess)  # must parse
  assert isinstance(expected, StepBatch), expected
  assert got[0] == sequence
  assert_same_batch(got[1], expected)


def test_a_real_server_learns_the_template_and_hands_the_same_batches():
  """Actor 2's stream over localhost: usual steps, ends and a resend."""
  handler = servers.ArgmaxHandler()
  server = LearnerServer(
    "localhost:0", servers.OBS, servers.ACT, servers.TOTAL, handler
  )
  server.start()
  channel = grpc.insecure_channel(f"localhost:{server.port}")
  try:
    stub = seed_rl_pb2_grpc.SeedRLStub(channel)
    session_id = stub.Hello(servers.hello_request(2), timeout=10).session_id
    rng = np.random.default_rng(0)
    sent = []
    for i in range(12):
      ends = {"terminated": [1]} if i in (0, 5) else {}
      batch = servers.make_batch(2 * servers.K, rng, **ends)
      request = codec.encode_step_batch(batch)
      request.sequence = 100 + i
      sent.append((batch, request))
    # Step 8 is sent twice (a resend): answered from the cache, stored once.
    requests = (
      [r for _, r in sent[:9]] + [sent[8][1]] + [r for _, r in sent[9:]]
    )
    metadata = ((protocol.SESSION_METADATA_KEY, session_id),)
    outbox: "queue.Queue" = queue.Queue()
    stream = stub.Step(iter(outbox.get, None), metadata=metadata, timeout=20)
    responses, templates = [], []
    for request in requests:  # one at a time, so each is served before the next
      outbox.put(request)
      responses.append(next(stream))
      live = server._servicer._live[session_id]
      templates.append(type(live.wire_template).__name__)
    outbox.put(None)
    assert list(stream) == []
    assert responses[8] == responses[9]
    # Learned from the first usual step (step 0 ended an episode).
    assert templates == ["NoneType"] + ["WireTemplate"] * 12
    with handler.lock:
      received = list(handler.batches)
    assert len(received) == len(sent)
    for (batch, _), got in zip(sent, received):
      assert_same_batch(got, batch)
  finally:
    channel.close()
    server.stop(0)


@pytest.mark.parametrize(
  "actions",
  [
    np.arange(4, dtype=np.int32),
    np.array([3, -1, 2**40], np.int64),
    np.zeros((2, 6), np.float32) - 0.5,
    np.arange(32 * 3, dtype=np.float64).reshape(32, 3),
    np.zeros((1,), np.int32),  # a zero payload byte is still data
    np.zeros((0,), np.int32),  # no payload: serialized in full
  ],
)
def test_responses_are_the_bytes_protobuf_serializes(actions):
  encoder = wire_template.ResponseEncoder()
  expected = seed_rl_pb2.StepResponse()
  codec.fill_tensor(expected.action, actions)
  for _ in range(2):  # the prefix is built, then reused
    wire = encoder.encode(actions)
    assert wire == expected.SerializeToString()
    decoded = codec.decode_tensor(
      seed_rl_pb2.StepResponse.FromString(wire).action
    )
    np.testing.assert_array_equal(decoded, actions)
  other = actions[::-1].copy() + 1
  codec.fill_tensor(expected.action, other)
  assert encoder.encode(other) == expected.SerializeToString()
