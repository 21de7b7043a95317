"""The SeedRL service's handlers, on the learner server's asyncio event loop.

Every Hello and Step call is a coroutine on one event loop thread (see
server.py): an open Step stream costs no thread, so one learner holds
thousands of actors. Each request is parsed and validated on the loop, then
handed to the handler without blocking the loop:

- a handler with `submit(batch, on_done)` (the Learner) queues the batch for
  its inference thread, which calls `on_done(actions, error)` when the batch
  ran; `_Completions` wakes the loop once for all the requests a batch
  answered, not once per request;
- a handler with only a blocking `step(batch)` runs it in a thread pool (one
  thread per concurrent call, as the threaded server did).

A bad message, or a handler error, ends only the stream it arrived on.

What a client cannot hold:
- Capacity. A call is *pending* from its start until its first message
  arrives; pending calls are counted apart from the established ones (Step
  streams past their first message), per peer host and in all
  (`_Admission`). A new call beyond either cap evicts the oldest
  pending call of its host, or of the host with the most pending calls, so
  a flood of idle calls cannot keep a restarting actor out; the server's
  gRPC limit leaves room for both kinds, and established calls are limited
  to `max_workers` (RESOURCE_EXHAUSTED, `seed-reason: learner-busy`,
  retried by the client).
- An actor id, by going silent. The learner notes when it finished sending
  each response; a stream whose actor keeps the turn longer than
  `silent_timeout_s` is ended (DEADLINE_EXCEEDED, `seed-reason: silent`) by
  a watch on the loop, which frees its session. The time a request spends
  inside the learner (inference paused by training, a checkpoint) never
  counts. No timer per message: one store before and one after each.
- Memory, by message size. Each session refuses a StepRequest larger than
  its observation spec and env count allow (protocol.max_step_request_bytes);
  the server's receive limit (protocol.max_request_bytes) makes gRPC refuse
  anything larger than the largest session's before buffering it whole.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import grpc
from google.protobuf.message import DecodeError
import numpy as np

from seed_rl.common.specs import ArraySpec, StepBatch
from seed_rl.grpc import codec
from seed_rl.grpc import errors
from seed_rl.grpc import protocol
from seed_rl.grpc import seed_rl_pb2
from seed_rl.grpc import validation
from seed_rl.grpc import wire_template
from seed_rl.grpc.sessions import Rejection, Session, SessionRegistry


async def _abort(context, rejection: Rejection) -> None:
  """Ends the call with `rejection`'s status (raises, as context.abort does)."""
  trailing = (
    ((protocol.REASON_METADATA_KEY, rejection.reason),)
    if rejection.reason is not None
    else ()
  )
  await context.abort(rejection.code, rejection.message, trailing)


def _parse(message_class, request):
  """Requests arrive as raw bytes (see `handlers`): bytes that are not a
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


def _step_response_wire(response) -> bytes:
  """Step's responses are built as wire bytes (wire_template.ResponseEncoder)."""
  if isinstance(response, bytes):
    return response
  return response.SerializeToString()


def handlers(servicer: "Servicer") -> grpc.GenericRpcHandler:
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
        response_serializer=_step_response_wire,
      ),
    },
  )


