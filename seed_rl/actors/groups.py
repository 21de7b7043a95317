"""Env groups in flight: one actor process, G streams, latency overlapped.

An actor that steps K envs in lock step waits one round trip to the learner
per batched step; on a link with 20 ms of latency that wait, not the envs,
sets its rate. With `env_groups = G` the K envs are split into G groups of
K/G, each with its own env batch, its own stream and its own thread: while
one group's observations travel to the learner and its actions come back,
the others step their envs (Sample Factory's double-buffered sampling).

Group g of actor I says Hello as actor I*G + g with K/G envs, so it owns
the global env ids [I*K + g*K/G, I*K + (g+1)*K/G) and seeds them as the
ungrouped actor would: env i of actor I still has id I*K + i and seed
seed + I*K + i. The learner sees G streams per actor; its `--env_groups G`
sizes its RPC slots and the count of streams it tells a finished run.

The groups share one stop: the first failure (or the caller's stop_event)
stops them all, every client and env is closed, and the failure is raised
in the calling thread.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, List, Optional

from seed_rl.actors.batched_env import BatchedEnv
from seed_rl.actors.watchdog import StepWatchdog
from seed_rl.grpc.client import LearnerFinished

# How long the calling thread waits between checks of the groups.
_POLL_S = 0.2
# How long the other groups may take to hear a finished run from the learner.
_TOLD_WAIT_S = 10.0
# How long closed groups get to notice and return before their envs close.
_JOIN_S = 5.0


def check_groups(num_envs: int, env_groups: int) -> int:
  """K/G; raises ValueError unless G >= 1 divides K."""
  if env_groups < 1:
    raise ValueError(f"env_groups must be >= 1, got {env_groups}")
  if num_envs % env_groups:
    raise ValueError(
      f"num_envs {num_envs} must be a multiple of env_groups {env_groups} "
      f"(each group steps num_envs / env_groups envs); try "
      f"num_envs {env_groups * max(1, round(num_envs / env_groups))}"
    )
  return num_envs // env_groups


def run_groups(
  actor_id: int,
  num_envs: int,
  env_groups: int,
  make_env: Callable[[int, int], BatchedEnv],
  make_client: Callable[[int, BatchedEnv], Any],
  loop: Callable[[BatchedEnv, Any, int, threading.Event, StepWatchdog], None],
  stop_event: Optional[threading.Event],
  env_step_timeout_s: Optional[float],
) -> None:
  """Runs `loop` for each of the G groups in its own thread until all end.

  Every env is built first; then each group's thread connects its own
  client (the G Hellos in parallel) and steps at once, so no stream waits
  for the other groups before its first message.

  Args:
    actor_id, num_envs, env_groups: I, K and G.
    make_env: (num_envs, group's actor id) -> the group's BatchedEnv.
    make_client: (group's actor id, env) -> a connected client.
    loop: (env, client, group's actor id, halt, watchdog) steps until
      `halt` is set or its own limit; raises on failure.
    stop_event: the caller's stop; checked by the calling thread, and set
      before the groups are closed (a second signal must not break that).
    env_step_timeout_s: each group's env step limit (StepWatchdog).

  Raises:
    The first group's failure, after every group has been stopped and every
    client and env closed; LearnerFinished when the learner finished the run.
  """
  per_group = check_groups(num_envs, env_groups)
  groups = _Groups(actor_id, env_groups, make_client, loop)
  try:
    for g in range(env_groups):
      groups.envs.append(make_env(per_group, groups.group_actor_id(g)))
      groups.watchdogs.append(
        StepWatchdog(env_step_timeout_s, f"actor {actor_id} group {g}")
      )
    groups.start()
    groups.wait(stop_event)
  finally:
    if stop_event is not None:
      stop_event.set()
    groups.close()
  if groups.errors:
    raise groups.errors[0]
  if groups.finished:
    raise groups.finished[0]


class _Groups:
  """The G groups' envs, clients, watchdogs and threads, and how they ended."""

  def __init__(
    self,
    actor_id: int,
    env_groups: int,
    make_client: Callable[[int, BatchedEnv], Any],
    loop: Callable[..., None],
  ):
    self.actor_id, self.env_groups = actor_id, env_groups
    self.make_client, self.loop = make_client, loop
    self.halt = threading.Event()
    self.envs: List[BatchedEnv] = []
    self.clients: List[Any] = [None] * env_groups
    self.watchdogs: List[StepWatchdog] = []
    self.threads: List[threading.Thread] = []
    self.errors: List[BaseException] = []
    self.finished: List[LearnerFinished] = []
    self._lock = threading.Lock()

  def group_actor_id(self, g: int) -> int:
    return self.actor_id * self.env_groups + g

  def start(self) -> None:
    for g in range(self.env_groups):
      thread = threading.Thread(
        target=self._run,
        args=(g,),
        name=f"env-group-{g}",
        daemon=True,  # a group blocked in a dead env must not hold the exit
      )
      self.threads.append(thread)
      thread.start()

  def _run(self, g: int) -> None:
    env, group_actor_id = self.envs[g], self.group_actor_id(g)
    try:
      with self._lock:
        if self.halt.is_set():
          return
      client = self.make_client(group_actor_id, env)
      with self._lock:
        self.clients[g] = client
        closing = self.halt.is_set()
      if closing:
        client.close()  # close() ran before this client existed
        return
      self.loop(env, client, group_actor_id, self.halt, self.watchdogs[g])
    except LearnerFinished as e:
      # The learner tells each stream on its next message: the other groups
      # hear it too, and it counts them as told.
      self.finished.append(e)
    except BaseException as e:  # noqa: BLE001 (re-raised by the caller)
      self._failed(g, e)
    # A group that reached its max_steps lets the others reach theirs.

  def _failed(self, g: int, e: BaseException) -> None:
    if self.halt.is_set() or self.finished:
      # What closing the groups, or the learner's shutdown after it told a
      # group the run is over, does to the others: not the run's failure.
      logging.info("actor %d group %d ended: %s", self.actor_id, g, e)
      return
    self.errors.append(e)
    self.halt.set()  # a failure ends every group

  def wait(self, stop_event: Optional[threading.Event]) -> None:
    """Until a group fails, `stop_event`, every group ended, or a finished
    run was told to one group _TOLD_WAIT_S ago."""
    first_told: Optional[float] = None
    while not self.halt.wait(_POLL_S):
      if stop_event is not None and stop_event.is_set():
        return
      if not any(t.is_alive() for t in self.threads):
        return  # every group reached max_steps, or was told
      if self.finished:
        first_told = first_told or time.monotonic()
        if time.monotonic() - first_told > _TOLD_WAIT_S:
          return  # the learner is gone before telling the rest

  def close(self) -> None:
    """Clients first, so groups waiting on the learner return; then envs
    whose group has returned (closing an env mid-step could crash it)."""
    with self._lock:
      self.halt.set()
      clients = list(self.clients)
    for client in clients:
      if client is not None:
        _quietly(client.close, "client")
    deadline = time.monotonic() + _JOIN_S
    for thread in self.threads:
      thread.join(max(0.0, deadline - time.monotonic()))
    for watchdog in self.watchdogs:
      watchdog.close()
    for g, env in enumerate(self.envs):
      if g < len(self.threads) and self.threads[g].is_alive():
        logging.warning(
          "actor %d group %d still in its env step after %.0f s; its env "
          "is left to the process exit",
          self.actor_id,
          g,
          _JOIN_S,
        )
        continue
      _quietly(env.close, "env")


def _quietly(close: Callable[[], None], what: str) -> None:
  try:
    close()
  except Exception as e:  # noqa: BLE001 (closing after a failure)
    logging.warning("closing a %s of an env group failed: %s", what, e)
