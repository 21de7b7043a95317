"""The learner runtime: batched inference for every env, unrolls, training.

One process serves all actors. gRPC stream threads hand each actor's
StepBatch to a DynamicBatcher; its thread (`_infer`) updates per-env state,
runs one `agent.act` for the whole batch, assembles unrolls and hands
completed ones to the agent (which may block: back-pressure on the actors).
A training thread loops `agent.train_step()` concurrently, so inference
always uses the latest weights; the gap is logged as `perf/policy_lag`.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from typing import Any, Callable, ContextManager, List, Optional, Tuple

import numpy as np

from seed_rl.common import agent_api
from seed_rl.common import episode_stats
from seed_rl.common import frames as frames_lib
from seed_rl.common import memory
from seed_rl.common import metrics as metrics_lib
from seed_rl.common import profiling
from seed_rl.common.agent_api import ActInputs, Agent
from seed_rl.common.batcher import BatcherStopped, DynamicBatcher
from seed_rl.common.batches import (
  MergeBuffer,
  concat_inputs,
  merge_batches,
  split_actions,
)
from seed_rl.common.env_state import EnvIndex, EnvStateTable, env_index
from seed_rl.common.errors import ServiceStopping
from seed_rl.common.learner_config import (  # noqa: F401 (re-exported)
  LearnerConfig,
  configure_tf_threads,
)
from seed_rl.common.specs import ArraySpec, StepBatch
from seed_rl.common.reporting import Counters, Reporter, StopRules
from seed_rl.common.sync_gate import SyncGate
from seed_rl.common.throttle import Throttle
from seed_rl.common.unroll_store import StepRecord, UnrollStore


# Sections a Profiler passed to the Learner counts (thread CPU seconds):
# the inference thread's whole batch ('act', the agent's forward pass, is
# part of it) and the training thread's steps.
PROFILED_SECTIONS = ("inference", "act", "training")
# At most one warning per this many seconds about actors whose episode
# statistics disagree with the learner's own count (the count of them is
# the `integrity/episode_stat_mismatches` scalar).
MISMATCH_LOG_INTERVAL_S = 10.0


class Learner:
  """Serves inference to actors (as the gRPC handler) and trains `agent`.

  Env ids [0, num_train_envs) train; [num_train_envs, num_envs) are
  evaluation envs: the agent acts deterministically there, their episodes are
  logged under `eval/` and they produce no unrolls. `profiler` (benchmarks
  only) counts CPU seconds per PROFILED_SECTIONS and ticks once per progress
  line; the default records nothing.
  """

  def __init__(
    self,
    agent: Agent,
    wire_observation_spec: ArraySpec,
    action_spec: ArraySpec,
    num_train_envs: int,
    num_eval_envs: int = 0,
    config: Optional[LearnerConfig] = None,
    checkpointer=None,
    summary_writer=None,
    profiler: profiling.Profiler = profiling.NULL_PROFILER,
  ):
    """Per-env state and unroll blocks for every env, the episode counts,
    the reporter and stop rules, and the inference batcher (whose thread
    starts here)."""
    self.agent = agent
    self.config = config or LearnerConfig()
    self.num_train_envs = num_train_envs
    self.num_envs = num_train_envs + num_eval_envs
    self.action_spec = action_spec
    self.state = EnvStateTable(
      self.num_envs,
      wire_observation_spec,
      action_spec,
      agent.initial_core_state,
      self.config.frame_stack,
    )
    if self.state.push_kind == "numpy":
      metrics_lib.log(
        "[learner] frame stacks are pushed with NumPy: the compiled push "
        "(seed_rl.common._frame_push) was not built (no C compiler or "
        "Python headers at install) or SEED_RL_NATIVE=0 turned it off; "
        "same results, more CPU per step"
      )
    # Frame-stacked observations go into unrolls as frames, each once (a
    # k-fold saving of the unrolls' memory and of what training is handed);
    # `_record_step` rebuilds stacks for agents that train on stacks.
    self._frame_depth = (
      self.config.frame_stack if self.state.stack is not None else 1
    )
    self.unrolls = UnrollStore(
      self.num_envs,
      agent.unroll_length + 1,
      agent.unroll_overlap,
      frame_depth=self._frame_depth,
    )
    self._stacks_buffer: Optional[np.ndarray] = None
    # Agents built for unrolls of frames of this depth take them as they
    # are; others get stacks (frames_lib.stacked_unroll).
    self._agent_takes_frames = (
      self._frame_depth > 1
      and agent.trains_on_frames
      and agent.observation_spec.frame_stack == self._frame_depth
    )
    self.profiler = profiler
    self._checkpointer = checkpointer
    self._metrics = metrics_lib.ScalarAccumulator()
    self._metrics_lock = threading.Lock()
    self._stop = threading.Event()
    self._train_error: Optional[BaseException] = None
    self.env_steps = checkpointer.env_steps if checkpointer else 0
    # Episode statistics come from what the learner itself received (see
    # episode_stats.py): the actor-reported ones are only cross-checked.
    # After a resume, actors may still be mid-episode: an env's first
    # message then starts nothing.
    self.episodes = metrics_lib.EpisodeTracker()
    self.episode_stats = episode_stats.EpisodeStats(
      self.num_envs, first_message_starts=self.env_steps == 0
    )
    # Ended episodes whose actor-reported return or length disagreed with
    # the learner's count, and ended episodes not counted (start not seen).
    self.episode_stat_mismatches = 0
    self.uncounted_episodes = 0
    self._mismatch_log = Throttle(MISMATCH_LOG_INTERVAL_S)
    self._merge_buffer = MergeBuffer()
    self._act_seconds = 0.0
    self._infer_seconds = 0.0
    self._samples_trained = 0.0  # transitions trained on (with reuse)
    # Unfinished unrolls of envs whose actor restarted (see _infer).
    self.discarded_partial_unrolls = 0
    # Set when training is over for good (not a restart): actors then exit.
    self.finished = False
    self.finish_on_stop_event = True
    # A learner process (learner_main) freezes its start-up objects out of
    # the cyclic GC once the first update is done (memory.freeze_long_lived);
    # off for learners that share a process, e.g. in tests.
    self.freeze_gc_after_first_update = False
    # Console, TensorBoard and tuning-metric output; when to stop.
    self.reporter = Reporter(
      self.config, self.episodes, summary_writer, profiler
    )
    self.stop_rules = StopRules(self.config, self.episodes)
    self._sync = self._make_sync_gate()
    self._batcher = self._make_batcher()

  def _make_sync_gate(self) -> Optional[SyncGate]:
    if not self.config.synchronous:
      return None
    if self.agent.batch_unrolls is None:
      raise ValueError(
        f"LearnerConfig.synchronous: {type(self.agent).__name__} trains "
        "from replay, not from a queue of batches; synchronous training is "
        "for the queue-fed agents (a2c, ppo, vtrace)"
      )
    return SyncGate(self.agent.batch_unrolls)

  def _make_batcher(self) -> DynamicBatcher:
    """Inference once `inference_batch_size` envs wait (or the oldest has
    waited `batch_timeout_ms`); a run takes every pending request up to
    `max_inference_batch_size` envs, so under load batches grow (cheaper
    per env) instead of queueing."""
    cfg, num_envs = self.config, self.num_envs
    batch_size = min(cfg.inference_batch_size or num_envs, num_envs)
    return DynamicBatcher(
      self._infer,
      batch_size,
      cfg.batch_timeout_ms / 1000.0,
      size_fn=lambda b: b.num_envs,
      max_batch_size=max(
        batch_size, min(cfg.max_inference_batch_size or num_envs, num_envs)
      ),
    )

  # ----------------------------------------------------------- inference --
  def step(self, batch: StepBatch) -> np.ndarray:
    """gRPC handler entry point (any stream thread); blocks for actions."""
    try:
      return self._batcher(batch)
    except BatcherStopped:
      raise self._stopping_error() from None

  def submit(self, batch: StepBatch, on_done) -> None:
    """Non-blocking `step` for the asyncio server: queues `batch` and calls
    `on_done(actions, error)` from the inference thread once it ran."""

    def done(actions, error):
      if isinstance(error, BatcherStopped):
        error = self._stopping_error()
      on_done(actions, error)

    try:
      self._batcher.submit(batch, done)
    except BatcherStopped:
      raise self._stopping_error() from None

  def set_notify_scope(self, scope: Callable[[], ContextManager[Any]]) -> None:
    """`scope()` is entered around each inference batch's `submit`
    callbacks (DynamicBatcher.notify_scope)."""
    self._batcher.notify_scope = scope

  def _stopping_error(self) -> ServiceStopping:
    if self.finished:
      return ServiceStopping("training is over", finished=True)
    return ServiceStopping("the learner is shutting down")

  def on_disconnect(self, first_env_id: int, num_envs: int) -> None:
    """An actor's stream ended: its partial unrolls stay until a new run id
    shows up (a reconnecting actor with the same run ids just continues)."""
    del first_env_id, num_envs

  def _infer(self, batches: List[StepBatch]) -> List[np.ndarray]:
    """The batcher's callback: one inference call for every env of
    `batches`; returns each batch's actions [K_i, *action_shape]."""
    if self._sync:  # a whole batch pending: act with the weights it makes
      self._sync.wait()
    t0 = time.perf_counter()
    with self.profiler.section("inference"):
      b = merge_batches(batches, self._merge_buffer)
      size = b.num_envs
      rows = env_index(b.env_ids)
      restarted = self._handle_restarts(b.env_ids, rows, b.run_ids)
      self._count_episodes(b, rows, restarted)
      if b.life_lost is not None and self.config.terminal_on_life_loss:
        b = self._life_losses_as_ends(b)
      inputs, stored = self._act_inputs(b, rows, restarted)
      out = self._act(inputs)
      action = np.asarray(out.action[:size], self.action_spec.dtype)
      self.state.scatter(rows, tuple(c[:size] for c in out.core_state), action)
      self._record_step(b, rows, inputs, stored, out, action)
    self._infer_seconds += time.perf_counter() - t0
    if len(batches) == 1:
      return [action]
    return split_actions(action, batches)

  def _handle_restarts(
    self, env_ids: np.ndarray, rows: EnvIndex, run_ids: np.ndarray
  ) -> Optional[np.ndarray]:
    """Resets the state and drops the partial unrolls of envs whose actor
    restarted (new run ids); returns bool [B]: those envs, or None when
    none did (`rows`: `env_ids` as an EnvIndex)."""
    restarted = self.state.refresh_run_ids(rows, run_ids)
    if restarted is None:
      return None
    ids = env_ids[restarted]
    self.state.reset(ids)
    discarded = self.unrolls.reset(ids)
    if discarded:
      # The restarted actor's previous process's unfinished unrolls are
      # never trained on.
      self.discarded_partial_unrolls += discarded
      metrics_lib.log(
        f"[learner] envs {int(ids.min())}..{int(ids.max())} restarted "
        f"(new run ids): discarded {discarded} partial unrolls"
      )
    return restarted

  def _life_losses_as_ends(self, b: StepBatch) -> StepBatch:
    """`b` as the agent sees it under `terminal_on_life_loss`: a training
    env's lost life terminates its agent episode (no value bootstrapped
    across it; stacked frames, core state and previous action start over),
    as Baselines' and CleanRL's EpisodicLifeEnv do. Called after the
    episodes were counted, which go on over the whole game; eval envs play
    whole games like seed_rl.evaluate."""
    assert b.life_lost is not None
    ends = b.life_lost & (b.env_ids < self.num_train_envs)
    if not np.count_nonzero(ends):
      return dataclasses.replace(b, life_lost=None)
    return dataclasses.replace(
      b, terminated=b.terminated | ends, life_lost=None
    )

  def _act_inputs(
    self, b: StepBatch, rows: EnvIndex, restarted: Optional[np.ndarray]
  ) -> Tuple[ActInputs, np.ndarray]:
    """The agent's inputs: B rows, one per env of `b` (episode starts reset
    first), then one per truncated env valuing its final observation; and
    the B observations the unrolls store: their frames with frame stacking,
    else the stacks (where they are already in the unroll slots, those
    slots: `UnrollStore.append` then copies nothing)."""
    st = self.state
    final = self._final_inputs(b)  # before the ended episodes' state resets
    new_episode = b.terminated | b.truncated
    # count_nonzero: ~4x cheaper than .any() on these small arrays.
    if np.count_nonzero(new_episode):  # restarted envs were reset already
      ended = new_episode if restarted is None else new_episode & ~restarted
      st.reset(b.env_ids[ended])
    if restarted is not None:
      new_episode |= restarted
    core, prev_action = st.gather(rows)
    slots = None
    if isinstance(rows, slice) and rows.stop <= self.num_train_envs:
      # Written straight into the unroll: no copy of them later.
      slots = self.unrolls.observation_slots(rows)
    if self._frame_depth > 1:
      # One actor's stacks are read where the table holds them.
      observation = st.stacked(
        rows, b.observation, out=self._stacks_out(b.num_envs), view=True
      )
      stored = b.observation
      if slots is not None and slots.dtype == stored.dtype:
        np.copyto(slots, stored)
        stored = slots
    else:
      observation = st.stacked(rows, b.observation, out=slots)
      stored = observation
      if observation is slots:
        # An agent writing into its inputs would change the unroll.
        observation = observation.view()
        observation.flags.writeable = False
    inputs = ActInputs(
      env_ids=b.env_ids,
      observation=observation,
      prev_action=prev_action,
      reward=b.reward,
      done=new_episode,
      core_state=core,
      eval_mask=b.env_ids >= self.num_train_envs,
    )
    return (inputs if final is None else concat_inputs(inputs, final)), stored

  def _stacks_out(self, size: int) -> np.ndarray:
    """[size, *stacked_shape] for this step's inference stacks: the buffer
    of earlier steps when nothing holds it any more (a fresh ~1 MB array
    per step costs page faults), else a new buffer."""
    buffer = self._stacks_buffer
    # References: the attribute, `buffer` and getrefcount's argument.
    if buffer is None or buffer.shape[0] < size or sys.getrefcount(buffer) > 3:
      spec = self.state.stacked_spec
      buffer = self._stacks_buffer = np.empty(
        (max(size, 0 if buffer is None else buffer.shape[0]),) + spec.shape,
        spec.dtype,
      )
    return buffer[:size]

  def _final_inputs(self, b: StepBatch) -> Optional[ActInputs]:
    """Rows valuing the final observation of each truncated episode with the
    state of the episode it ends (None when no episode was truncated)."""
    if not np.count_nonzero(b.truncated):
      return None
    final_ids = b.env_ids[b.truncated]
    core, prev_action = self.state.gather(final_ids)
    return ActInputs(
      env_ids=final_ids,
      observation=self.state.stacked(
        final_ids, b.final_observation, commit=False
      ),
      prev_action=prev_action,
      reward=b.reward[b.truncated],
      done=np.zeros(final_ids.size, bool),
      core_state=core,
      eval_mask=final_ids >= self.num_train_envs,
    )

  def _act(self, inputs: ActInputs) -> agent_api.ActOutputs:
    t = time.perf_counter()
    with self.profiler.section("act"):
      out = self.agent.act(inputs)
    self._act_seconds += time.perf_counter() - t
    return out

  def _count_episodes(
    self, b: StepBatch, rows: EnvIndex, restarted: Optional[np.ndarray]
  ) -> None:
    """Adds this step of every env of `b` to its running episode; the
    episodes that ended (and whose start the learner saw) go to the
    statistics, and the actor's report of them is cross-checked."""
    finished = self.episode_stats.update(
      rows, b.reward, b.terminated | b.truncated, restarted
    )
    if finished is None:
      return
    self.uncounted_episodes += finished.uncounted
    if not finished.size:
      return
    evaluated = finished.env_ids >= self.num_train_envs
    num_eval = np.count_nonzero(evaluated)
    if num_eval < finished.size:
      train = ~evaluated
      self.episodes.add(
        finished.returns[train], finished.lengths[train], "episode"
      )
    if num_eval:
      self.episodes.add(
        finished.returns[evaluated], finished.lengths[evaluated], "eval"
      )
    mismatched = episode_stats.cross_check(
      finished, b.episode_return, b.episode_length
    )
    count = int(np.count_nonzero(mismatched))
    if count:
      self.episode_stat_mismatches += count
      if self._mismatch_log.ready():
        self._log_mismatch(b, finished, mismatched)

  def _log_mismatch(
    self,
    b: StepBatch,
    finished: episode_stats.Finished,
    mismatched: np.ndarray,
  ) -> None:
    i = int(np.flatnonzero(mismatched)[0])
    j = int(finished.report_index[i])
    if j < b.episode_return.shape[0] and j < b.episode_length.shape[0]:
      theirs = (
        f"return {float(b.episode_return[j]):g} over "
        f"{int(b.episode_length[j])} steps"
      )
    else:
      theirs = "no matching statistics"
    metrics_lib.log(
      f"[learner] WARNING: env {int(finished.env_ids[i])}'s actor reported "
      f"{theirs} for the episode that just ended; the learner counted "
      f"return {float(finished.returns[i]):g} over "
      f"{int(finished.lengths[i])} steps from the steps it received and "
      f"uses that ({self.episode_stat_mismatches} mismatched episode "
      f"report(s) so far; logged at most every "
      f"{MISMATCH_LOG_INTERVAL_S:g} s)"
    )

  def _record_step(
    self,
    b: StepBatch,
    rows: EnvIndex,
    inputs: ActInputs,
    stored: np.ndarray,
    out: agent_api.ActOutputs,
    action: np.ndarray,
  ) -> None:
    """Counts the training envs' steps and appends them to their unrolls
    (the first B rows of `inputs` and `out` are the envs of `b`, at `rows`;
    `stored`: their observations as the unrolls keep them); completed unrolls
    go to the agent."""
    size = b.num_envs
    evaluated = inputs.eval_mask[:size]
    num_train = size - np.count_nonzero(evaluated)
    self.env_steps += num_train
    if not num_train:
      return
    value = np.asarray(out.value, np.float32)
    bootstrap_value = np.zeros(size, np.float32)
    if value.shape[0] > size:  # rows valuing truncated final observations
      bootstrap_value[b.truncated] = value[size:]
    step = StepRecord(
      observation=stored,
      reward=b.reward,
      terminated=b.terminated,
      truncated=b.truncated,
      bootstrap_value=bootstrap_value,
      prev_action=inputs.prev_action[:size],
      action=action,
      value=value[:size],
      policy_version=self._policy_versions(size),
      core_state=tuple(c[:size] for c in inputs.core_state),
      extras={k: np.asarray(x)[:size] for k, x in out.extras.items()},
    )
    if num_train < size:
      train = ~evaluated
      rows, step = b.env_ids[train], step.rows(train)
    # One Unroll per actor's block: several completing together are not
    # concatenated (a copy of all of them).
    stacks = not self._agent_takes_frames
    for completed in self.unrolls.append_each(rows, step):
      if self._sync:
        self._sync.added(completed.batch_size)
      self.agent.add_unrolls(
        frames_lib.stacked_unroll(completed) if stacks else completed
      )

  @property
  def batches_run(self) -> int:
    return self._batcher.batches_run

  def _policy_version(self) -> int:
    return int(self.agent.step_counter.numpy())

  # The learner step recorded with every inference step (None: not read
  # yet). The training thread refreshes it after each update: a read of the
  # tf.Variable on the inference thread costs 60-120 us of eager overhead,
  # as much as the rest of a 1-env batch.
  _acting_version: Optional[int] = None

  def _note_policy_version(self) -> None:
    self._acting_version = self._policy_version()

  _versions = np.zeros(0, np.int64)  # _policy_versions' last rows

  def _policy_versions(self, size: int) -> np.ndarray:
    """int64 [size] of the recorded policy version: a view of a buffer
    refilled only when the version changes or `size` outgrows it (unroll
    appends copy it)."""
    version = self._acting_version
    if version is None:
      version = self._acting_version = self._policy_version()
    rows = self._versions
    if rows.shape[0] < size or (size and rows[0] != version):
      rows = self._versions = np.full(
        max(size, rows.shape[0]), version, np.int64
      )
    return rows[:size]

  # ------------------------------------------------------------ training --
  def _train_loop(self) -> None:
    last_ckpt = time.monotonic()
    try:
      while not self._stop.is_set():
        with self.profiler.section("training"):
          step_metrics = self.agent.train_step()
        self._note_policy_version()
        if not step_metrics:  # stopped while waiting for data
          continue
        if self._sync:
          self._sync.trained()
        step_metrics = dict(step_metrics)
        samples = step_metrics.pop(agent_api.SAMPLES_METRIC, 0.0)
        with self._metrics_lock:
          self._metrics.add(step_metrics)
          self._samples_trained += samples
        if (
          self._checkpointer
          and time.monotonic() - last_ckpt >= self.config.checkpoint_every_s
        ):
          self._save()
          last_ckpt = time.monotonic()
    except BaseException as e:
      self._train_error = e
      self._stop.set()

  def _save(self) -> None:
    if self._checkpointer:
      self._checkpointer.save(self.env_steps)

  def counters(self) -> Counters:
    """The runtime's cumulative counts, for reports and stop rules."""
    with self._metrics_lock:
      samples = self._samples_trained
    return Counters(
      env_steps=self.env_steps,
      learner_steps=self._policy_version(),
      batches=self._batcher.batches_run,
      envs=self._batcher.envs_served,
      act_s=self._act_seconds,
      infer_s=self._infer_seconds,
      samples=samples,
      discarded_partial_unrolls=self.discarded_partial_unrolls,
      episode_stat_mismatches=self.episode_stat_mismatches,
      uncounted_episodes=self.uncounted_episodes,
    )

  def _report(self, now: float) -> None:
    """One report (reporting.Reporter) of the interval since the last."""
    with self._metrics_lock:
      scalars = self._metrics.drain()
    self.reporter.report(now, self.counters(), scalars)
    self._last_log = now

  def run(self, stop_event: Optional[threading.Event] = None) -> str:
    """Trains until a stop condition; returns why it stopped.

    The calling thread checks stop conditions (every 0.5 s) and logs (every
    `log_every_s`); training runs on its own thread; inference happens on the
    batcher's thread as actors call in.
    """
    stop_event = stop_event or threading.Event()
    trainer = threading.Thread(
      target=self._train_loop, name="training", daemon=True
    )
    self._note_policy_version()
    trainer.start()
    self._start = self._last_log = time.monotonic()
    self.reporter.start(self._start, self.counters())
    reason = None
    freeze = self.freeze_gc_after_first_update
    first_step = self._policy_version()  # > 0 when resumed
    while reason is None:
      stopped = stop_event.wait(min(0.5, self.config.log_every_s))
      if freeze and self._policy_version() > first_step:
        # By the first update TensorFlow has traced inference and training.
        memory.freeze_long_lived()
        freeze = False
      now = time.monotonic()
      if now - self._last_log >= self.config.log_every_s:
        self._report(now)
      if self._train_error is not None:
        reason = f"training failed: {self._train_error!r}"
      elif stopped or self._stop.is_set():
        reason = "stopped"
        self.finished = self.finish_on_stop_event
      else:
        reason = self.stop_rules.reason(now - self._start, self.counters())
        self.finished = reason is not None
    self._report(time.monotonic())
    self.shutdown(trainer)
    if self._train_error is not None:
      raise RuntimeError("the training thread failed") from self._train_error
    return reason

  def shutdown(self, trainer: Optional[threading.Thread] = None) -> None:
    """Stops inference and training, then writes a final checkpoint."""
    self._stop.set()
    if self._sync:
      self._sync.release()
    self.agent.stop()
    self._batcher.stop()
    if trainer is not None:
      trainer.join(timeout=60)
    # The final save runs only once training has stopped (a save racing an
    # update could mix weights of two steps).
    if trainer is not None and trainer.is_alive():
      metrics_lib.log(
        "[learner] the training thread did not stop within "
        "60 s; skipping the final checkpoint"
      )
    elif self._train_error is None:
      self._save()
    if self.reporter.writer:
      self.reporter.writer.close()
