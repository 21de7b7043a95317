"""Wire-protocol tests: real LearnerServer and real channels on localhost.

A small argmax handler (tests/support/servers.py) stands in for the learner
runtime; it only has to give actions that depend on each env's row so that
ordering bugs show up.
"""

from __future__ import annotations

import contextlib
import threading
import time

import grpc
import numpy as np
import pytest

from seed_rl.common.specs import ArraySpec
from seed_rl.grpc import codec
from seed_rl.grpc import protocol
from seed_rl.grpc import seed_rl_pb2
from seed_rl.grpc import seed_rl_pb2_grpc
from seed_rl.grpc.client import (
  ActorClient,
  LearnerError,
  LearnerFinished,
  LearnerUnavailableError,
  ProtocolError,
  SpecMismatchError,
)
from seed_rl.grpc.server import LearnerServer
from tests.support.servers import (
  ACT,
  K,
  OBS,
  RUN_ID_RUNTIME_ERROR,
  RUN_ID_VALUE_ERROR,
  TOTAL,
  ArgmaxHandler,
  check_good_client,
  free_port,
  hello_request,
  make_batch,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def handler():
  return ArgmaxHandler()


@pytest.fixture(scope="module")
def server(handler):
  learner = LearnerServer("localhost:0", OBS, ACT, TOTAL, handler)
  learner.start()
  yield learner
  learner.stop()


@pytest.fixture(scope="module")
def address(server):
  return f"localhost:{server.port}"


@pytest.fixture(scope="module")
def stub(address):
  channel = grpc.insecure_channel(address)
  yield seed_rl_pb2_grpc.SeedRLStub(channel)
  channel.close()


@pytest.fixture(scope="module")
def good_client(address):
  """Actor 0, stays connected while malformed streams come and go."""
  client = ActorClient(address, 0, K, OBS, ACT, connect_timeout_s=5)
  client.connect()
  yield client
  client.close()


def rpc_error(fn) -> grpc.RpcError:
  with pytest.raises(grpc.RpcError) as info:
    fn()
  return info.value


def send_one(stub, request, session_id):
  """Sends one request on a fresh stream; returns the first response."""
  metadata = (
    ((protocol.SESSION_METADATA_KEY, session_id),)
    if session_id is not None
    else ()
  )
  call = stub.Step(iter([request]), metadata=metadata, timeout=5)
  return next(call)


# --- codec ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", sorted(codec.WIRE_DTYPES))
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (2, 3), (5,)])
def test_tensor_round_trip(dtype, shape):
  rng = np.random.default_rng(0)
  array = (rng.normal(size=shape) * 50).astype(dtype)
  message = seed_rl_pb2.Tensor.FromString(
    codec.encode_tensor(array).SerializeToString()
  )
  decoded = codec.decode_tensor(message, "x")
  assert decoded.dtype == np.dtype(dtype)
  assert decoded.shape == shape
  np.testing.assert_array_equal(decoded, array)
  assert not decoded.flags.writeable


def test_tensor_non_contiguous_and_big_endian_inputs():
  array = np.arange(12, dtype=np.int64).reshape(3, 4).T  # Fortran-ordered view
  np.testing.assert_array_equal(
    codec.decode_tensor(codec.encode_tensor(array)), array
  )
  big = np.arange(5, dtype=">f4")
  message = codec.encode_tensor(big)
  assert message.dtype == "float32"
  assert message.data == np.arange(5, dtype="<f4").tobytes()


def _zero_size_overflowing_shape(message):
  """Found by the 10,000-case fuzz: 0 bytes match a shape with a zero
  dimension, but NumPy refuses dimensions whose product overflows."""
  message.ClearField("shape")
  message.shape.extend([0, 2**62, 2**62])
  message.data = b""


@pytest.mark.parametrize(
  "mutate, expected",
  [
    (lambda m: setattr(m, "dtype", "object"), "unknown dtype 'object'"),
    (lambda m: setattr(m, "dtype", "complex64"), "unknown dtype"),
    (lambda m: m.shape.__setitem__(0, -2), "negative dimension"),
    (lambda m: setattr(m, "data", m.data[:-1]), "truncated payload"),
    (lambda m: setattr(m, "data", m.data + b"\0"), "oversized payload"),
    (_zero_size_overflowing_shape, "is not valid"),
  ],
)
def test_tensor_decode_errors(mutate, expected):
  message = codec.encode_tensor(np.zeros((2, 3), np.float32))
  mutate(message)
  with pytest.raises(ValueError, match="^field: .*" + expected):
    codec.decode_tensor(message, "field")


