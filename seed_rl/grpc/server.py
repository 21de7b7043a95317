"""The learner's gRPC server: Hello handshakes and one Step stream per actor.

The server runs gRPC's asyncio API on one event loop thread of its own
(servicer.py has the handlers): an open stream costs a coroutine, not a
thread, and a message costs one wake-up of that loop instead of hand-offs
between a polling thread and a worker thread per stream. Measured with
benchmarks/learner_capacity.py: this is what lets one learner process hold
1,024 actor streams at a flat CPU cost per agent step. A bad message, or a
handler error, ends only the stream it arrived on. A call that sends no
message within `first_message_timeout_s` is cancelled, and calls that have
not sent a message yet are capped apart from the established ones (per peer
host and in all, the oldest evicted first): idle clients cannot keep a
restarting actor out. A stream whose actor sends nothing for
`silent_timeout_s` after the learner's last response is ended, which frees
its actor id. The receive limit follows from the specs and env count.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Optional

import grpc

from seed_rl.common.specs import ArraySpec
from seed_rl.grpc import protocol
from seed_rl.grpc import validation
from seed_rl.grpc.security import ServerSecurity
from seed_rl.grpc.servicer import Servicer, handlers
from seed_rl.grpc.sessions import SessionRegistry


# A Hello or Step call holds an RPC slot from its start; one whose first
# message has not arrived after this long is cancelled. Actors send theirs at
# once (a Step stream's first batch follows Hello by one env reset).
FIRST_MESSAGE_TIMEOUT_S = 10.0
# A Step stream whose actor sends nothing for this long after the learner's
# last response is ended and its actor id freed. It must exceed the slowest
# env step an actor may take (its --env_step_timeout_s, after which the
# actor exits by itself). A batched step of the bundled envs, auto-reset
# included, takes milliseconds; 30 s leaves room for a loaded machine and
# slower custom envs, and frees a squatted actor id well within a minute.
SILENT_TIMEOUT_S = 30.0
# Calls that have not sent their first message yet, per peer host and in
# all (at least; see LearnerServer): beyond them the oldest is evicted.
MAX_PENDING_RPCS = 256
MAX_PENDING_RPCS_PER_PEER = 128
# gRPC's own concurrency limit leaves this many slots beyond the established
# and pending calls for calls being refused (no token, evicted) meanwhile.
_TRANSIENT_RPCS = 128


class LearnerServer:
  """Serves actors: validates their specs and streams, calls the handler.

  At most `max_workers` established calls (open Step streams past their
  first message) are served at once: that bounds the number of actors, and
  a Hello or stream beyond it fails fast with RESOURCE_EXHAUSTED
  (`seed-reason: learner-busy`; actors retry). Calls that
  have not sent their first message yet are *pending*, counted apart: at
  most `max_pending_rpcs_per_peer` per peer host and `max_pending_rpcs` in
  all, a new call beyond either evicting the oldest pending call (of its own
  host, or of the host with the most), and each cancelled after
  `first_message_timeout_s`. gRPC's limit is the sum of both plus a margin,
  so pending calls never take an established call's capacity.
  """

  def __init__(  # noqa: PLR0913 (the server's settings, each a flag)
    self,
    address: str,
    observation_spec: ArraySpec,
    action_spec: ArraySpec,
    num_envs: int,
    handler,
    max_workers: int = 64,
    security: Optional[ServerSecurity] = None,
    limits: Optional[validation.ValueLimits] = None,
    silent_timeout_s: Optional[float] = SILENT_TIMEOUT_S,
    first_message_timeout_s: Optional[float] = FIRST_MESSAGE_TIMEOUT_S,
    max_pending_rpcs: Optional[int] = None,
    max_pending_rpcs_per_peer: Optional[int] = None,
  ):
    """Creates the server (call start() to serve).

    Args:
      address: 'host:port'; port 0 picks a free port.
      observation_spec: per-env observation spec on the wire (the env's).
      action_spec: per-env action spec.
      num_envs: total environments over all actors.
      handler: has `step(StepBatch) -> actions [K, *action_spec.shape]`,
        optionally `submit(StepBatch, on_done)` (non-blocking: calls
        `on_done(actions, error)` from any thread; preferred when present)
        and `on_disconnect(first_env_id, num_envs)`, called once when a
        Step stream ends, unless its actor reconnected first (a newer Hello
        superseded the session, so its envs are still served).
      max_workers: maximum established calls (Step streams past their first
        message); Hellos are refused while they are all taken.
      security: TLS credentials and the actors' token (see security.py);
        None serves plaintext without a token (loopback use).
      limits: largest rewards / float observations accepted (default
        validation.ValueLimits()).
      silent_timeout_s: end a Step stream (DEADLINE_EXCEEDED, `seed-reason:
        silent`) whose actor sent nothing for this long after the learner's
        last response, freeing its actor id; must exceed the actors'
        slowest env step (--env_step_timeout_s). None disables.
      first_message_timeout_s: cancel a Hello or Step call that sent no
        message for this long after it started (an idle or malicious
        client holding an RPC slot); None disables.
      max_pending_rpcs: most calls without their first message yet, in all;
        default max(MAX_PENDING_RPCS, max_workers).
      max_pending_rpcs_per_peer: the same per peer host (all actors of a
        machine share one); default half of max_pending_rpcs, at least
        MAX_PENDING_RPCS_PER_PEER.
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
    if silent_timeout_s is not None and silent_timeout_s <= 0:
      raise ValueError(
        f"silent_timeout_s: {silent_timeout_s}, expected > 0 or None"
      )
    if max_pending_rpcs is None:
      max_pending_rpcs = max(MAX_PENDING_RPCS, max_workers)
    if max_pending_rpcs_per_peer is None:
      max_pending_rpcs_per_peer = max(
        MAX_PENDING_RPCS_PER_PEER, max_pending_rpcs // 2
      )
    self._address = address
    self._stopped = threading.Event()
    self._max_rpcs = max_workers + max_pending_rpcs + _TRANSIENT_RPCS
    self._max_receive_bytes = protocol.max_request_bytes(
      observation_spec, action_spec, num_envs
    )
    self._security = security or ServerSecurity()
    self._servicer_args = (
      observation_spec,
      action_spec,
      SessionRegistry(num_envs),
      handler,
      limits or validation.ValueLimits(),
      first_message_timeout_s,
      max_workers,
      silent_timeout_s,
      max_pending_rpcs,
      max_pending_rpcs_per_peer,
    )
    self._servicer: Optional[Servicer] = None
    self._loop: Optional[asyncio.AbstractEventLoop] = None
    self._thread: Optional[threading.Thread] = None
    self._server: Optional[grpc.aio.Server] = None
    self._port: Optional[int] = None

  @property
  def port(self) -> Optional[int]:
    return self._port

  @property
  def max_receive_bytes(self) -> int:
    """gRPC's receive limit: the largest StepRequest or HelloRequest."""
    return self._max_receive_bytes

  @property
  def idle_rpcs_cancelled(self) -> int:
    """RPCs cancelled for sending nothing within first_message_timeout_s."""
    return self._servicer.idle_rpcs_cancelled if self._servicer else 0

  @property
  def pending_rpcs_evicted(self) -> int:
    """Calls without a first message evicted by newer ones (caps full)."""
    return self._servicer.pending_rpcs_evicted if self._servicer else 0

  @property
  def silent_streams_ended(self) -> int:
    """Step streams ended for silence (silent_timeout_s)."""
    return self._servicer.silent_streams_ended if self._servicer else 0

  def wait_until_told_finished(self, num_actors: int, timeout_s: float) -> int:
    """After training ended (the handler's `finished` is set): keeps serving
    until `num_actors` distinct actor ids were told so, on their stream or
    at a Hello, or `timeout_s` passed; returns how many were told.

    An actor that was reconnecting when training ended (a backoff pause,
    a learner restart) is not on a stream to hear it; it hears it at its
    next Hello, at most the client's backoff cap (5 s) later."""
    deadline = time.monotonic() + timeout_s
    while True:
      told = len(self._servicer.told_finished) if self._servicer else 0
      if told >= num_actors or time.monotonic() >= deadline:
        return told
      time.sleep(0.05)

  def start(self) -> int:
    """Binds and starts serving on the event loop thread; returns the port."""
    if self._thread is not None:
      raise RuntimeError("LearnerServer.start() called twice")
    ready = threading.Event()
    outcome: dict = {}
    loop = asyncio.new_event_loop()

    def serve():
      asyncio.set_event_loop(loop)
      try:
        outcome["port"] = loop.run_until_complete(self._start_on_loop())
      except BaseException as e:
        outcome["error"] = e
        ready.set()
        loop.close()
        return
      ready.set()
      loop.run_forever()
      loop.close()

    self._loop = loop
    self._thread = threading.Thread(target=serve, name="grpc-aio", daemon=True)
    self._thread.start()
    ready.wait()
    if "error" in outcome:
      self._thread.join()
      raise outcome["error"]
    self._port = outcome["port"]
    logging.info(
      "Learner server listening on %s (port %d)", self._address, self._port
    )
    return self._port

  async def _start_on_loop(self) -> int:
    self._servicer = Servicer(*self._servicer_args)
    server = grpc.aio.server(
      options=protocol.server_options(self._max_receive_bytes),
      maximum_concurrent_rpcs=self._max_rpcs,
      interceptors=self._security.interceptors(),
    )
    server.add_generic_rpc_handlers((handlers(self._servicer),))
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
    await server.start()
    self._server = server
    return port

  def stop(self, grace: Optional[float] = None) -> None:
    """Stops serving; open streams are cancelled after `grace` seconds."""
    if self._stopped.is_set():
      return
    self._stopped.set()
    loop, server = self._loop, self._server
    if loop is None or server is None or self._thread is None:
      return
    asyncio.run_coroutine_threadsafe(
      self._stop_on_loop(server, grace), loop
    ).result()
    if self._servicer is not None:
      loop.call_soon_threadsafe(self._servicer.close)
    loop.call_soon_threadsafe(loop.stop)
    self._thread.join(timeout=10)

  @staticmethod
  async def _stop_on_loop(server: grpc.aio.Server, grace) -> None:
    await server.stop(grace)
    # The cancelled calls' handlers finish within a few loop iterations
    # (their `finally` releases sessions); let them before the loop stops,
    # or they are destroyed pending.
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if others:
      await asyncio.wait(others, timeout=1.0)

  def wait_for_termination(self, timeout: Optional[float] = None) -> bool:
    """Blocks until the server stops (or `timeout`); True if it stopped."""
    if self._thread is None:
      raise RuntimeError("LearnerServer.wait_for_termination() before start()")
    self._thread.join(timeout)
    return not self._thread.is_alive()

  def __enter__(self) -> "LearnerServer":
    self.start()
    return self

  def __exit__(self, *exc) -> None:
    self.stop()
