"""The actor's side of the wire: Hello, then one Step stream (no TensorFlow).

`ActorClient.step` sends one StepBatch and blocks for the learner's actions.
If the learner goes away (UNAVAILABLE, CANCELLED, or a session id from before a
learner restart), the client says Hello again with backoff and resends the
same batch, so an actor survives learner restarts without losing its place.
"""

from __future__ import annotations

import logging
import random
import queue
import time
from typing import Any, Optional

import grpc
import numpy as np

from seed_rl.common.specs import ArraySpec, StepBatch
from seed_rl.common.throttle import Throttle
from seed_rl.grpc import address as address_lib
from seed_rl.grpc import codec
from seed_rl.grpc import protocol
from seed_rl.grpc import seed_rl_pb2
from seed_rl.grpc import seed_rl_pb2_grpc
from seed_rl.grpc.errors import (
  AuthenticationError,
  LearnerFinished,
  LearnerError,
  LearnerUnavailableError,
  ProtocolError,
  SessionSupersededError,
  SpecMismatchError,
)
from seed_rl.grpc.security import ClientSecurity

__all__ = [
  "ActorClient",
  "AuthenticationError",
  "LearnerFinished",
  "LearnerError",
  "LearnerUnavailableError",
  "ProtocolError",
  "SessionSupersededError",
  "SpecMismatchError",
]

_INITIAL_BACKOFF_S = 0.05
# Bounds one Hello attempt; a learner that accepted the connection but does
# not answer in this long is treated as not up yet.
_HELLO_ATTEMPT_TIMEOUT_S = 10.0
_LOG_INTERVAL_S = 5.0
# ALREADY_EXISTS: this actor id's previous stream is still open (a restart
# faster than the learner noticed the old connection die); it will be freed.
_RETRIABLE_HELLO_CODES = (
  grpc.StatusCode.UNAVAILABLE,
  grpc.StatusCode.DEADLINE_EXCEEDED,
  grpc.StatusCode.ALREADY_EXISTS,
  # A Hello that reaches a learner as it shuts down (SIGTERM: a cluster
  # moving it) is cancelled by its server; the next learner answers.
  grpc.StatusCode.CANCELLED,
)
# RESOURCE_EXHAUSTED with `seed-reason: learner-busy` (every one of the
# learner's max_workers slots in use, or this call was evicted by newer calls
# that had not sent a message yet either) or with gRPC's concurrency
# message. Idle clients are cancelled by the learner within its first-message
# timeout (server.FIRST_MESSAGE_TIMEOUT_S, 10 s), so this is retried for a
# while; longer means too few max_workers for the actors.
_BUSY_DETAILS = "Concurrent RPC limit exceeded"
_BUSY_RETRY_S = 30.0


def _learner_busy(error: grpc.RpcError) -> bool:
  return error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and (
    _reason(error) == protocol.REASON_BUSY
    or _BUSY_DETAILS in (error.details() or "")
  )


class _RequestQueue:
  """Blocking request iterator that gRPC's sender thread drains."""

  _END = object()

  def __init__(self):
    self._queue = queue.SimpleQueue()

  def __iter__(self):
    return self

  def __next__(self) -> seed_rl_pb2.StepRequest:
    item = self._queue.get()
    if item is self._END:
      raise StopIteration
    return item

  def put(self, request: seed_rl_pb2.StepRequest) -> None:
    self._queue.put(request)

  def close(self) -> None:
    self._queue.put(self._END)


def _reason(error: grpc.RpcError) -> Optional[str]:
  metadata = error.trailing_metadata() or ()
  return dict(metadata).get(protocol.REASON_METADATA_KEY)


def _error_from_rpc(error: grpc.RpcError, what: str) -> Exception:
  code, details = error.code(), error.details()
  reason = _reason(error)
  if reason == protocol.REASON_SPEC_MISMATCH:
    return SpecMismatchError(details, code)
  if reason == protocol.REASON_SUPERSEDED:
    return SessionSupersededError(details, code)
  if code == grpc.StatusCode.UNAUTHENTICATED:
    return AuthenticationError(f"learner refused {what}: {details}", code)
  if code in (
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
  ):
    return ProtocolError(f"learner rejected {what}: {details}", code)
  if _learner_busy(error):
    details += (
      " (each of the learner's max_workers RPC slots holds an actor's "
      "stream; raise the learner's max_workers above the number of actors)"
    )
  return LearnerError(f"{what} failed: {code.name}: {details}", code)