def test_bool_payload_must_be_zero_or_one():
  message = codec.encode_tensor(np.array([True, False]))
  message.data = b"\x01\x02"
  with pytest.raises(ValueError, match="flags: bool payload"):
    codec.decode_tensor(message, "flags")


@pytest.mark.parametrize(
  "spec",
  [
    OBS,
    ACT,
    ArraySpec((), "float64", "scalar"),
    ArraySpec((84, 84), "uint8", "frame"),
    ArraySpec(
      (3,),
      "float32",
      "torque",
      minimum=np.asarray(-1.0),
      maximum=np.asarray([1, 2, 3]),
    ),
    ArraySpec((2,), "bool", "flags"),
  ],
)
def test_spec_round_trip(spec):
  message = seed_rl_pb2.TensorSpec.FromString(
    codec.encode_spec(spec).SerializeToString()
  )
  decoded = codec.decode_spec(message, "spec")
  assert (decoded.shape, decoded.dtype, decoded.name, decoded.num_values) == (
    spec.shape,
    spec.dtype,
    spec.name,
    spec.num_values,
  )
  for field in ("minimum", "maximum"):
    expected = getattr(spec, field)
    if expected is None:
      assert getattr(decoded, field) is None
    else:
      np.testing.assert_array_equal(getattr(decoded, field), expected)


def test_spec_decode_rejects_bounds_of_wrong_shape():
  message = codec.encode_spec(ArraySpec((3,), "float32", minimum=0.0))
  codec.fill_tensor(message.minimum, np.zeros(2, np.float32))
  with pytest.raises(ValueError, match=r"action_spec.minimum: float32 \[2\]"):
    codec.decode_spec(message, "action_spec")


def test_step_batch_round_trip():
  batch = make_batch(
    8, np.random.default_rng(1), truncated=[0, 2], terminated=[3]
  )
  request = seed_rl_pb2.StepRequest.FromString(
    codec.encode_step_batch(batch).SerializeToString()
  )
  decoded = codec.decode_step_request(request)
  for name in codec.STEP_FIELDS:
    expected = getattr(batch, name)
    got = getattr(decoded, name)
    assert got.dtype == expected.dtype, name
    np.testing.assert_array_equal(got, expected, err_msg=name)


# --- Hello --------------------------------------------------------------------


@pytest.mark.parametrize(
  "obs_spec, act_spec, expected",
  [
    (
      ArraySpec((5,), "float32"),
      ACT,
      "observation_spec.shape: learner [4], actor [5]",
    ),
    (
      ArraySpec((4,), "float64"),
      ACT,
      "observation_spec.dtype: learner float32, actor float64",
    ),
    (
      OBS,
      ArraySpec((), "int32", num_values=6),
      "action_spec.num_values: learner 4, actor 6",
    ),
    (
      OBS,
      ArraySpec((2,), "float32"),
      "action_spec.dtype: learner int32, actor float32",
    ),
  ],
)
def test_hello_spec_mismatch(address, obs_spec, act_spec, expected):
  client = ActorClient(address, 1, K, obs_spec, act_spec, connect_timeout_s=5)
  with pytest.raises(SpecMismatchError) as info:
    client.connect()
  client.close()
  assert expected in str(info.value)


def test_hello_actor_range_outside_learner(address):
  client = ActorClient(address, 6, K, OBS, ACT, connect_timeout_s=5)
  with pytest.raises(ProtocolError) as info:
    client.connect()
  client.close()
  message = str(info.value)
  assert "24..27" in message and "24 environments 0..23" in message
  assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
  "request_kwargs, code, expected",
  [
    (
      dict(actor_id=1, version=99),
      grpc.StatusCode.FAILED_PRECONDITION,
      "protocol_version: learner 1, actor 99",
    ),
    (
      dict(actor_id=-1),
      grpc.StatusCode.INVALID_ARGUMENT,
      "actor_id: -1, expected >= 0",
    ),
    (
      dict(actor_id=1, num_envs=0),
      grpc.StatusCode.INVALID_ARGUMENT,
      "num_envs: 0, expected >= 1",
    ),
  ],
)
def test_hello_rejects_bad_request(stub, request_kwargs, code, expected):
  error = rpc_error(
    lambda: stub.Hello(hello_request(**request_kwargs), timeout=5)
  )
  assert error.code() == code
  assert expected in error.details()


def test_hello_rejects_range_overlapping_another_live_actor(stub, good_client):
  # Actor 1 with 2 envs would own 2..3, which live actor 0 owns.
  error = rpc_error(lambda: stub.Hello(hello_request(1, num_envs=2), timeout=5))
  assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
  assert "overlapping live actor 0 owning 0..3" in error.details()


