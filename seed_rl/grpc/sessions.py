"""Which actor owns which environments: the learner's table of live sessions.

A session is created by Hello and lives until its Step stream ends or a newer
Hello for the same actor id supersedes it. Actor I with K envs owns global env
ids [I*K, (I+1)*K); two live sessions of different actors never overlap.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
import uuid
from typing import Any, Dict, Optional, Tuple

import grpc
import numpy as np

from seed_rl.grpc import protocol


class Rejection(Exception):
  """A request the learner refuses: a gRPC status code and a message.

  `reason` (a protocol.REASON_* string or None) travels in trailing metadata
  so the client can tell cases that share a status code apart.
  """

  def __init__(
    self, code: grpc.StatusCode, message: str, reason: Optional[str] = None
  ):
    super().__init__(message)
    self.code = code
    self.message = message
    self.reason = reason


@dataclasses.dataclass
class Session:
  """One actor's registration.

  `superseded` is written under the registry lock and read without it by the
  stream thread, once per message; a stale read only delays the abort by one
  message.
  """

  session_id: str
  actor_id: int
  first_env_id: int
  num_envs: int
  superseded: bool = False
  streaming: bool = False
  created: float = dataclasses.field(default_factory=time.monotonic)
  # The largest StepRequest this session may send (set at Hello from the
  # observation spec and num_envs; protocol.max_step_request_bytes).
  max_request_bytes: int = protocol.MAX_MESSAGE_BYTES
  # Written and read on the server's event loop only (servicer.py):
  # when the learner finished sending its last response, i.e. since when the
  # actor has the turn; None before the first message and while a request is
  # inside the learner (inference paused by training or a checkpoint is not
  # the actor's silence). The silence watch ends the stream's call (`task`)
  # when the actor keeps the turn past the deadline (`silenced`).
  waiting_since: Optional[float] = None
  task: Any = dataclasses.field(default=None, repr=False, compare=False)
  silenced: bool = False
  # Wire bytes of int32 env ids in the order actors normally send them, so the
  # usual case is checked with one bytes comparison.
  env_ids_bytes: bytes = dataclasses.field(init=False, repr=False)
  # What a well-formed StepRequest of this session looks like, built by
  # validation.py on the session's first message so the next ones are checked
  # with a few comparisons (validation owns its contents).
  expected_layout: Any = dataclasses.field(
    default=None, init=False, repr=False, compare=False
  )
  # The bytes of its usual StepRequest, learned from one that passed
  # (wire_template.py owns its contents); later ones are read without a
  # protobuf parse when they match.
  wire_template: Any = dataclasses.field(
    default=None, init=False, repr=False, compare=False
  )

  def __post_init__(self):
    self.env_ids_bytes = np.arange(
      self.first_env_id, self.end_env_id, dtype="<i4"
    ).tobytes()

  @property
  def end_env_id(self) -> int:
    return self.first_env_id + self.num_envs

  def describe(self) -> str:
    return (
      f"actor {self.actor_id} owning {self.first_env_id}..{self.end_env_id - 1}"
    )


# A Hello whose Step stream never opened holds its env range this long.
HELLO_TTL_S = 30.0


class SessionRegistry:
  """Thread-safe table of live sessions, keyed by actor id."""

  def __init__(self, num_envs_total: int):
    self.num_envs_total = num_envs_total
    # Session ids carry the server instance so that, after a learner restart,
    # an old id is recognised as stale (ABORTED, reconnect) rather than bogus.
    self._instance = uuid.uuid4().hex[:12]
    self._counter = itertools.count()
    self._lock = threading.Lock()
    self._by_actor: Dict[int, Session] = {}
    # actor id -> (sequence, response) of its last served batch: survives a
    # reconnect, so a resent batch is answered again, not stored twice.
    self._last_served: Dict[int, Tuple[int, Any]] = {}

  def open(self, actor_id: int, num_envs: int) -> Session:
    """Registers an actor after Hello.

    A Hello for an actor id whose Step stream is alive is refused
    (ALREADY_EXISTS): nobody can take over a live actor's environments. A
    previous session of that id without a stream (a Hello whose stream never
    opened) is superseded; other actors' stream-less sessions older than
    HELLO_TTL_S no longer hold their env ranges. A dead actor's stream is
    released when its connection closes, or by gRPC keepalive within about
    a minute when its host vanished, and its restarted process (which
    retries Hello on ALREADY_EXISTS) gets its ids back.

    Raises:
      Rejection: bad actor id / env count, a range outside the learner's
        environments, one that overlaps another live actor's range, or a
        live stream for this actor id.
    """
    if actor_id < 0:
      raise Rejection(
        grpc.StatusCode.INVALID_ARGUMENT, f"actor_id: {actor_id}, expected >= 0"
      )
    if num_envs < 1:
      raise Rejection(
        grpc.StatusCode.INVALID_ARGUMENT, f"num_envs: {num_envs}, expected >= 1"
      )
    first = actor_id * num_envs
    if first + num_envs > self.num_envs_total:
      raise Rejection(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"actor {actor_id} with num_envs {num_envs} would own env ids "
        f"{first}..{first + num_envs - 1}, outside the learner's "
        f"{self.num_envs_total} environments 0..{self.num_envs_total - 1}; "
        f"start the learner with more environments or lower --actor_id",
      )
    with self._lock:
      now = time.monotonic()
      for stale in [
        s
        for s in self._by_actor.values()
        if not s.streaming and now - s.created > HELLO_TTL_S
      ]:
        del self._by_actor[stale.actor_id]
      live = self._by_actor.get(actor_id)
      if live is not None and live.streaming:
        raise Rejection(
          grpc.StatusCode.ALREADY_EXISTS,
          f"actor {actor_id} already has a live Step stream "
          f"({live.describe()}); two actors with the same --actor_id, or a "
          "restarted actor whose old connection is not closed yet (retry: "
          "it is released when the connection closes or keepalive fails)",
        )
      for other in self._by_actor.values():
        if (
          other.actor_id != actor_id
          and first < other.end_env_id
          and other.first_env_id < first + num_envs
        ):
          raise Rejection(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"actor {actor_id} with num_envs {num_envs} would own env ids "
            f"{first}..{first + num_envs - 1}, overlapping live "
            f"{other.describe()}; every actor must use the same num_envs",
          )
      session = Session(
        session_id=f"{self._instance}-{actor_id}-{next(self._counter)}",
        actor_id=actor_id,
        first_env_id=first,
        num_envs=num_envs,
      )
      old = self._by_actor.get(actor_id)
      if old is not None:
        old.superseded = True
      self._by_actor[actor_id] = session
    return session

  def claim(self, session_id: Optional[str]) -> Session:
    """Returns the session a new Step stream belongs to and marks it streaming.

    Raises:
      Rejection: missing/unknown session (INVALID_ARGUMENT), a session from a
        previous learner instance (ABORTED, learner-restarted), or one that
        already has a stream or was superseded.
    """
    if not session_id:
      raise Rejection(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"session: missing '{protocol.SESSION_METADATA_KEY}' metadata on the "
        f"Step call; call Hello first and send the session id it returns",
      )
    with self._lock:
      for session in self._by_actor.values():
        if session.session_id == session_id:
          if session.streaming:
            raise Rejection(
              grpc.StatusCode.INVALID_ARGUMENT,
              f"session: {session_id!r} ({session.describe()}) already has "
              f"an open Step stream; one stream per Hello",
            )
          session.streaming = True
          return session
    if not session_id.startswith(self._instance + "-"):
      if session_id.count("-") == 2:
        raise Rejection(
          grpc.StatusCode.ABORTED,
          f"session: {session_id!r} was issued by a previous learner "
          f"instance (the learner restarted); call Hello again",
          protocol.REASON_LEARNER_RESTARTED,
        )
    raise Rejection(
      grpc.StatusCode.INVALID_ARGUMENT,
      f"session: unknown session id {session_id!r} (superseded, already "
      f"closed, or never issued by this learner); call Hello again",
    )

  def release(self, session: Session) -> bool:
    """Forgets `session` when its stream ends.

    Returns:
      False if it had been superseded: its envs then belong to the newer
      session and must not be reported as disconnected.
    """
    with self._lock:
      if self._by_actor.get(session.actor_id) is session:
        del self._by_actor[session.actor_id]
        return True
      return False

  def replay(self, actor_id: int, sequence: int) -> Optional[Any]:
    """The response already given to this actor's batch `sequence`, if any."""
    if not sequence:
      return None
    with self._lock:
      last = self._last_served.get(actor_id)
    return last[1] if last is not None and last[0] == sequence else None

  def served(self, actor_id: int, sequence: int, response: Any) -> None:
    if sequence:
      with self._lock:
        self._last_served[actor_id] = (sequence, response)

  def owner_of(self, env_id: int) -> Optional[Session]:
    """The live session owning `env_id`, if any (error path only: O(actors))."""
    with self._lock:
      for session in self._by_actor.values():
        if session.first_env_id <= env_id < session.end_env_id:
          return session
    return None