class _Completions:
  """Runs the handler's answers on the loop, waking it once per burst:
  `resolve` queues, and only the first call after a drain schedules one
  (call_soon_threadsafe writes to the loop's wake-up pipe). Inside
  `batched()`, the inference thread's answers to one batch are queued and
  handed over with at most one wake-up at its end: scheduled at the first
  answer, the loop could drain between two of them and need another (a
  write to the pipe, a GIL hand-off and a pass of the loop each)."""

  def __init__(self, loop: asyncio.AbstractEventLoop):
    self._loop = loop
    self._lock = threading.Lock()
    self._done: List[Tuple[Callable[..., None], Any, Any]] = []
    self._scheduled = False
    self._holder: Optional[int] = None  # the thread inside batched()

  def resolve(self, settle, result, error) -> None:
    """Calls `settle(result, error)` on the loop (from any thread)."""
    with self._lock:
      self._done.append((settle, result, error))
      if self._scheduled or self._holder == threading.get_ident():
        return  # a drain is scheduled, or will be when the batch ends
      self._scheduled = True
    self._loop.call_soon_threadsafe(self._drain)

  @contextlib.contextmanager
  def batched(self) -> Iterator[None]:
    """The calling thread's `resolve`s wait for the end of this block."""
    self._holder = threading.get_ident()
    try:
      yield
    finally:
      with self._lock:
        self._holder = None
        wake = bool(self._done) and not self._scheduled
        self._scheduled = self._scheduled or wake
      if wake:
        self._loop.call_soon_threadsafe(self._drain)

  def _drain(self) -> None:
    with self._lock:
      done, self._done = self._done, []
      self._scheduled = False
    for settle, result, error in done:
      try:
        settle(result, error)
      except Exception:  # the other answers must still go out
        logging.exception("answering a step failed")


class _InFlight:
  """A batch the learner is stepping: its sequence number and env count,
  and the futures of the calls that wait for its response (the one that
  sent it, and any resend of it on a new stream)."""

  __slots__ = ("sequence", "num_envs", "futures")

  def __init__(self, sequence: int, num_envs: int, future: asyncio.Future):
    self.sequence, self.num_envs, self.futures = sequence, num_envs, [future]


def _peer_host(peer: str) -> str:
  """'ipv4:10.0.0.5:41234' -> 'ipv4:10.0.0.5' (IPv6 alike): every call from
  one machine counts against the same per-peer cap; other transports (unix
  sockets) count as one peer each."""
  if peer.startswith(("ipv4:", "ipv6:")):
    return peer.rsplit(":", 1)[0]
  return peer.split(":", 1)[0]


class _Pending:
  """One call that has not sent its first message yet."""

  __slots__ = ("peer", "task", "evicted")

  def __init__(self, peer: str, task: Optional["asyncio.Task[Any]"]):
    self.peer = peer
    self.task = task
    self.evicted = False


class _Admission:
  """Pending calls by peer host, oldest first (event loop thread only).

  A new call over the per-peer cap evicts its own host's oldest pending
  call; over the total cap, the oldest pending call of the host with the
  most of them. The newest call always gets its chance to send a message:
  a restarting actor's Hello, pending for the milliseconds its message takes
  to arrive, is evicted only if its own host starts more than
  `max_per_peer` calls meanwhile, and never by other hosts' floods.
  """

  def __init__(self, max_pending: int, max_per_peer: int):
    if max_pending < 1 or max_per_peer < 1:
      raise ValueError(
        f"max_pending_rpcs {max_pending}, max_pending_rpcs_per_peer "
        f"{max_per_peer}: expected >= 1"
      )
    self.max_pending = max_pending
    self.max_per_peer = max_per_peer
    self.evicted = 0
    self._count = 0
    # Dicts keep insertion order: the first key is the host's oldest call.
    self._by_peer: Dict[str, Dict[_Pending, None]] = {}

  @property
  def pending(self) -> int:
    return self._count

  def enter(self, peer: str) -> _Pending:
    mine = self._by_peer.get(peer)
    if mine is not None and len(mine) >= self.max_per_peer:
      self._evict(peer)
    elif self._count >= self.max_pending:
      self._evict(max(self._by_peer, key=lambda p: len(self._by_peer[p])))
    ticket = _Pending(peer, asyncio.current_task())
    self._by_peer.setdefault(peer, {})[ticket] = None
    self._count += 1
    return ticket

  def leave(self, ticket: _Pending) -> None:
    calls = self._by_peer.get(ticket.peer)
    if calls is None or ticket not in calls:
      return  # evicted, or already left
    del calls[ticket]
    self._count -= 1
    if not calls:
      del self._by_peer[ticket.peer]

  def _evict(self, peer: str) -> None:
    oldest = next(iter(self._by_peer[peer]))
    self.leave(oldest)
    oldest.evicted = True
    self.evicted += 1
    if oldest.task is not None:
      oldest.task.cancel()  # its _first_request ends the call