def test_hello_response(stub):
  response = stub.Hello(hello_request(2), timeout=5)
  assert (
    response.first_env_id,
    response.num_envs,
    response.num_envs_total,
  ) == (8, K, TOTAL)
  assert response.session_id
  assert codec.decode_spec(response.observation_spec, "o").shape == OBS.shape
  assert codec.decode_spec(response.action_spec, "a").num_values == 4


# --- Step round trip ----------------------------------------------------------


def test_step_round_trip(address, handler):
  rng = np.random.default_rng(2)
  with ActorClient(address, 1, K, OBS, ACT, connect_timeout_s=5) as client:
    client.connect()
    assert (client.first_env_id, client.num_envs_total) == (4, TOTAL)
    for step in range(20):
      truncated = [step % K] if step % 3 == 0 else []
      terminated = [(step + 1) % K] if step % 5 == 0 else []
      batch = make_batch(4, rng, truncated=truncated, terminated=terminated)
      actions = client.step(batch)
      assert actions.dtype == np.int32 and actions.shape == (K,)
      np.testing.assert_array_equal(actions, batch.observation.argmax(1))
      with handler.lock:
        received = handler.batches[-1]
      for name in codec.STEP_FIELDS:
        np.testing.assert_array_equal(
          getattr(received, name), getattr(batch, name), err_msg=name
        )
  deadline = time.monotonic() + 5
  while (4, K) not in handler.disconnects and time.monotonic() < deadline:
    time.sleep(0.01)
  assert (4, K) in handler.disconnects


def test_step_accepts_permuted_env_ids(address):
  rng = np.random.default_rng(3)
  with ActorClient(address, 1, K, OBS, ACT, connect_timeout_s=5) as client:
    batch = make_batch(4, rng)
    order = np.array([2, 0, 3, 1])
    for name in (
      "env_ids",
      "run_ids",
      "reward",
      "terminated",
      "truncated",
      "observation",
    ):
      setattr(batch, name, getattr(batch, name)[order])
    np.testing.assert_array_equal(
      client.step(batch), batch.observation.argmax(1)
    )


def test_step_round_trip_atari_frames():
  frame = ArraySpec((84, 84), "uint8", "frame")
  handler = ArgmaxHandler()
  learner = LearnerServer("localhost:0", frame, ACT, 16, handler)
  address = f"localhost:{learner.start()}"
  rng = np.random.default_rng(13)
  try:
    with ActorClient(address, 1, 8, frame, ACT, connect_timeout_s=5) as client:
      for step in range(5):
        batch = make_batch(8, rng, num_envs=8, truncated=[step], obs_spec=frame)
        batch.observation = rng.integers(0, 256, (8, 84, 84), np.uint8)
        batch.final_observation = rng.integers(0, 256, (1, 84, 84), np.uint8)
        actions = client.step(batch)
        np.testing.assert_array_equal(
          actions, batch.observation.reshape(8, -1).argmax(1) % 4
        )
        received = handler.batches[-1]
        np.testing.assert_array_equal(received.observation, batch.observation)
        np.testing.assert_array_equal(
          received.final_observation, batch.final_observation
        )
  finally:
    learner.stop()


# --- malformed Step streams ----------------------------------------------------

BAD_ACTOR = 2  # owns 8..11


def _set(field, array):
  return lambda r: codec.fill_tensor(getattr(r, field), array)


def _set_stats(episode_return, episode_length):
  """Fills both episode statistics fields."""

  def mutate(r):
    codec.fill_tensor(r.episode_return, episode_return)
    codec.fill_tensor(r.episode_length, episode_length)

  return mutate


def _truncate_observation(r):
  r.observation.data = r.observation.data[:-3]