def _learner_went_away(error: grpc.RpcError) -> bool:
  """Whether to say Hello again: the learner restarted or went away, or it
  ended a stream it thought silent (an env step slower than its deadline)."""
  code = error.code()
  reason = _reason(error)
  return (
    code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    or (
      code == grpc.StatusCode.ABORTED
      and reason == protocol.REASON_LEARNER_RESTARTED
    )
    or (
      code == grpc.StatusCode.DEADLINE_EXCEEDED
      and reason == protocol.REASON_SILENT
    )
  )


class ActorClient:
  """One actor's connection to the learner. Not thread-safe: one step at a time.

  Actor `actor_id` with `num_envs` = K environments owns global env ids
  [actor_id*K, (actor_id+1)*K) (the learner confirms them in Hello).
  """

  def __init__(
    self,
    address: str,
    actor_id: int,
    num_envs: int,
    observation_spec: ArraySpec,
    action_spec: ArraySpec,
    connect_timeout_s: Optional[float] = None,
    max_backoff_s: float = 5.0,
    security: Optional[ClientSecurity] = None,
  ):
    """Creates the client; call connect() (or step(), which connects).

    Args:
      address: learner 'host:port', or 'file:PATH': the file the learner
        writes its address to (`--address_file`), read again before every
        connection attempt, so a learner moved elsewhere is found.
      actor_id: this actor's index, >= 0.
      num_envs: K, environments stepped by this actor, >= 1.
      observation_spec, action_spec: per-env specs of this actor's env.
      connect_timeout_s: give up (LearnerUnavailableError) if no learner
        answers Hello within this long; None waits forever.
      max_backoff_s: cap of the exponential backoff between Hello attempts.
      security: the CA to verify the learner's TLS certificate and the token
        sent on every RPC; None connects in plaintext without a token.
    """
    if actor_id < 0:
      raise ValueError(f"actor_id: {actor_id}, expected >= 0")
    if num_envs < 1:
      raise ValueError(f"num_envs: {num_envs}, expected >= 1")
    if connect_timeout_s is not None and connect_timeout_s <= 0:
      raise ValueError(
        f"connect_timeout_s: {connect_timeout_s}, expected > 0 "
        f"or None (wait forever)"
      )
    if max_backoff_s <= 0:
      raise ValueError(f"max_backoff_s: {max_backoff_s}, expected > 0")
    self._source = address_lib.LearnerAddress(address)
    self._address = str(self._source)
    self._actor_id = actor_id
    self._num_envs = num_envs
    self._observation_spec = observation_spec
    self._action_spec = action_spec
    self._expected_action_shape = (num_envs,) + action_spec.shape
    self._action_dtype = np.dtype(action_spec.dtype)
    self._connect_timeout_s = connect_timeout_s
    self._max_backoff_s = max_backoff_s
    self._hello_request = seed_rl_pb2.HelloRequest(
      protocol_version=protocol.PROTOCOL_VERSION,
      actor_id=actor_id,
      num_envs=num_envs,
      observation_spec=codec.encode_spec(observation_spec),
      action_spec=codec.encode_spec(action_spec),
    )
    self._security = security or ClientSecurity()
    # A random start per client: a restarted actor's numbers never match
    # what the learner remembers of its previous process.
    self._sequence = random.SystemRandom().getrandbits(62) + 1
    self._auth = tuple(self._security.metadata() or ())
    self._channel: Optional[grpc.Channel] = None
    self._stub: Any = None
    self._dialled: Optional[str] = None  # the address the channel is for
    self._refresh_channel()
    self._hello: Optional[seed_rl_pb2.HelloResponse] = None
    self._requests: Optional[_RequestQueue] = None
    # The Step call: an iterator of StepResponse that also has cancel().
    self._responses: Optional[Any] = None
    self._closed = False
    self._log_throttle = Throttle(_LOG_INTERVAL_S)

  @property
  def num_envs(self) -> int:
    return self._num_envs

  @property
  def first_env_id(self) -> int:
    """First global env id of this actor (after connect())."""
    return self._connected_hello().first_env_id

  @property
  def num_envs_total(self) -> int:
    """Environments the learner serves over all actors (after connect())."""
    return self._connected_hello().num_envs_total

  @property
  def session_id(self) -> str:
    return self._connected_hello().session_id

  def _connected_hello(self) -> seed_rl_pb2.HelloResponse:
    if self._hello is None:
      raise RuntimeError("ActorClient: call connect() first")
    return self._hello

  def _check_open(self) -> None:
    if self._closed:
      raise RuntimeError("ActorClient: used after close()")

  def _refresh_channel(self) -> bool:
    """Opens a channel to the address now known (a new one when an address
    file changed); False while the address file names none yet."""
    address = self._source.read()
    if address is None:
      return False
    if address != self._dialled:
      if self._channel is not None:
        logging.warning(
          "Actor %d: the learner moved from %s to %s",
          self._actor_id,
          self._dialled,
          address,
        )
        self._channel.close()
      self._channel = self._security.channel(
        address, protocol.channel_options(self._max_backoff_s)
      )
      self._stub = seed_rl_pb2_grpc.SeedRLStub(self._channel)
      self._dialled = address
      self._address = (
        address if self._source.path is None else f"{address} ({self._source})"
      )
    return True

  def _wait_for_address(
    self, start: float, deadline: Optional[float], delay: float
  ) -> float:
    """One backoff pause while the address file names no learner yet;
    returns the next pause (LearnerUnavailableError past the deadline)."""
    now = time.monotonic()
    if deadline is not None and now >= deadline:
      raise LearnerUnavailableError(
        f"no learner address in {self._source.path} within "
        f"{self._connect_timeout_s}s"
      )
    if self._log_throttle.ready():
      logging.warning(
        "Actor %d waiting for the learner's address in %s, %.0fs so far",
        self._actor_id,
        self._source.path,
        now - start,
      )
    time.sleep(
      max(0.0, delay if deadline is None else min(delay, deadline - now))
    )
    return min(delay * 2, self._max_backoff_s)

  def _say_hello(self) -> seed_rl_pb2.HelloResponse:
    start = time.monotonic()
    deadline = (
      None
      if self._connect_timeout_s is None
      else start + self._connect_timeout_s
    )
    delay = _INITIAL_BACKOFF_S
    # The last answer that says why (the final attempt, cut short by the
    # deadline, often ends in DEADLINE_EXCEEDED, which says nothing).
    refusal: Optional[grpc.RpcError] = None
    while True:
      self._check_open()  # closed from another thread: stop retrying
      if not self._refresh_channel():
        delay = self._wait_for_address(start, deadline, delay)
        continue
      attempt_timeout = _HELLO_ATTEMPT_TIMEOUT_S
      if deadline is not None:
        attempt_timeout = max(
          0.01, min(attempt_timeout, deadline - time.monotonic())
        )
      try:
        return self._stub.Hello(
          self._hello_request,
          timeout=attempt_timeout,
          metadata=self._auth or None,
        )
      except grpc.RpcError as e:
        now = time.monotonic()
        if _reason(e) == protocol.REASON_LEARNER_FINISHED:
          raise LearnerFinished(e.details()) from None
        if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED or refusal is None:
          refusal = e
        if e.code() not in _RETRIABLE_HELLO_CODES and not _learner_busy(e):
          raise _error_from_rpc(e, "Hello") from None
        timed_out = deadline is not None and now >= deadline
        if _learner_busy(refusal) and (
          timed_out or now - start >= _BUSY_RETRY_S
        ):
          raise _error_from_rpc(refusal, "Hello") from None
        if timed_out:
          raise LearnerUnavailableError(
            f"no learner answered at {self._address} within "
            f"{self._connect_timeout_s}s (last: {refusal.code().name}: "
            f"{refusal.details()})"
          ) from None
        if self._log_throttle.ready():
          logging.warning(
            "Actor %d waiting for the learner at %s (%s), %.0fs so far",
            self._actor_id,
            self._address,
            e.code().name,
            now - start,
          )
        pause = delay if deadline is None else min(delay, deadline - now)
        time.sleep(max(0.0, pause))
        delay = min(delay * 2, self._max_backoff_s)

  def connect(self) -> None:
    """Says Hello (retrying while no learner is up) and opens the Step stream.

    Raises:
      SpecMismatchError: the learner's specs differ from this actor's.
      ProtocolError: the learner refused the Hello (e.g. actor id out of its
        range, protocol version).
      LearnerUnavailableError: no learner within connect_timeout_s.
    """
    self._check_open()
    self._drop_stream()
    hello = self._say_hello()
    for field, actor_spec in (
      ("observation_spec", self._observation_spec),
      ("action_spec", self._action_spec),
    ):
      learner_spec = codec.decode_spec(getattr(hello, field), field)
      mismatch = codec.spec_mismatch(learner_spec, actor_spec, field)
      if mismatch is not None:
        raise SpecMismatchError(f"spec mismatch: {mismatch}")
    self._hello = hello
    self._requests = _RequestQueue()
    self._responses = self._stub.Step(
      self._requests,
      metadata=((protocol.SESSION_METADATA_KEY, hello.session_id),)
      + self._auth,
    )

  def _drop_stream(self) -> None:
    # Local copies: close() may run from another thread (an env group
    # shutting down) while the stepping thread drops the stream too.
    requests, self._requests = self._requests, None
    responses, self._responses = self._responses, None
    if requests is not None:
      requests.close()  # ends gRPC's sender thread
    if responses is not None:
      responses.cancel()

  def _decode_actions(self, response: seed_rl_pb2.StepResponse) -> np.ndarray:
    try:
      actions = codec.decode_tensor(response.action, "action")
    except ValueError as e:
      raise ProtocolError(f"learner sent malformed actions: {e}") from None
    if (
      actions.shape != self._expected_action_shape
      or actions.dtype != self._action_dtype
    ):
      raise ProtocolError(
        f"learner sent actions {actions.dtype.name} {list(actions.shape)}, "
        f"expected {self._action_spec.dtype} "
        f"{list(self._expected_action_shape)}"
      )
    return actions

  def step(self, batch: StepBatch) -> np.ndarray:
    """Sends `batch` and returns the learner's actions.

    Args:
      batch: this actor's K env steps (global env ids).

    Returns:
      Read-only actions [K, *action_spec.shape], rows in `batch` env order.

    Raises:
      ProtocolError: the learner rejected the batch (message names the field).
      SessionSupersededError: another Hello for this actor id took over.
      LearnerError: the learner failed while serving the batch.
      LearnerUnavailableError: the learner went away and did not come back
        within connect_timeout_s.
    """
    self._check_open()
    if batch.num_envs != self._num_envs:
      raise ValueError(
        f"batch: {batch.num_envs} envs, expected {self._num_envs}"
        f" (this actor's num_envs)"
      )
    request = codec.encode_step_batch(batch)
    # One number per batch, kept across the resends of a reconnect.
    self._sequence += 1
    request.sequence = self._sequence
    if self._responses is None:
      self.connect()
    failures = 0
    while True:
      requests, responses = self._requests, self._responses
      if requests is None or responses is None:
        # connect() (above, or at the end of the last pass) opened both;
        # only a close() from another thread drops them meanwhile.
        raise RuntimeError("ActorClient: closed during step()")
      try:
        requests.put(request)
        return self._decode_actions(next(responses))
      except StopIteration:
        cause = "the learner closed the stream"
      except grpc.RpcError as e:
        if self._closed:
          raise RuntimeError("ActorClient: closed during step()") from None
        if _reason(e) == protocol.REASON_LEARNER_FINISHED:
          self._drop_stream()
          raise LearnerFinished(e.details()) from None
        # A stream refused for want of an RPC slot is retried like a
        # lost learner (a learner that stays full fails the next Hello).
        if not _learner_went_away(e) and not _learner_busy(e):
          self._drop_stream()
          raise _error_from_rpc(e, "Step") from None
        cause = f"{e.code().name}: {e.details()}"
      failures += 1
      if self._log_throttle.ready():
        logging.warning(
          "Actor %d lost the learner at %s (%s); reconnecting",
          self._actor_id,
          self._address,
          cause,
        )
      self._drop_stream()
      if failures > 1:
        # The learner accepts Hello but keeps dropping the stream: slow down.
        time.sleep(
          min(_INITIAL_BACKOFF_S * 2 ** (failures - 2), self._max_backoff_s)
        )
      self.connect()

  def close(self) -> None:
    """Ends the stream and the channel; idempotent."""
    if self._closed:
      return
    self._closed = True
    self._drop_stream()
    if self._channel is not None:
      self._channel.close()

  def __enter__(self) -> "ActorClient":
    return self

  def __exit__(self, *exc) -> None:
    self.close()