class Servicer:
  """Implements the SeedRL service on top of a SessionRegistry and a handler.

  Must be created on the event loop's thread (it binds to that loop).
  """

  def __init__(  # noqa: PLR0913 (the service's settings, each a flag)
    self,
    observation_spec: ArraySpec,
    action_spec: ArraySpec,
    registry: SessionRegistry,
    handler,
    limits: validation.ValueLimits,
    first_message_timeout_s: Optional[float],
    max_workers: int,
    silent_timeout_s: Optional[float] = None,
    max_pending_rpcs: int = 256,
    max_pending_rpcs_per_peer: int = 128,
  ):
    self.registry = registry
    self.first_message_timeout_s = first_message_timeout_s
    self.silent_timeout_s = silent_timeout_s
    self.idle_rpcs_cancelled = 0
    self.silent_streams_ended = 0
    self.busy_refusals = 0
    # Actor ids told that training is over (by Hello or on their stream):
    # a finished learner stays up until all its actors know (learner_main).
    self.told_finished: Set[int] = set()
    self._max_workers = max_workers
    self._admission = _Admission(max_pending_rpcs, max_pending_rpcs_per_peer)
    # Step streams past their first message (a Hello is refused when they
    # fill max_workers, but is answered at once and not counted).
    self._established = 0
    # Step streams past their first message, by session id (silence watch).
    self._live: Dict[str, Session] = {}
    self._limits = limits
    self._observation_spec = observation_spec
    self._action_spec = action_spec
    self._action_shape = tuple(action_spec.shape)
    self._action_dtype = np.dtype(action_spec.dtype)
    self._responses = wire_template.ResponseEncoder()
    self._handler = handler
    self._on_disconnect = getattr(handler, "on_disconnect", None)
    self._hello_specs = (
      codec.encode_spec(observation_spec),
      codec.encode_spec(action_spec),
    )
    self._loop = asyncio.get_running_loop()
    self._submit: Optional[Callable[..., None]] = getattr(
      handler, "submit", None
    )
    self._completions = _Completions(self._loop)
    set_notify_scope = getattr(handler, "set_notify_scope", None)
    if set_notify_scope is not None:
      set_notify_scope(self._completions.batched)
    # actor id -> the batch of that actor the learner is stepping.
    self._in_flight: Dict[int, _InFlight] = {}
    # Blocking handlers only: one thread per call in flight, as before.
    self._pool = (
      None
      if self._submit is not None
      else concurrent.futures.ThreadPoolExecutor(
        max_workers, thread_name_prefix="seed_rl_grpc"
      )
    )
    self._silence_timer: Optional[asyncio.TimerHandle] = None
    if silent_timeout_s:
      if silent_timeout_s <= 0:
        raise ValueError(f"silent_timeout_s: {silent_timeout_s}, expected > 0")
      self._silence_period = min(1.0, silent_timeout_s / 4)
      self._silence_timer = self._loop.call_later(
        self._silence_period, self._watch_silence
      )

  @property
  def pending_rpcs_evicted(self) -> int:
    return self._admission.evicted

  @property
  def pending_rpcs(self) -> int:
    return self._admission.pending

  def close(self) -> None:
    """Stops the silence watch (call on the loop, or with the loop stopped)."""
    if self._silence_timer is not None:
      self._silence_timer.cancel()
      self._silence_timer = None
    if self._pool is not None:
      self._pool.shutdown(wait=False, cancel_futures=True)

  def _watch_silence(self) -> None:
    """Ends the Step streams whose actor has had the turn for longer than
    silent_timeout_s (on the loop, every `_silence_period`)."""
    deadline = self.silent_timeout_s
    assert deadline is not None
    now = time.monotonic()
    for session in list(self._live.values()):
      since = session.waiting_since
      if since is None or now - since <= deadline or session.silenced:
        continue
      session.silenced = True
      self.silent_streams_ended += 1
      logging.warning(
        "ending the Step stream of %s: it sent nothing for %.1f s after "
        "the learner's last response (deadline %g s: a hung env or host, "
        "or a client holding the actor id); the id is free again",
        session.describe(),
        now - since,
        deadline,
      )
      session.task.cancel()  # Step turns this into DEADLINE_EXCEEDED
    self._silence_timer = self._loop.call_later(
      self._silence_period, self._watch_silence
    )

  def _busy(self) -> Optional[Rejection]:
    """The refusal of a call when every established slot is taken."""
    if self._established < self._max_workers:
      return None
    self.busy_refusals += 1
    return Rejection(
      grpc.StatusCode.RESOURCE_EXHAUSTED,
      f"the learner serves at most {self._max_workers} Step streams at "
      f"once (max_workers) and all are in use; retry, or start the learner "
      f"with more max_workers than actors",
      protocol.REASON_BUSY,
    )

  # ---------------------------------------------------------------- Hello --
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

  async def _first_request(self, requests, context):
    """The call's first message, or None if it ended before sending one.

    Until then the call is pending (see _Admission): one that sends nothing
    within the first-message timeout is cancelled (CANCELLED), and one
    evicted by newer calls is refused (RESOURCE_EXHAUSTED, learner-busy)."""
    ticket = self._admission.enter(_peer_host(context.peer()))
    outcome = None
    try:
      return await asyncio.wait_for(
        requests.__anext__(), self.first_message_timeout_s
      )
    except StopAsyncIteration:
      return None
    except asyncio.TimeoutError:
      outcome = "idle"
    except asyncio.CancelledError:
      if not ticket.evicted:
        raise  # the server is stopping, or the client went away
      outcome = "evicted"
    finally:
      self._admission.leave(ticket)
      task = asyncio.current_task()
      if ticket.evicted and task is not None and task.cancelling():
        task.uncancel()
    if outcome == "idle":
      self.idle_rpcs_cancelled += 1
      logging.warning(
        "cancelled %d RPC(s) that sent no message within %g s of "
        "starting (idle clients holding RPC slots)",
        1,
        self.first_message_timeout_s,
      )
      await context.abort(
        grpc.StatusCode.CANCELLED,
        f"no message within {self.first_message_timeout_s} s of the call's "
        "start",
      )
    await _abort(
      context,
      Rejection(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"too many calls that have not sent a message yet (at most "
        f"{self._admission.max_per_peer} per host, "
        f"{self._admission.max_pending} in all); this one, the oldest of "
        f"its host's, made way for a newer call; retry",
        protocol.REASON_BUSY,
      ),
    )

  async def Hello(self, request_iterator, context):
    request = await self._first_request(request_iterator.__aiter__(), context)
    if request is None:
      await _abort(
        context,
        Rejection(
          grpc.StatusCode.INVALID_ARGUMENT,
          "request: Hello sent no HelloRequest (or not within "
          f"{self.first_message_timeout_s} s)",
        ),
      )
    try:
      request = _parse(seed_rl_pb2.HelloRequest, request)
      if getattr(self._handler, "finished", False):
        # An actor that was away (reconnecting) when training ended learns
        # it here and exits, instead of waiting for a learner that is gone.
        self.told_finished.add(request.actor_id)
        raise Rejection(
          grpc.StatusCode.UNAVAILABLE,
          "training is over; the learner is exiting",
          protocol.REASON_LEARNER_FINISHED,
        )
      busy = self._busy()
      if busy is not None:
        raise busy
      self._check_hello(request)
      session = self.registry.open(request.actor_id, request.num_envs)
    except Rejection as rejection:
      await _abort(context, rejection)
    session.max_request_bytes = protocol.max_step_request_bytes(
      self._observation_spec, session.num_envs
    )
    response = seed_rl_pb2.HelloResponse(
      protocol_version=protocol.PROTOCOL_VERSION,
      first_env_id=session.first_env_id,
      num_envs=session.num_envs,
      num_envs_total=self.registry.num_envs_total,
      session_id=session.session_id,
    )
    response.observation_spec.CopyFrom(self._hello_specs[0])
    response.action_spec.CopyFrom(self._hello_specs[1])
    return response

  # ----------------------------------------------------------------- Step --
  def _actions_to_response(self, actions, k: int) -> bytes:
    """The StepResponse's wire bytes (gRPC sends bytes as they are)."""
    actions = np.asarray(actions)
    expected = (k,) + self._action_shape
    if actions.shape != expected or not np.can_cast(
      actions.dtype, self._action_dtype, "same_kind"
    ):
      raise RuntimeError(
        f"handler.step returned actions {actions.dtype.name} "
        f"{list(actions.shape)}, expected {self._action_dtype.name} "
        f"{list(expected)}"
      )
    return self._responses.encode(
      np.ascontiguousarray(actions, self._action_dtype)
    )

  def _check(self, request, session: Session):
    """(sequence, batch, None) of a request, or (sequence, None, cached
    response) of a batch resent after a reconnect (exactly once: it was
    already stored and acted on)."""
    if session.superseded:
      raise Rejection(
        grpc.StatusCode.ABORTED,
        f"session {session.session_id!r} of {session.describe()} was "
        f"superseded by a newer Hello for actor {session.actor_id} (a "
        f"restarted actor, or two actors started with the same --actor_id); "
        f"this stream is closed",
        protocol.REASON_SUPERSEDED,
      )
    size = (
      len(request)
      if isinstance(request, (bytes, bytearray))
      else request.ByteSize()
    )
    if size > session.max_request_bytes:
      raise Rejection(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"request: {size:,} bytes, more than the {session.max_request_bytes:,}"
        f" a StepRequest of {session.num_envs} envs of observations "
        f"{self._observation_spec.dtype} {list(self._observation_spec.shape)}"
        f" can take",
      )
    fast = wire_template.check_wire(
      request, self._observation_spec, session, self._limits
    )
    if fast is not None:
      sequence, batch = fast
      cached = self.registry.replay(session.actor_id, sequence)
      return sequence, (batch if cached is None else None), cached
    wire, request = request, _parse(seed_rl_pb2.StepRequest, request)
    cached = self.registry.replay(session.actor_id, request.sequence)
    if cached is not None:
      return request.sequence, None, cached
    try:
      batch = validation.check_step_request(
        request,
        self._observation_spec,
        session,
        self.registry.num_envs_total,
        self.registry.owner_of,
        self._limits,
      )
    except ValueError as e:
      raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
    wire_template.remember(wire, batch, session)
    return request.sequence, batch, None

  def _answer(self, batch: StepBatch, session: Session, sequence: int):
    """A future of the response to `batch`. A client whose stream failed
    resends its batch on a new one with the same `sequence`; if the learner
    is still stepping it, the resend waits for that step's response rather
    than being stepped again (its rewards and episode ends would count
    twice), and a batch stepped after its stream went away is still
    registered as served (`_settle`), so a later resend is answered from
    the cache."""
    future = self._loop.create_future()
    actor_id = session.actor_id
    in_flight = self._in_flight.get(actor_id) if sequence else None
    if in_flight is not None and in_flight.sequence == sequence:
      in_flight.futures.append(future)
      return future
    in_flight = _InFlight(sequence, session.num_envs, future)
    if sequence:
      self._in_flight[actor_id] = in_flight
    settle = functools.partial(self._settle, actor_id, in_flight)
    if self._pool is not None:
      self._pool.submit(self._step_blocking, batch, settle)
    else:
      assert self._submit is not None
      self._submit(batch, functools.partial(self._completions.resolve, settle))
    return future

  def _step_blocking(self, batch: StepBatch, settle) -> None:
    """A blocking handler's step, on a pool thread."""
    try:
      result, error = self._handler.step(batch), None
    except Exception as e:
      result, error = None, e
    self._completions.resolve(settle, result, error)

  def _settle(self, actor_id: int, in_flight: _InFlight, actions, error):
    """On the loop, once the handler answered: registers the response as
    served and hands it (or the handler's error) to every call still
    waiting; a call whose stream went away meanwhile was cancelled."""
    if self._in_flight.get(actor_id) is in_flight:
      del self._in_flight[actor_id]
    if error is None:
      try:
        response = self._actions_to_response(actions, in_flight.num_envs)
      except Exception as e:
        error = e
      else:
        self.registry.served(actor_id, in_flight.sequence, response)
    for future in in_flight.futures:
      if future.done():
        continue
      if error is None:
        future.set_result(response)
      else:
        future.set_exception(error)

  async def _serve_one(self, request, session: Session):
    """Returns the response to one request; Rejection ends the stream."""
    sequence, batch, cached = self._check(request, session)
    if cached is not None:
      return cached
    try:
      response = await self._answer(batch, session, sequence)
    except ValueError as e:  # the handler refused the batch's contents
      raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
    except errors.ServiceStopping as e:
      if e.finished:
        self.told_finished.add(session.actor_id)
      raise Rejection(
        grpc.StatusCode.UNAVAILABLE,
        str(e),
        protocol.REASON_LEARNER_FINISHED if e.finished else None,
      ) from None
    except Exception as e:
      logging.exception("Step stream of %s failed", session.describe())
      raise Rejection(
        grpc.StatusCode.INTERNAL, f"learner error: {type(e).__name__}: {e}"
      ) from None
    return response

  async def Step(self, request_iterator, context):
    metadata = dict(context.invocation_metadata())
    try:
      session = self.registry.claim(metadata.get(protocol.SESSION_METADATA_KEY))
    except Rejection as rejection:
      await _abort(context, rejection)
    established = False
    try:
      requests = request_iterator.__aiter__()
      request = await self._first_request(requests, context)
      if request is None:
        return
      busy = self._busy()
      if busy is not None:
        await _abort(context, busy)
      self._established += 1
      established = True
      session.task = asyncio.current_task()
      self._live[session.session_id] = session
      while request is not None:
        try:
          response = await self._serve_one(request, session)
        except Rejection as rejection:
          await _abort(context, rejection)
        yield response
        # The response is sent: the actor has the turn (see _watch_silence).
        session.waiting_since = time.monotonic()
        try:
          request = await requests.__anext__()
        except StopAsyncIteration:
          request = None
        except asyncio.CancelledError:
          if not session.silenced:
            raise
          task = asyncio.current_task()
          if task is not None:
            task.uncancel()
          await _abort(
            context,
            Rejection(
              grpc.StatusCode.DEADLINE_EXCEEDED,
              f"{session.describe()} sent nothing for "
              f"{self.silent_timeout_s:g} s after the learner's last "
              f"response; the learner ended this stream (a hung env or "
              f"host?); say Hello again to go on",
              protocol.REASON_SILENT,
            ),
          )
        session.waiting_since = None
    finally:
      # Runs when the client closes, cancels or fails, on abort, and on
      # server stop (the call's task is cancelled, which closes this).
      if established:
        self._established -= 1
        self._live.pop(session.session_id, None)
      self._release(session)

  def _release(self, session: Session) -> None:
    if self.registry.release(session) and self._on_disconnect is not None:
      try:
        self._on_disconnect(session.first_env_id, session.num_envs)
      except Exception:
        logging.exception(
          "on_disconnect(%d, %d) failed",
          session.first_env_id,
          session.num_envs,
        )