MALFORMED_CASES = {
  "wrong_dtype": (
    _set("reward", np.zeros(K, np.float64)),
    "reward: dtype float64, expected float32",
  ),
  "wrong_obs_dtype": (
    _set("observation", np.zeros((K, 4), np.float64)),
    "observation: dtype float64, expected float32",
  ),
  "unknown_dtype": (
    lambda r: setattr(r.run_ids, "dtype", "object"),
    "run_ids: unknown dtype 'object'",
  ),
  "missing_field": (lambda r: r.ClearField("run_ids"), "run_ids: missing"),
  "negative_shape": (
    lambda r: r.reward.shape.__setitem__(0, -4),
    "reward: shape [-4] has a negative dimension",
  ),
  "wrong_obs_shape": (
    _set("observation", np.zeros((K, 5), np.float32)),
    "observation: shape [4, 5], expected [4, 4]",
  ),
  "wrong_obs_rows": (
    _set("observation", np.zeros((K - 1, 4), np.float32)),
    "observation: 3 rows, expected 4",
  ),
  "wrong_reward_count": (
    _set("reward", np.zeros(K - 1, np.float32)),
    "reward: 3 entries, expected 4",
  ),
  "wrong_flag_shape": (
    _set("terminated", np.zeros((K, 1), bool)),
    "terminated: shape [4, 1], expected [4]",
  ),
  "final_observation_rows": (
    _set("final_observation", np.zeros((0, 4), np.float32)),
    "final_observation: 0 rows, expected 1",
  ),
  "episode_length_count": (
    _set("episode_length", np.zeros(3, np.int32)),
    "episode_length: 3 entries but episode_return has 1",
  ),
  "env_id_out_of_range": (
    _set("env_ids", np.array([8, 9, 10, 99], np.int32)),
    "env_ids: env id 99 is outside the learner's range 0..23",
  ),
  "env_id_of_other_actor": (
    _set("env_ids", np.array([8, 9, 10, 1], np.int32)),
    "env_ids: env id 1 belongs to actor 0; this stream is actor 2 owning 8..11",
  ),
  "duplicate_env_ids": (
    _set("env_ids", np.array([8, 8, 10, 11], np.int32)),
    "env_ids: duplicate env id 8",
  ),
  "nan_reward": (
    _set("reward", np.array([0, np.nan, 0, 0], np.float32)),
    "reward: non-finite value nan at env id 9",
  ),
  "inf_observation": (
    _set(
      "observation",
      np.array([[0, 0, 0, 0]] * 3 + [[0, np.inf, 0, 0]], np.float32),
    ),
    "observation: non-finite value inf at env id 11",
  ),
  "inf_final_observation": (
    _set("final_observation", np.array([[0, -np.inf, 0, 0]], np.float32)),
    "final_observation: non-finite value -inf at env id 9",
  ),
  "truncated_payload": (
    _truncate_observation,
    "observation: truncated payload",
  ),
  "bad_bool_bytes": (
    lambda r: setattr(r.truncated, "data", b"\x00\x01\x00\x07"),
    "truncated: bool payload holds bytes other than 0 and 1",
  ),
  "terminated_and_truncated": (
    _set("terminated", np.array([0, 1, 0, 0], bool)),
    "both set for env id 9",
  ),
  # Finite but absurd values would make the loss inf and the weights NaN.
  "huge_reward": (
    _set("reward", np.array([0, 0, 3e38, 0], np.float32)),
    "reward: 3e+38 at env id 10 exceeds the learner's limit",
  ),
  "huge_observation": (
    _set(
      "observation",
      np.array([[0, 0, 0, 0]] * 3 + [[0, -1e30, 0, 0]], np.float32),
    ),
    "observation: -1e+30 at env id 11 exceeds",
  ),
  # Episode statistics only for envs that ended in this step (env 9 here).
  "forged_episode_stats": (
    _set_stats(np.full(100, 1e9, np.float32), np.full(100, 1000, np.int32)),
    "episode_return: 100 entries, expected 1",
  ),
  "zero_episode_length": (
    _set("episode_length", np.zeros(1, np.int32)),
    "episode_length: 0, expected >= 1",
  ),
  "episode_return_beyond_length": (
    _set("episode_return", np.array([1e9], np.float32)),
    "exceeds episode_length x max_abs_reward",
  ),
  "handler_value_error": (
    _set("run_ids", np.full(K, RUN_ID_VALUE_ERROR, np.int64)),
    "run_ids: handler refuses this run id",
  ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_CASES))
def test_malformed_step_is_rejected(stub, good_client, case):
  mutate, expected = MALFORMED_CASES[case]
  rng = np.random.default_rng(4)
  session = stub.Hello(hello_request(BAD_ACTOR), timeout=5).session_id
  # Env 9 truncated, one episode ended: gives the row-count checks something.
  request = codec.encode_step_batch(make_batch(8, rng, truncated=[1]))
  mutate(request)
  error = rpc_error(lambda: send_one(stub, request, session))
  assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
  assert expected in error.details()
  check_good_client(good_client, rng)


