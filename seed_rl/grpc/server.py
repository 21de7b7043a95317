"""The learner's gRPC server: Hello handshakes and one Step stream per actor.

Each Step stream runs on its own worker thread and calls `handler.step`
synchronously, so the handler sees one blocking call per actor in flight and
batches across actors itself. A bad message, or a handler error, ends only the
stream it arrived on. An RPC holds its worker thread while it waits for its
first message, so one that sends nothing within `first_message_timeout_s` is
cancelled: idle clients cannot keep the worker pool full.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from concurrent import futures
from typing import Any, Dict, Optional, Protocol, Tuple

import grpc
from google.protobuf.message import DecodeError
import numpy as np

from seed_rl.common.specs import ArraySpec, StepBatch
from seed_rl.grpc import codec
from seed_rl.grpc import errors
from seed_rl.grpc import protocol
from seed_rl.grpc import seed_rl_pb2
from seed_rl.grpc import validation
from seed_rl.grpc.security import ServerSecurity
from seed_rl.grpc.sessions import Rejection, Session, SessionRegistry


# A Hello or Step call holds a worker thread from its start; one whose first
# message has not arrived after this long is cancelled. Actors send theirs at
# once (a Step stream's first batch follows Hello by one env reset).
FIRST_MESSAGE_TIMEOUT_S = 10.0


class StepHandler(Protocol):
  """What the server calls; `on_disconnect(first_env_id, num_envs)` optional."""

  def step(self, batch: StepBatch) -> np.ndarray:
    """Returns actions [K, *action_shape] for `batch` (blocking, thread-safe)."""


def _abort(context: grpc.ServicerContext, rejection: Rejection) -> None:
  if rejection.reason is not None:
    context.set_trailing_metadata(
      ((protocol.REASON_METADATA_KEY, rejection.reason),)
    )
  context.abort(rejection.code, rejection.message)


def _parse(message_class, request):
  """Requests arrive as raw bytes (see _handlers): bytes that are not a
  message of this type are refused with INVALID_ARGUMENT like any other bad
  field, instead of gRPC's generic INTERNAL deserialization error."""
  if not isinstance(request, (bytes, bytearray)):
    return request
  try:
    return message_class.FromString(bytes(request))
  except DecodeError as e:
    raise Rejection(
      grpc.StatusCode.INVALID_ARGUMENT,
      f"request: not a valid {message_class.DESCRIPTOR.name} ({e})",
    ) from None


class _FirstMessageWatch:
  """RPCs waiting for their first message; those past the timeout are
  cancelled (`expire`), which frees their worker threads."""

  def __init__(self, timeout_s: Optional[float]):
    self.timeout_s = timeout_s
    self._lock = threading.Lock()
    self._ids = itertools.count()
    self._waiting: Dict[int, Tuple[float, Any]] = {}
    self.cancelled = 0  # RPCs cancelled so far

  def add(self, context) -> Optional[int]:
    if not self.timeout_s:
      return None
    key = next(self._ids)
    with self._lock:
      self._waiting[key] = (time.monotonic() + self.timeout_s, context)
    return key

  def done(self, key: Optional[int]) -> None:
    if key is not None:
      with self._lock:
        self._waiting.pop(key, None)

  def expire(self) -> int:
    """Cancels the RPCs past their deadline; returns how many."""
    now = time.monotonic()
    with self._lock:
      late = [k for k, (deadline, _) in self._waiting.items() if deadline < now]
      contexts = [self._waiting.pop(k)[1] for k in late]
      self.cancelled += len(contexts)
    for context in contexts:
      context.cancel()  # thread-safe: ends the call's pending receive
    return len(contexts)


def _handlers(servicer) -> grpc.GenericRpcHandler:
  """The SeedRL service with raw-bytes requests, parsed by the servicer.

  Hello is served as client-streaming (the wire format of a unary request is
  the same) so that the servicer, not gRPC, waits for its one message, under
  the first-message deadline."""
  return grpc.method_handlers_generic_handler(
    "seed_rl.SeedRL",
    {
      "Hello": grpc.stream_unary_rpc_method_handler(
        servicer.Hello,
        response_serializer=seed_rl_pb2.HelloResponse.SerializeToString,
      ),
      "Step": grpc.stream_stream_rpc_method_handler(
        servicer.Step,
        response_serializer=seed_rl_pb2.StepResponse.SerializeToString,
      ),
    },
  )


