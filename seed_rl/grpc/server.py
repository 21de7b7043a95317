"""The learner's gRPC server: Hello handshakes and one Step stream per actor.

The server runs gRPC's asyncio API on one event loop thread of its own
(servicer.py has the handlers): an open stream costs a coroutine, not a
thread, and a message costs one wake-up of that loop instead of hand-offs
between a polling thread and a worker thread per stream. Measured with
benchmarks/learner_capacity.py: this is what lets one learner process hold
1,024 actor streams at a flat CPU cost per agent step. A bad message, or a
handler error, ends only the stream it arrived on. A call that sends no
message within `first_message_timeout_s` is cancelled: idle clients cannot
keep the server's RPC slots full.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Optional, Protocol

import grpc
import numpy as np

from seed_rl.common.specs import ArraySpec, StepBatch
from seed_rl.grpc import protocol
from seed_rl.grpc import validation
from seed_rl.grpc.security import ServerSecurity
from seed_rl.grpc.servicer import Servicer, handlers
from seed_rl.grpc.sessions import SessionRegistry


# A Hello or Step call holds an RPC slot from its start; one whose first
# message has not arrived after this long is cancelled. Actors send theirs at
# once (a Step stream's first batch follows Hello by one env reset).
FIRST_MESSAGE_TIMEOUT_S = 10.0


class StepHandler(Protocol):
  """What the server calls; `on_disconnect(first_env_id, num_envs)` and
  `submit(batch, on_done)` optional (see servicer.py)."""

  def step(self, batch: StepBatch) -> np.ndarray:
    """Returns actions [K, *action_shape] for `batch` (blocking, thread-safe)."""


class LearnerServer:
  """Serves actors: validates their specs and streams, calls the handler.

  Each open Step stream (and a Hello in progress) takes one of `max_workers`
  concurrent RPC slots, so `max_workers` bounds the number of actors; RPCs
  beyond it fail fast with RESOURCE_EXHAUSTED instead of hanging. An RPC that
  sends no message within `first_message_timeout_s` is cancelled and its
  slot freed (actors retry a RESOURCE_EXHAUSTED Hello meanwhile).
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
      handler: has `step(StepBatch) -> actions [K, *action_spec.shape]`,
        optionally `submit(StepBatch, on_done)` (non-blocking: calls
        `on_done(actions, error)` from any thread; preferred when present)
        and `on_disconnect(first_env_id, num_envs)`, called once when a
        Step stream ends, unless its actor reconnected first (a newer Hello
        superseded the session, so its envs are still served).
      max_workers: maximum concurrent RPCs (Step streams plus Hellos).
      security: TLS credentials and the actors' token (see security.py);
        None serves plaintext without a token (loopback use).
      limits: largest rewards / float observations accepted (default
        validation.ValueLimits()).
      silent_timeout_s: log an actor whose open stream sent nothing for
        this long (a hung environment or host); None disables.
      first_message_timeout_s: cancel a Hello or Step call that sent no
        message for this long after it started (an idle or malicious
        client holding an RPC slot); None disables.
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
    self._first_message_timeout_s = first_message_timeout_s
    self._stopped = threading.Event()
    self._max_workers = max_workers
    self._security = security or ServerSecurity()
    self._servicer_args = (
      observation_spec,
      action_spec,
      SessionRegistry(num_envs),
      handler,
      limits or validation.ValueLimits(),
      first_message_timeout_s,
      max_workers,
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
  def idle_rpcs_cancelled(self) -> int:
    """RPCs cancelled for sending nothing within first_message_timeout_s."""
    return self._servicer.idle_rpcs_cancelled if self._servicer else 0

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
      except BaseException as e:  # pylint: disable=broad-except
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
    if self._silent_timeout_s:
      threading.Thread(
        target=self._watch_silent, daemon=True, name="silent-actors"
      ).start()
    logging.info(
      "Learner server listening on %s (port %d)", self._address, self._port
    )
    return self._port

  async def _start_on_loop(self) -> int:
    self._servicer = Servicer(*self._servicer_args)
    server = grpc.aio.server(
      options=protocol.server_options(),
      maximum_concurrent_rpcs=self._max_workers,
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

  def _watch_silent(self) -> None:
    timeout = self._silent_timeout_s
    assert timeout is not None and self._servicer is not None
    while not self._stopped.wait(min(5.0, timeout / 2)):
      for session in self._servicer.registry.silent(timeout):
        logging.warning(
          "%s has sent nothing for more than %.0f s on its open stream "
          "(a hung environment, or its host is gone)",
          session.describe(),
          timeout,
        )

  def stop(self, grace: Optional[float] = None) -> None:
    """Stops serving; open streams are cancelled after `grace` seconds."""
    if self._stopped.is_set():
      return
    self._stopped.set()
    loop, server = self._loop, self._server
    if loop is None or server is None or self._thread is None:
      return
    asyncio.run_coroutine_threadsafe(server.stop(grace), loop).result()
    if self._servicer is not None:
      self._servicer.close()
    loop.call_soon_threadsafe(loop.stop)
    self._thread.join(timeout=10)

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