@pytest.mark.parametrize(
  "session_id, expected",
  [
    (None, "missing 'seed-session' metadata"),
    ("bogus", "unknown session id 'bogus'"),
  ],
)
def test_step_without_valid_session(stub, good_client, session_id, expected):
  request = codec.encode_step_batch(make_batch(8, np.random.default_rng(5)))
  error = rpc_error(lambda: send_one(stub, request, session_id))
  assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
  assert expected in error.details()
  check_good_client(good_client, np.random.default_rng(5))


def test_second_stream_on_one_session_is_rejected(stub, good_client):
  rng = np.random.default_rng(6)
  session = stub.Hello(hello_request(BAD_ACTOR), timeout=5).session_id
  requests = [codec.encode_step_batch(make_batch(8, rng))]
  first = stub.Step(
    iter(requests * 100),
    metadata=((protocol.SESSION_METADATA_KEY, session),),
    timeout=5,
  )
  next(first)  # the stream has claimed the session
  error = rpc_error(lambda: send_one(stub, requests[0], session))
  assert "already has an open Step stream" in error.details()
  first.cancel()
  check_good_client(good_client, rng)


def test_handler_exception_is_internal_for_that_stream_only(stub, good_client):
  rng = np.random.default_rng(7)
  session = stub.Hello(hello_request(BAD_ACTOR), timeout=5).session_id
  batch = make_batch(8, rng)
  batch.run_ids[:] = RUN_ID_RUNTIME_ERROR
  error = rpc_error(
    lambda: send_one(stub, codec.encode_step_batch(batch), session)
  )
  assert error.code() == grpc.StatusCode.INTERNAL
  assert "RuntimeError: handler exploded" in error.details()
  check_good_client(good_client, rng)


def test_client_maps_invalid_argument_to_protocol_error(address):
  rng = np.random.default_rng(8)
  with ActorClient(address, 3, K, OBS, ACT, connect_timeout_s=5) as client:
    batch = make_batch(12, rng)
    batch.reward[2] = np.nan
    with pytest.raises(ProtocolError, match="reward: non-finite"):
      client.step(batch)
    batch.reward[2] = 0.0
    batch.run_ids[:] = RUN_ID_RUNTIME_ERROR
    with pytest.raises(LearnerError, match="INTERNAL"):
      client.step(batch)
    # The client reconnects on the next step after a rejected one.
    batch.run_ids[:] = 1
    np.testing.assert_array_equal(
      client.step(batch), batch.observation.argmax(1)
    )


# --- sessions, reconnects -------------------------------------------------------


def test_hello_for_a_live_actor_is_refused_until_its_stream_ends(
  address, handler, stub
):
  """Nobody can take over a live actor's envs (a hijack, or two actors
  started with the same --actor_id): ALREADY_EXISTS while its stream is
  open; once it closes, a restarted actor with that id gets them back."""
  # Actor 4 (envs 16..19) is used by no other test.
  rng = np.random.default_rng(9)
  old = ActorClient(address, 4, K, OBS, ACT, connect_timeout_s=5)
  try:
    old.step(make_batch(16, rng))
    error = rpc_error(lambda: stub.Hello(hello_request(4), timeout=5))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "already has a live Step stream" in error.details()
    impostor = ActorClient(address, 4, K, OBS, ACT, connect_timeout_s=1)
    with pytest.raises(LearnerUnavailableError, match="ALREADY_EXISTS"):
      impostor.connect()  # retried until its deadline, then given up
    impostor.close()
    batch = make_batch(16, rng)  # the real actor was never disturbed
    np.testing.assert_array_equal(old.step(batch), batch.observation.argmax(1))
  finally:
    old.close()
  new = ActorClient(address, 4, K, OBS, ACT, connect_timeout_s=5)
  try:
    batch = make_batch(16, rng)
    np.testing.assert_array_equal(new.step(batch), batch.observation.argmax(1))
  finally:
    new.close()


def test_hello_without_a_stream_is_superseded_and_expires(stub, monkeypatch):
  from seed_rl.grpc import sessions

  registry = sessions.SessionRegistry(24)
  first = registry.open(5, 4)
  second = registry.open(5, 4)  # no stream yet: superseded, not refused
  assert first.superseded and not second.superseded
  monkeypatch.setattr(sessions, "HELLO_TTL_S", 0.0)
  registry.open(4, 4)  # the stream-less session of actor 5 expired
  assert registry.owner_of(20) is None


def test_connect_times_out_without_learner():
  start = time.monotonic()
  client = ActorClient(
    f"localhost:{free_port()}",
    0,
    K,
    OBS,
    ACT,
    connect_timeout_s=0.5,
    max_backoff_s=0.2,
  )
  with pytest.raises(LearnerUnavailableError, match="within 0.5s"):
    client.connect()
  client.close()
  assert time.monotonic() - start < 3


