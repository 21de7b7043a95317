"""The actor loop: step K envs, stream observations, apply learner actions.

No TensorFlow here: all inference happens on the learner (SEED RL). Per
iteration the actor sends one StepBatch (the outcome of the previous actions)
and receives the next actions for all K envs.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional

import numpy as np

from seed_rl.actors import groups
from seed_rl.actors.watchdog import StepWatchdog
from seed_rl.actors.batched_env import BatchedEnv
from seed_rl.actors.batched_env import EpisodeTracker
from seed_rl.actors.throughput import ActorSummary
from seed_rl.actors.throughput import Throughput
from seed_rl.common.specs import ArraySpec
from seed_rl.common.specs import StepBatch
from seed_rl.grpc.client import ActorClient

EnvFactory = Callable[[int, int], BatchedEnv]  # (num_envs, seed) -> env
ClientFactory = Callable[..., Any]  # ActorClient's constructor signature


class EnvConfigError(Exception):
  """The environment could not be created: a configuration mistake (unknown
  env id, bad kwargs, a factory that cannot be imported), not a crash.
  Restarting the actor cannot fix it."""


def check_actions(actions: Any, spec: ArraySpec, num_envs: int) -> None:
  """Raises ValueError unless `actions` fit `spec` for `num_envs` envs.

  Checks type, dtype and shape, the range [0, num_values) of discrete
  actions and finiteness of continuous ones (bounds are enforced by clipping
  in the env, see EnvRunner).
  """
  if not isinstance(actions, np.ndarray):
    raise ValueError(
      f"learner actions: expected a numpy array, got {type(actions).__name__}"
    )
  spec.check_batch(actions, num_envs, "learner actions")
  if spec.is_discrete:
    if actions.size and (actions.min() < 0 or actions.max() >= spec.num_values):
      bad = actions[(actions < 0) | (actions >= spec.num_values)]
      raise ValueError(
        f"learner actions: values {bad.tolist()[:8]} outside "
        f"[0, {spec.num_values}) of the discrete action spec"
      )
  elif np.issubdtype(actions.dtype, np.floating):
    if not np.isfinite(actions).all():
      raise ValueError(
        "learner actions: non-finite values in continuous "
        f"actions {actions.tolist()[:4]}"
      )


def run_actor(  # noqa: PLR0913 (the entry point's collaborators and limits)
  server_address: str,
  actor_id: int,
  num_envs: int,
  env_factory: EnvFactory,
  seed: int,
  max_steps: Optional[int] = None,
  stop_event: Optional[threading.Event] = None,
  client_factory: Optional[ClientFactory] = None,
  log_interval_s: float = 30.0,
  stats_path: Optional[str] = None,
  env_step_timeout_s: Optional[float] = None,
  env_groups: int = 1,
) -> ActorSummary:
  """Runs one actor until `max_steps`, `stop_event` or an error.

  `env_step_timeout_s`: an env step that runs longer ends the process (see
  watchdog.py); None waits forever.

  Args:
    server_address: learner 'host:port', or 'file:PATH' (ActorClient).
    actor_id: I; the actor owns global env ids [I*K, (I+1)*K).
    num_envs: K envs stepped together.
    env_factory: (num_envs, seed) -> BatchedEnv, e.g. a domain's
      create_environment. Called with seed + I*K so that env i of actor I is
      seeded with seed + I*K + i (distinct across the run, reproducible).
    seed: base seed of the run.
    max_steps: batched steps to run (each steps all K envs); None = forever.
    stop_event: checked before each step; set it to stop cleanly.
    client_factory: ActorClient-compatible constructor (address, actor_id,
      num_envs, observation_spec, action_spec); default the gRPC ActorClient.
    log_interval_s: how often to log throughput.
    stats_path: if set, throughput stats are also written there (JSON) at
      every log interval.
    env_groups: G; the K envs step as G groups of K/G, each with its own
      stream and thread, so that one group steps while the others wait
      for their actions (groups.py). 1: all K in lock step.

  Returns:
    An ActorSummary.

  Raises:
    ValueError: the learner sent actions that do not fit the action spec.
    Whatever the client raises (SpecMismatchError, ProtocolError) or the env
    raises (EnvWorkerError); envs and client are closed first.
  """
  if num_envs < 1:
    raise ValueError(f"num_envs must be >= 1, got {num_envs}")
  if actor_id < 0:
    raise ValueError(f"actor_id must be >= 0, got {actor_id}")
  if max_steps is not None and max_steps < 0:
    raise ValueError(f"max_steps must be >= 0 or None, got {max_steps}")
  per_group = groups.check_groups(num_envs, env_groups)
  client_factory = client_factory or ActorClient
  stats = Throughput(actor_id, num_envs, log_interval_s, stats_path)

  def make_env(n: int, env_actor_id: int) -> BatchedEnv:
    try:
      env = env_factory(n, seed + env_actor_id * n)
    except Exception as e:
      raise EnvConfigError(f"{type(e).__name__}: {e}") from e
    if env.num_envs != n:
      env.close()
      raise ValueError(f"env_factory built {env.num_envs} envs, asked for {n}")
    return env

  def make_client(client_actor_id: int, env: BatchedEnv):
    client = client_factory(
      server_address,
      client_actor_id,
      env.num_envs,
      env.observation_spec,
      env.action_spec,
    )
    try:
      client.connect()
    except BaseException:
      client.close()
      raise
    return client

  def loop(env, client, client_actor_id, halt, watchdog) -> None:
    _loop(env, client, client_actor_id, max_steps, halt, stats, watchdog)

  try:
    if env_groups > 1:
      groups.run_groups(
        actor_id,
        num_envs,
        env_groups,
        make_env,
        make_client,
        loop,
        stop_event,
        env_step_timeout_s,
      )
    else:
      _run_alone(
        actor_id,
        per_group,
        make_env,
        make_client,
        loop,
        stop_event,
        env_step_timeout_s,
      )
  finally:
    # The totals as the actor ends, however it ends (SIGTERM included).
    stats.write_file(time.monotonic())
  return stats.summary()


def _run_alone(
  actor_id, num_envs, make_env, make_client, loop, stop_event, timeout_s
) -> None:
  """One group: the K envs in lock step, in the calling thread."""
  env = make_env(num_envs, actor_id)
  client = None
  try:
    client = make_client(actor_id, env)
    watchdog = StepWatchdog(timeout_s, f"actor {actor_id}")
    try:
      loop(env, client, actor_id, stop_event or threading.Event(), watchdog)
    finally:
      watchdog.close()
  finally:
    try:
      if client is not None:
        client.close()
    finally:
      env.close()


def _loop(
  env: BatchedEnv,
  client,
  actor_id: int,
  max_steps: Optional[int],
  stop_event: threading.Event,
  stats: "Throughput",
  watchdog: StepWatchdog,
) -> None:
  """Steps the envs with the learner's actions until `max_steps` or
  `stop_event`; every iteration sends the outcome of the previous actions.
  `actor_id` is the one the client said Hello with (a group's own)."""
  k = env.num_envs
  env_ids = _env_ids(client, actor_id, k)
  # From OS entropy, not the run seed: a restarted actor must get new ids so
  # the learner resets the state of these envs.
  run_ids = np.random.default_rng().integers(
    np.iinfo(np.int64).min,
    np.iinfo(np.int64).max,
    size=k,
    dtype=np.int64,
    endpoint=True,
  )
  batch = StepBatch(
    env_ids=env_ids,
    run_ids=run_ids,
    reward=np.zeros(k, np.float32),
    terminated=np.zeros(k, bool),
    truncated=np.zeros(k, bool),
    observation=env.reset(),
    final_observation=env.observation_spec.zeros(0),
    episode_return=np.zeros(0, np.float32),
    episode_length=np.zeros(0, np.int32),
  )
  tracker = EpisodeTracker(k)
  stats.begin()
  steps = 0
  while max_steps is None or steps < max_steps:
    if stop_event.is_set():
      break
    t0 = time.perf_counter()
    actions = client.step(batch)
    t1 = time.perf_counter()
    check_actions(actions, env.action_spec, k)
    with watchdog.step():
      result = env.step(actions)
    env_s = time.perf_counter() - t1
    episode_return, episode_length = tracker.update(
      result.reward, result.terminated, result.truncated
    )
    steps += 1
    stats.add_step(k, t1 - t0, env_s, episode_return)
    batch = StepBatch(
      env_ids=env_ids,
      run_ids=run_ids,
      reward=result.reward,
      terminated=result.terminated,
      truncated=result.truncated,
      observation=result.observation,
      final_observation=result.final_observation,
      episode_return=episode_return,
      episode_length=episode_length,
      life_lost=_any_or_none(result.life_lost),
    )


def _any_or_none(flags: Optional[np.ndarray]) -> Optional[np.ndarray]:
  """`flags` when any is set, else None (the field is then not sent)."""
  return flags if flags is not None and flags.any() else None


def _env_ids(client, actor_id: int, k: int) -> np.ndarray:
  """int32 [K]: the global env ids the learner assigned to this actor."""
  first_env_id = int(client.first_env_id)
  if first_env_id != actor_id * k:
    logging.warning(
      "actor %d: learner assigned env ids from %d, expected %d "
      "(env seeds assume the latter)",
      actor_id,
      first_env_id,
      actor_id * k,
    )
  return np.arange(first_env_id, first_env_id + k, dtype=np.int32)