class _Servicer:
  """Implements the SeedRL service on top of a SessionRegistry and a handler."""

  def __init__(
    self,
    observation_spec: ArraySpec,
    action_spec: ArraySpec,
    registry: SessionRegistry,
    handler,
    limits: validation.ValueLimits,
    watch: _FirstMessageWatch,
  ):
    self._watch = watch
    self._limits = limits
    self._observation_spec = observation_spec
    self._action_spec = action_spec
    self._registry = registry
    self.registry = registry
    self._handler = handler
    self._on_disconnect = getattr(handler, "on_disconnect", None)
    self._hello_specs = (
      codec.encode_spec(observation_spec),
      codec.encode_spec(action_spec),
    )

  def _check_hello(self, request: seed_rl_pb2.HelloRequest) -> None:
    if request.protocol_version != protocol.PROTOCOL_VERSION:
      raise Rejection(
        grpc.StatusCode.FAILED_PRECONDITION,
        f"protocol_version: learner {protocol.PROTOCOL_VERSION}, actor "
        f"{request.protocol_version}; run the same seed_rl version on both",
      )
    for field, learner_spec in (
      ("observation_spec", self._observation_spec),
      ("action_spec", self._action_spec),
    ):
      if not request.HasField(field):
        raise Rejection(
          grpc.StatusCode.INVALID_ARGUMENT,
          f"{field}: missing from HelloRequest",
        )
      try:
        actor_spec = codec.decode_spec(getattr(request, field), field)
      except ValueError as e:
        raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
      mismatch = codec.spec_mismatch(learner_spec, actor_spec, field)
      if mismatch is not None:
        raise Rejection(
          grpc.StatusCode.FAILED_PRECONDITION,
          f"spec mismatch: {mismatch}",
          protocol.REASON_SPEC_MISMATCH,
        )

  def _first_request(self, request_iterator, context):
    """The call's first message, or None if it ended (or was cancelled
    by the first-message watch) before sending one."""
    key = self._watch.add(context)
    try:
      return next(request_iterator, None)
    except grpc.RpcError:
      return None
    finally:
      self._watch.done(key)

  def Hello(self, request_iterator, context):
    request = self._first_request(request_iterator, context)
    if request is None:
      _abort(
        context,
        Rejection(
          grpc.StatusCode.INVALID_ARGUMENT,
          "request: Hello sent no HelloRequest (or not within "
          f"{self._watch.timeout_s} s)",
        ),
      )
    try:
      request = _parse(seed_rl_pb2.HelloRequest, request)
      self._check_hello(request)
      session = self._registry.open(request.actor_id, request.num_envs)
    except Rejection as rejection:
      _abort(context, rejection)
    response = seed_rl_pb2.HelloResponse(
      protocol_version=protocol.PROTOCOL_VERSION,
      first_env_id=session.first_env_id,
      num_envs=session.num_envs,
      num_envs_total=self._registry.num_envs_total,
      session_id=session.session_id,
    )
    response.observation_spec.CopyFrom(self._hello_specs[0])
    response.action_spec.CopyFrom(self._hello_specs[1])
    return response

  def _actions_to_response(self, actions, k: int) -> seed_rl_pb2.StepResponse:
    spec = self._action_spec
    actions = np.asarray(actions)
    expected = (k,) + spec.shape
    if actions.shape != expected or not np.can_cast(
      actions.dtype, spec.dtype, "same_kind"
    ):
      raise RuntimeError(
        f"handler.step returned actions {actions.dtype.name} "
        f"{list(actions.shape)}, expected {spec.dtype} {list(expected)}"
      )
    response = seed_rl_pb2.StepResponse()
    codec.fill_tensor(
      response.action, actions.astype(spec.dtype, copy=False), "action"
    )
    return response

  def _serve_one(self, request, session: Session) -> seed_rl_pb2.StepResponse:
    """Returns the response to one request; Rejection ends the stream."""
    session.last_seen = time.monotonic()
    request = _parse(seed_rl_pb2.StepRequest, request)
    if session.superseded:
      raise Rejection(
        grpc.StatusCode.ABORTED,
        f"session {session.session_id!r} of {session.describe()} was "
        f"superseded by a newer Hello for actor {session.actor_id} (a "
        f"restarted actor, or two actors started with the same --actor_id); "
        f"this stream is closed",
        protocol.REASON_SUPERSEDED,
      )
    # Exactly once: a batch resent after a reconnect was already stored and
    # acted on; answer it again without passing it to the learner.
    cached = self._registry.replay(session.actor_id, request.sequence)
    if cached is not None:
      return cached
    try:
      batch = validation.check_step_request(
        request,
        self._observation_spec,
        session,
        self._registry.num_envs_total,
        self._registry.owner_of,
        self._limits,
      )
      response = self._actions_to_response(
        self._handler.step(batch), session.num_envs
      )
      self._registry.served(session.actor_id, request.sequence, response)
      return response
    except ValueError as e:
      raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
    except errors.ServiceStopping as e:
      raise Rejection(
        grpc.StatusCode.UNAVAILABLE,
        str(e),
        protocol.REASON_LEARNER_FINISHED if e.finished else None,
      ) from None
    except Exception as e:  # pylint: disable=broad-except
      logging.exception("Step stream of %s failed", session.describe())
      raise Rejection(
        grpc.StatusCode.INTERNAL, f"learner error: {type(e).__name__}: {e}"
      ) from None

  def Step(self, request_iterator, context):
    metadata = dict(context.invocation_metadata())
    try:
      session = self._registry.claim(
        metadata.get(protocol.SESSION_METADATA_KEY)
      )
    except Rejection as rejection:
      _abort(context, rejection)
    key = self._watch.add(context)
    try:
      for request in request_iterator:
        if key is not None:  # only the first message ends the watch
          self._watch.done(key)
          key = None
        try:
          response = self._serve_one(request, session)
        except Rejection as rejection:
          _abort(context, rejection)
        yield response
    finally:
      self._watch.done(key)
      # Runs when the client closes, cancels or fails, on abort, and on server
      # stop (gRPC drops the suspended generator, which closes it).
      if self._registry.release(session) and self._on_disconnect is not None:
        try:
          self._on_disconnect(session.first_env_id, session.num_envs)
        except Exception:  # pylint: disable=broad-except
          logging.exception(
            "on_disconnect(%d, %d) failed",
            session.first_env_id,
            session.num_envs,
          )