def test_client_waits_for_learner_and_survives_restart():
  port = free_port()
  address = f"localhost:{port}"
  rng = np.random.default_rng(10)
  client = ActorClient(
    address, 1, K, OBS, ACT, connect_timeout_s=10, max_backoff_s=0.2
  )
  result = {}

  def step_in_background(batch):
    result.clear()
    try:
      result["actions"] = client.step(batch)
    except Exception as e:
      result["error"] = e

  # The learner is not up yet: the first step keeps saying Hello.
  batch = make_batch(4, rng)
  thread = threading.Thread(target=step_in_background, args=(batch,))
  thread.start()
  time.sleep(0.5)
  assert thread.is_alive()
  handler1 = ArgmaxHandler()
  learner = LearnerServer(address, OBS, ACT, TOTAL, handler1)
  learner.start()
  try:
    thread.join(10)
    assert "error" not in result, result.get("error")
    np.testing.assert_array_equal(
      result["actions"], batch.observation.argmax(1)
    )
    old_session = client.session_id

    # The learner restarts on the same port while the actor is mid-run.
    learner.stop()
    batch = make_batch(4, rng)
    thread = threading.Thread(target=step_in_background, args=(batch,))
    thread.start()
    time.sleep(0.3)
    handler2 = ArgmaxHandler()
    learner = LearnerServer(address, OBS, ACT, TOTAL, handler2)
    learner.start()
    thread.join(10)
    assert "error" not in result, result.get("error")
    np.testing.assert_array_equal(
      result["actions"], batch.observation.argmax(1)
    )
    # The batch was resent to the new learner.
    np.testing.assert_array_equal(
      handler2.batches[0].observation, batch.observation
    )
    assert client.session_id != old_session

    # A session id from the previous learner instance is recognised as stale.
    with grpc.insecure_channel(address) as channel:
      error = rpc_error(
        lambda: send_one(
          seed_rl_pb2_grpc.SeedRLStub(channel),
          codec.encode_step_batch(batch),
          old_session,
        )
      )
    assert error.code() == grpc.StatusCode.ABORTED
    assert "learner restarted" in error.details()
    assert (
      dict(error.trailing_metadata())[protocol.REASON_METADATA_KEY]
      == protocol.REASON_LEARNER_RESTARTED
    )
  finally:
    client.close()
    learner.stop()


def test_finished_learner_tells_reconnecting_actors_at_hello():
  """An actor that was between streams when training ended (reconnecting
  after a learner restart) hears it at its next Hello and stops; the
  learner counts who was told, to know when it may exit."""
  handler = ArgmaxHandler()
  learner = LearnerServer("localhost:0", OBS, ACT, TOTAL, handler)
  learner.start()
  address = f"localhost:{learner.port}"
  try:
    on_stream = ActorClient(address, 0, K, OBS, ACT, connect_timeout_s=5)
    on_stream.connect()
    handler.finished = True
    # Nobody told yet: the wait ends at its timeout.
    start = time.monotonic()
    assert learner.wait_until_told_finished(2, timeout_s=0.3) == 0
    assert time.monotonic() - start >= 0.3
    away = ActorClient(address, 1, K, OBS, ACT, connect_timeout_s=5)
    with pytest.raises(LearnerFinished, match="training is over"):
      away.connect()
    away.close()
    assert learner.wait_until_told_finished(1, timeout_s=5) == 1
    # Actor 0's stream is still open (this handler serves after finishing,
    # a Learner refuses with "finished"); its own Hello counts it too.
    on_stream.close()
    again = ActorClient(address, 0, K, OBS, ACT, connect_timeout_s=5)
    with pytest.raises(LearnerFinished):
      again.connect()
    again.close()
    assert learner.wait_until_told_finished(2, timeout_s=5) == 2
  finally:
    learner.stop()


def test_server_refuses_port_in_use(server):
  other = LearnerServer(
    f"localhost:{server.port}", OBS, ACT, TOTAL, ArgmaxHandler()
  )
  with pytest.raises(OSError, match="cannot bind"):
    other.start()


def test_server_constructor_validates():
  with pytest.raises(ValueError, match="num_envs: 0"):
    LearnerServer("localhost:0", OBS, ACT, 0, ArgmaxHandler())
  with pytest.raises(ValueError, match="no step"):
    LearnerServer("localhost:0", OBS, ACT, 4, object())


def test_more_actors_than_workers_fail_fast():
  handler = ArgmaxHandler()
  learner = LearnerServer(
    "localhost:0", OBS, ACT, TOTAL, handler, max_workers=2
  )
  address = f"localhost:{learner.start()}"
  rng = np.random.default_rng(11)
  # The third retries a full learner (idle clients are cancelled within
  # seconds) until its connect timeout, then says what to raise.
  clients = [
    ActorClient(address, i, K, OBS, ACT, connect_timeout_s=5 if i < 2 else 1)
    for i in range(3)
  ]
  try:
    for i in range(2):
      clients[i].step(make_batch(i * K, rng))
    with pytest.raises(LearnerError, match="RESOURCE_EXHAUSTED.*max_workers"):
      clients[2].connect()
  finally:
    for client in clients:
      client.close()
    learner.stop()


def test_client_checks_batch_size(good_client):
  with pytest.raises(ValueError, match="batch: 3 envs, expected 4"):
    good_client.step(make_batch(0, np.random.default_rng(12), num_envs=3))


def test_silent_actor_is_logged_and_its_stream_ended(caplog):
  """(Real-process and timing checks: test_server_limits.py.)"""
  import logging

  server = LearnerServer(
    "localhost:0", OBS, ACT, TOTAL, ArgmaxHandler(), silent_timeout_s=0.3
  )
  server.start()
  rng = np.random.default_rng(3)
  client = ActorClient(
    f"localhost:{server.port}", 1, K, OBS, ACT, connect_timeout_s=5
  )
  try:
    with caplog.at_level(logging.WARNING):
      client.step(make_batch(4, rng))
      deadline = time.monotonic() + 10
      while "ending the Step stream" not in caplog.text:
        assert time.monotonic() < deadline, "silence never reported"
        time.sleep(0.05)
    assert "ending the Step stream of actor 1 owning 4..7: it sent nothing" in (
      caplog.text
    )
    assert server.silent_streams_ended == 1
    # It speaks again: the client says Hello again and is served.
    client.step(make_batch(4, rng))
  finally:
    client.close()
    server.stop(0)


def test_batch_resent_after_a_reconnect_is_not_stored_twice(stub, handler):
  """A client that lost its stream resends the batch it was sending; if the
  learner had already served it, it answers from its cache (exactly once)."""
  rng = np.random.default_rng(11)
  request = codec.encode_step_batch(make_batch(20, rng))  # actor 5: 20..23
  request.sequence = 12345
  session = stub.Hello(hello_request(5), timeout=5).session_id
  first = send_one(stub, request, session)
  served = len(handler.batches)
  deadline = time.monotonic() + 5
  while True:  # the first stream is released asynchronously
    try:
      session = stub.Hello(hello_request(5), timeout=5).session_id
      break
    except grpc.RpcError as e:
      assert e.code() == grpc.StatusCode.ALREADY_EXISTS
      assert time.monotonic() < deadline
      time.sleep(0.01)
  again = send_one(stub, request, session)
  assert again.action.data == first.action.data
  assert len(handler.batches) == served  # not passed to the learner again
  request.sequence = 12346  # the next batch is new
  while True:
    try:
      session = stub.Hello(hello_request(5), timeout=5).session_id
      break
    except grpc.RpcError:
      time.sleep(0.01)
  send_one(stub, request, session)
  assert len(handler.batches) == served + 1


def _count_wakeups(loop) -> list:
  """The callbacks handed to `loop.call_soon_threadsafe` from now on (each
  one a write to the loop's wake-up pipe)."""
  wakeups = []
  original = loop.call_soon_threadsafe

  def counting(callback, *args):
    wakeups.append(callback)
    return original(callback, *args)

  loop.call_soon_threadsafe = counting
  return wakeups


def test_completions_wake_the_loop_once_per_burst(caplog):
  """The inference thread answers a batch's requests in a row: the loop is
  woken once for all of them, runs each answer in order, and one answer
  that fails does not hold back the others."""
  import asyncio
  import logging
  from seed_rl.grpc.servicer import _Completions

  async def scenario():
    loop = asyncio.get_running_loop()
    completions = _Completions(loop)
    wakeups = _count_wakeups(loop)
    answered = []

    def settle(result, error):
      if result == "bad":
        raise RuntimeError("answer failed")
      answered.append((result, error, threading.current_thread().name))

    error = RuntimeError("batch failed")

    def inference_thread():
      for result in (0, 10, "bad", 20):
        completions.resolve(settle, result, None)
      completions.resolve(settle, None, error)

    thread = threading.Thread(target=inference_thread, name="inference")
    thread.start()
    thread.join()
    with caplog.at_level(logging.ERROR):
      await asyncio.sleep(0)
    assert len(wakeups) == 1
    main = threading.current_thread().name
    assert answered == [
      (0, None, main),
      (10, None, main),
      (20, None, main),
      (None, error, main),
    ]
    assert "answering a step failed" in caplog.text

  asyncio.run(scenario())