class LearnerServer:
  """Serves actors: validates their specs and streams, calls `handler.step`.

  Each open Step stream occupies one of `max_workers` threads for its lifetime
  (plus one for a Hello in progress), so `max_workers` bounds the number of
  actors; RPCs beyond it fail fast with RESOURCE_EXHAUSTED instead of hanging.
  An RPC that sends no message within `first_message_timeout_s` is cancelled
  and its thread freed (actors retry a RESOURCE_EXHAUSTED Hello meanwhile).
  """

  def __init__(
    self,
    address: str,
    observation_spec: ArraySpec,
    action_spec: ArraySpec,
    num_envs: int,
    handler,
    max_workers: int = 64,
    security: Optional[ServerSecurity] = None,
    limits: Optional[validation.ValueLimits] = None,
    silent_timeout_s: Optional[float] = 60.0,
    first_message_timeout_s: Optional[float] = FIRST_MESSAGE_TIMEOUT_S,
  ):
    """Creates the server (call start() to serve).

    Args:
      address: 'host:port'; port 0 picks a free port.
      observation_spec: per-env observation spec on the wire (the env's).
      action_spec: per-env action spec.
      num_envs: total environments over all actors.
      handler: has `step(StepBatch) -> actions [K, *action_spec.shape]` and
        optionally `on_disconnect(first_env_id, num_envs)`, called once when a
        Step stream ends, unless its actor reconnected first (a newer Hello
        superseded the session, so its envs are still served).
      max_workers: gRPC worker threads = maximum concurrent RPCs.
      security: TLS credentials and the actors' token (see security.py);
        None serves plaintext without a token (loopback use).
      limits: largest rewards / float observations accepted (default
        validation.ValueLimits()).
      silent_timeout_s: log an actor whose open stream sent nothing for
        this long (a hung environment or host); None disables.
      first_message_timeout_s: cancel a Hello or Step call that sent no
        message for this long after it started (an idle or malicious
        client holding a worker thread); None disables.
    """
    if num_envs < 1:
      raise ValueError(f"num_envs: {num_envs}, expected >= 1")
    if max_workers < 2:
      raise ValueError(
        f"max_workers: {max_workers}, expected >= 2 (one Step "
        f"stream per actor plus a Hello)"
      )
    if not callable(getattr(handler, "step", None)):
      raise ValueError(
        f"handler: {type(handler).__name__} has no step(batch) method"
      )
    self._address = address
    self._silent_timeout_s = silent_timeout_s
    self._stopped = threading.Event()
    self._max_workers = max_workers
    self._security = security or ServerSecurity()
    self._watch = _FirstMessageWatch(first_message_timeout_s)
    self._servicer = _Servicer(
      observation_spec,
      action_spec,
      SessionRegistry(num_envs),
      handler,
      limits or validation.ValueLimits(),
      self._watch,
    )
    self._server: Optional[grpc.Server] = None
    self._port: Optional[int] = None

  @property
  def port(self) -> Optional[int]:
    return self._port

  @property
  def idle_rpcs_cancelled(self) -> int:
    """RPCs cancelled for sending nothing within first_message_timeout_s."""
    return self._watch.cancelled

  def start(self) -> int:
    """Binds and starts serving; returns the bound port."""
    if self._server is not None:
      raise RuntimeError("LearnerServer.start() called twice")
    server = grpc.server(
      futures.ThreadPoolExecutor(
        self._max_workers, thread_name_prefix="seed_rl_grpc"
      ),
      options=protocol.server_options(),
      maximum_concurrent_rpcs=self._max_workers,
      interceptors=self._security.interceptors(),
    )
    server.add_generic_rpc_handlers((_handlers(self._servicer),))
    credentials = self._security.credentials()
    try:
      if credentials is None:
        port = server.add_insecure_port(self._address)
      else:
        port = server.add_secure_port(self._address, credentials)
    except RuntimeError as e:
      raise OSError(
        f"cannot bind learner server to {self._address!r}: {e}"
      ) from None
    if port == 0:
      raise OSError(f"cannot bind learner server to {self._address!r}")
    server.start()
    self._server, self._port = server, port
    if self._silent_timeout_s:
      threading.Thread(
        target=self._watch_silent, daemon=True, name="silent-actors"
      ).start()
    if self._watch.timeout_s:
      threading.Thread(
        target=self._watch_first_messages, daemon=True, name="idle-rpcs"
      ).start()
    logging.info(
      "Learner server listening on %s (port %d)", self._address, port
    )
    return port

  def _watch_silent(self) -> None:
    timeout = self._silent_timeout_s
    assert timeout is not None
    while not self._stopped.wait(min(5.0, timeout / 2)):
      for session in self._servicer.registry.silent(timeout):
        logging.warning(
          "%s has sent nothing for more than %.0f s on its open stream "
          "(a hung environment, or its host is gone)",
          session.describe(),
          timeout,
        )

  def _watch_first_messages(self) -> None:
    timeout = self._watch.timeout_s
    assert timeout
    while not self._stopped.wait(min(1.0, timeout / 4)):
      cancelled = self._watch.expire()
      if cancelled:
        logging.warning(
          "cancelled %d RPC(s) that sent no message within %g s of "
          "starting (idle clients holding worker threads)",
          cancelled,
          timeout,
        )

  def stop(self, grace: Optional[float] = None) -> None:
    """Stops serving; open streams are cancelled after `grace` seconds."""
    self._stopped.set()
    if self._server is not None:
      self._server.stop(grace).wait()

  def wait_for_termination(self, timeout: Optional[float] = None) -> bool:
    """Blocks until the server stops (or `timeout`); True if it stopped."""
    if self._server is None:
      raise RuntimeError("LearnerServer.wait_for_termination() before start()")
    timed_out = self._server.wait_for_termination(timeout)
    return not timed_out

  def __enter__(self) -> "LearnerServer":
    self.start()
    return self

  def __exit__(self, *exc) -> None:
    self.stop()