def test_completions_of_one_batch_wake_the_loop_once_while_it_runs():
  """With the loop free to drain between two answers, answers resolved one
  by one wake it for each; inside `batched()` the batch's answers wait for
  the block's end, unless another thread's answer wakes the loop first,
  which then takes them along."""
  import asyncio
  from seed_rl.grpc.servicer import _Completions

  async def scenario(batched):
    loop = asyncio.get_running_loop()
    completions = _Completions(loop)
    wakeups = _count_wakeups(loop)
    answered, held = [], []
    inside = threading.Event()
    other_answered = threading.Event()

    def settle(result, error):
      answered.append(result)
      if result == "other":
        other_answered.set()

    def inference_thread():
      scope = completions.batched() if batched else contextlib.nullcontext()
      with scope:
        for result in range(4):
          completions.resolve(settle, result, None)
          time.sleep(0.02)  # the loop is free to drain meanwhile
        held.extend(answered)  # what the loop ran while the batch went on
        inside.set()
        if batched:
          assert other_answered.wait(5)

    def other_thread():
      inside.wait(5)
      completions.resolve(settle, "other", None)

    threads = [
      threading.Thread(target=inference_thread),
      threading.Thread(target=other_thread),
    ]
    for t in threads:
      t.start()
    while any(t.is_alive() for t in threads):
      await asyncio.sleep(0.005)
    await asyncio.sleep(0.05)
    return wakeups, answered, held

  wakeups, answered, held = asyncio.run(scenario(batched=False))
  assert held == [0, 1, 2, 3] and answered == [0, 1, 2, 3, "other"]
  assert len(wakeups) == 5
  # Batched: nothing ran during the block until the other thread's answer,
  # whose wake-up took the batch's four along; none was left for the end.
  wakeups, answered, held = asyncio.run(scenario(batched=True))
  assert held == [] and answered == [0, 1, 2, 3, "other"]
  assert len(wakeups) == 1


def test_completions_of_a_batch_alone_wake_the_loop_at_its_end():
  import asyncio
  from seed_rl.grpc.servicer import _Completions

  async def scenario():
    loop = asyncio.get_running_loop()
    completions = _Completions(loop)
    answered, held = [], []

    def inference_thread():
      with completions.batched():
        for result in range(3):
          completions.resolve(lambda r, e: answered.append(r), result, None)
          time.sleep(0.02)
        held.extend(answered)

    thread = threading.Thread(target=inference_thread)
    thread.start()
    while thread.is_alive():
      await asyncio.sleep(0.005)
    await asyncio.sleep(0.05)
    assert held == [] and answered == [0, 1, 2]

  asyncio.run(scenario())


def test_a_learner_behind_the_server_answers_each_batch_through_one_scope():
  """A real Learner serves three actors over localhost: its batcher hands
  each inference batch's answers to the server's loop inside the
  servicer's `batched()` scope, and every actor gets its actions."""
  from seed_rl.common.learner import Learner, LearnerConfig
  from tests.support.recording_agent import RecordingAgent

  agent = RecordingAgent(OBS, ACT, 3 * K)
  learner = Learner(agent, OBS, ACT, 3 * K, 0, LearnerConfig())
  server = LearnerServer("localhost:0", OBS, ACT, 3 * K, learner)
  server.start()
  try:
    scope = learner._batcher.notify_scope
    assert scope.__self__ is server._servicer._completions
    assert scope.__func__ is type(scope.__self__).batched
    errors = []

    def actor(actor_id):
      client = ActorClient(
        f"localhost:{server.port}", actor_id, K, OBS, ACT, connect_timeout_s=5
      )
      rng = np.random.default_rng(actor_id)
      try:
        for _ in range(20):
          batch = make_batch(actor_id * K, rng)
          actions = client.step(batch)
          # RecordingAgent's action: env id % 2.
          np.testing.assert_array_equal(actions, batch.env_ids % 2)
      except Exception as e:  # reported below
        errors.append(e)
      finally:
        client.close()

    threads = [threading.Thread(target=actor, args=(i,)) for i in range(3)]
    for t in threads:
      t.start()
    for t in threads:
      t.join(30)
    assert not any(t.is_alive() for t in threads) and not errors, errors
    assert learner._batcher.requests_served >= 60
  finally:
    server.stop(0)
    learner.shutdown()
