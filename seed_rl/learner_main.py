"""The learner process: `python -m seed_rl.learner_main --env E --agent A ...`.

Usually started by `python -m seed_rl.train` (./run_local.sh), which also
starts the actors; on a cluster, run it alone and point actors at it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import threading
import time
from typing import Any, List, Tuple

from seed_rl import gin_utils
from seed_rl import profiles
from seed_rl import registry
from seed_rl.cluster import tuning
from seed_rl.common import memory
from seed_rl.common import profiling
from seed_rl.common import tf_startup
from seed_rl.grpc import security

# LearnerConfig fields a flag of the same name overrides.
_STOP_FLAGS = (
  "target_return",
  "max_env_steps",
  "max_learner_steps",
  "max_seconds",
)


# How long a finished learner keeps its open actor streams to tell them so.
FINISH_GRACE_S = 10.0
# = grpc.server.SILENT_TIMEOUT_S (not imported here: the server module loads
# gRPC, which the flag parser does not need).
SILENT_STREAM_TIMEOUT_S = 30.0


class _SetupError(Exception):
  """A mistake in the flags or the configuration: one message, exit 2."""


def build_parser() -> argparse.ArgumentParser:
  """The learner's flags (the run; serving, in `_add_server_flags`)."""
  p = argparse.ArgumentParser(
    prog="python -m seed_rl.learner_main", description=__doc__
  )
  p.add_argument(
    "--env", default="classic", help="one of: " + ", ".join(registry.ENVS)
  )
  p.add_argument(
    "--agent", default="vtrace", help="one of: " + ", ".join(registry.AGENTS)
  )
  p.add_argument("--num_actors", type=int, default=2)
  p.add_argument("--envs_per_actor", type=int, default=16)
  p.add_argument(
    "--env_groups",
    type=int,
    default=1,
    help="G: streams per actor, as the actors' --env_groups (each actor's "
    "envs in G groups, one stream each); sizes the RPC slots and the "
    "count of actors told a finished run",
  )
  p.add_argument(
    "--num_eval_actors",
    type=int,
    default=0,
    help="extra actors (ids after the training ones) whose envs "
    "act deterministically and are logged under eval/",
  )
  p.add_argument(
    "--logdir",
    default=None,
    help="default: runs/<env>-<agent>; resumes if it holds checkpoints",
  )
  _add_server_flags(p)
  profiles.add_flag(p)
  p.add_argument(
    "--gin_config",
    action="append",
    default=[],
    help="extra gin files, after seed_rl/<env>/gin/<agent>.gin",
  )
  p.add_argument(
    "--gin_bindings",
    action="append",
    default=[],
    help="e.g. 'VtraceConfig.learning_rate = 1e-3'",
  )
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--target_return", type=float, default=None)
  p.add_argument("--max_env_steps", type=int, default=None)
  p.add_argument("--max_learner_steps", type=int, default=None)
  p.add_argument("--max_seconds", type=float, default=None)
  p.add_argument(
    "--hypertune_metric",
    default=None,
    help="in a Vertex AI tuning study: report this metric (episode/return: "
    "the mean of the last 100 training episodes) where the service reads "
    "it; the logdir gets a trial-<id>/ subfolder per trial",
  )
  p.add_argument(
    "--profile",
    action="store_true",
    help="also write CPU seconds per thread role ('cpu_s') and steady-state "
    "rates ('steady_state') to result.json (benchmarks/throughput.py)",
  )
  return p


def _add_server_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument(
    "--server_address",
    default="localhost:8686",
    help="host:port to serve actors on; anything but loopback "
    "needs --tls_cert/--tls_key and a token, or --insecure",
  )
  p.add_argument(
    "--tls_cert",
    default=None,
    help="PEM certificate of this learner (with --tls_key)",
  )
  p.add_argument("--tls_key", default=None, help="PEM private key")
  p.add_argument(
    "--token_file",
    default=None,
    help=f"file holding the actors' shared token (default: "
    f"${security.TOKEN_ENV}); never pass a token as an argument",
  )
  p.add_argument(
    "--insecure",
    action="store_true",
    help="serve a non-loopback address without TLS or token "
    "(trusted networks only; every progress line says so)",
  )
  p.add_argument(
    "--address_file",
    default=None,
    help="once serving, write this learner's host:port to this file (on "
    "storage the actors see); actors given --server_address file:PATH "
    "find the learner there, also after it moved to another host or port",
  )
  p.add_argument(
    "--advertise_host",
    default=None,
    help="the host name written to --address_file (default: the host of "
    "--server_address, or this machine's name when it binds every "
    "interface)",
  )
  p.add_argument(
    "--silent_stream_timeout_s",
    type=float,
    default=SILENT_STREAM_TIMEOUT_S,
    help="end an actor's stream that sends nothing for this long after the "
    "learner's last response, freeing its actor id (a hung env or host, or "
    "a client holding the id; a merely slow actor reconnects); must exceed "
    "the actors' --env_step_timeout_s and their slowest env step; 0: never",
  )


@dataclasses.dataclass
class _Run:
  """What the checked flags and gin configuration built."""

  config: Any  # LearnerConfig (its module loads with TensorFlow)
  agent: Any  # agent_api.Agent
  observation_spec: Any  # ArraySpec of the wire (before frame stacking)
  action_spec: Any
  num_train_envs: int
  num_envs: int
  logdir: str


def main(argv=None) -> int:
  """Builds the learner from the flags, serves actors until a stop
  condition and writes result.json; the exit code (2: a setup mistake)."""
  argv = list(sys.argv[1:] if argv is None else argv)
  try:
    # A tuning trial's parameters (`--hp_...`, seed_rl/cluster/tuning.py).
    argv, tuned = tuning.extract_hyperparameters(argv)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  args = build_parser().parse_args(argv)
  args.gin_bindings += tuned
  # Reused pages for gRPC's per-message buffers: 4-9% less learner CPU per
  # agent step at 32 Atari frames per message (memory.keep_large_buffers).
  if not memory.malloc_left_to_user(os.environ):
    memory.keep_large_buffers()  # False, and nothing changed, without glibc
  try:
    server_security = _check_args(args)
    tf_startup.import_tensorflow()  # before anything else loads it
    run = _build(args)
    checkpointer = _open_logdir(args, run)
  except _SetupError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  profiler = _profiler(args.profile)
  learner = _learner(run, checkpointer, profiler)
  learner.freeze_gc_after_first_update = True  # this process is the learner's
  if args.hypertune_metric:
    learner.reporter.hypertune = tuning.HypertuneReporter(args.hypertune_metric)
  if not security.is_loopback(args.server_address) and not (
    server_security.tls and server_security.token
  ):
    learner.reporter.banner = (
      f"INSECURE: {args.server_address} without TLS and token"
    )
  started = time.monotonic()
  reason = _serve(args, run, learner, server_security)
  gin_utils.write_operative_config(run.logdir)
  _write_result(run.logdir, reason, learner, profiler)
  _log_summary(run, learner, checkpointer, reason, time.monotonic() - started)
  return 0


def _check_args(args: argparse.Namespace) -> security.ServerSecurity:
  """Checks the flags before anything slow loads; the server's security."""
  try:
    registry.check_pair(args.env, args.agent)
    args.machine_profile = profiles.resolve(args.machine_profile)
    if args.hypertune_metric:
      tuning.HypertuneReporter(args.hypertune_metric)  # checks the name
    server_security = security.ServerSecurity(
      args.tls_cert, args.tls_key, security.read_token(args.token_file)
    )
    server_security.check_address(args.server_address, args.insecure)
    server_security.credentials()  # unreadable files fail now, not later
  except ValueError as e:
    raise _SetupError(e) from e
  if args.num_actors < 1 or args.envs_per_actor < 1:
    raise _SetupError("--num_actors and --envs_per_actor must be >= 1")
  if args.env_groups < 1 or args.envs_per_actor % args.env_groups:
    raise _SetupError(
      f"--env_groups {args.env_groups}: must be >= 1 and divide "
      f"--envs_per_actor {args.envs_per_actor}"
    )
  if args.silent_stream_timeout_s < 0:
    raise _SetupError("--silent_stream_timeout_s must be >= 0 (0: never)")
  return server_security


def _config_files(args: argparse.Namespace) -> List[str]:
  """The profile's files, the pair's gin file and its overlay, then
  --gin_config. The pair's file given again there is dropped: parsed after
  the overlay it would undo it."""
  files = profiles.config_files(args.machine_profile, args.env, args.agent)
  pair = os.path.realpath(registry.gin_file(args.env, args.agent))
  return files + [f for f in args.gin_config if os.path.realpath(f) != pair]


def _build(args: argparse.Namespace) -> _Run:
  """Parses gin, seeds TensorFlow, probes the env's specs, creates the agent."""
  # TensorFlow and the agent modules load only now (slow imports).
  import importlib
  import keras
  from seed_rl.common import learner as learner_lib

  env_module = registry.env_module(args.env)
  agent_module = registry.agent_module(args.agent)
  for name in registry.learner_gin_modules(args.env):
    importlib.import_module(name)
  try:
    gin_utils.parse(
      _config_files(args),
      args.gin_bindings,
    )
    config = learner_lib.LearnerConfig()
  except ValueError as e:
    raise _SetupError(e) from e
  overrides = {
    k: getattr(args, k) for k in _STOP_FLAGS if getattr(args, k) is not None
  }
  config = dataclasses.replace(config, **overrides)
  learner_lib.configure_tf_threads(config)
  # Python's `random` too: Keras 3 draws initializer seeds from it, so
  # tf.random.set_seed alone left two runs of one --seed with different
  # initial weights.
  keras.utils.set_random_seed(args.seed)
  observation_spec, action_spec = _probe_specs(env_module, args.seed)
  num_train_envs = args.num_actors * args.envs_per_actor
  agent = _create_agent(
    args.agent,
    agent_module,
    config,
    observation_spec,
    action_spec,
    num_train_envs,
  )
  return _Run(
    config,
    agent,
    observation_spec,
    action_spec,
    num_train_envs,
    num_train_envs + args.num_eval_actors * args.envs_per_actor,
    _logdir(args),
  )


def _logdir(args: argparse.Namespace) -> str:
  """--logdir (default runs/ENV-AGENT); in a tuning study, one folder per
  trial, or the trials would resume each other's checkpoints."""
  logdir = args.logdir or os.path.join("runs", f"{args.env}-{args.agent}")
  trial = tuning.trial_id()
  if args.hypertune_metric and trial:
    logdir = os.path.join(logdir, f"trial-{trial}")
  return logdir


def _probe_specs(env_module, seed: int) -> Tuple[Any, Any]:
  """The (observation, action) specs of one env of the domain."""
  try:
    probe = env_module.create_environment(num_envs=1, seed=seed)
  except Exception as e:
    message = f"cannot create the environment: {type(e).__name__}: {e}"
    if os.environ.get("SEED_RL_DEBUG"):
      print(f"error: {message}", file=sys.stderr)
      raise
    raise _SetupError(message) from e
  specs = probe.observation_spec, probe.action_spec
  probe.close()
  return specs


def _create_agent(
  name, agent_module, config, observation_spec, action_spec, num_train_envs
):
  """The agent, placed on the configured devices."""
  from seed_rl.common import devices
  from seed_rl.common import metrics
  from seed_rl.common.env_state import stacked_observation_spec

  try:
    if config.training_devices and not getattr(
      agent_module, devices.SUPPORTED_AGENTS_ATTR, False
    ):
      raise ValueError(
        f"LearnerConfig.training_devices is not supported by the "
        f"'{name}' agent (it trains on one device only); "
        "unset it to train on one device"
      )
    placement = devices.resolve(
      config.training_devices, config.inference_device
    )
    metrics.log(f"[learner] {placement.describe()}")
    with devices.use(placement):
      return agent_module.create_agent(
        stacked_observation_spec(observation_spec, config.frame_stack),
        action_spec,
        num_train_envs,
      )
  except ValueError as e:
    raise _SetupError(e) from e


def _open_logdir(args: argparse.Namespace, run: _Run):
  """Restores the newest checkpoint of the logdir, if any, and writes what
  seed_rl.evaluate / seed_rl.export rebuild the run from; the Checkpointer."""
  from seed_rl.common import metrics
  from seed_rl.common import saved_run
  from seed_rl.common.checkpoints import Checkpointer

  replay = None
  if run.config.checkpoint_replay:
    if not run.agent.keeps_replay:
      raise _SetupError(
        f"LearnerConfig.checkpoint_replay is set but the '{args.agent}' "
        "agent keeps no replay (r2d2, dqn, sac, td3 and acer do)"
      )
    replay = run.agent
  checkpointer = Checkpointer(
    os.path.join(run.logdir, "checkpoints"),
    run.agent.checkpoint_objects(),
    replay=replay,
    log=metrics.log,
  )
  try:
    restored = checkpointer.restore()
  except ValueError as e:  # a saved replay that does not fit this run
    raise _SetupError(e) from e
  if restored:
    metrics.log(
      f"[learner] resumed from {restored}: learner step "
      f"{int(run.agent.step_counter.numpy())}, env steps "
      f"{checkpointer.env_steps:,d} (use another --logdir to start "
      "fresh)"
    )
  gin_utils.write_operative_config(run.logdir)
  saved_run.write_run_spec(
    run.logdir,
    args.env,
    args.agent,
    run.num_train_envs,
    run.num_envs - run.num_train_envs,
    args.seed,
    args.gin_config,
    args.gin_bindings,
  )
  return checkpointer


def _profiler(enabled: bool) -> profiling.Profiler:
  """A real profiler only when asked (--profile); the no-op one otherwise."""
  if not enabled:
    return profiling.NULL_PROFILER
  from seed_rl.common import learner as learner_lib

  return profiling.Profiler(learner_lib.PROFILED_SECTIONS)


def _learner(run: _Run, checkpointer, profiler: profiling.Profiler):
  from seed_rl.common import learner as learner_lib
  from seed_rl.common import metrics

  return learner_lib.Learner(
    run.agent,
    run.observation_spec,
    run.action_spec,
    run.num_train_envs,
    run.num_envs - run.num_train_envs,
    run.config,
    checkpointer,
    metrics.SummaryWriter(run.logdir),
    profiler=profiler,
  )


def _serve(
  args: argparse.Namespace, run: _Run, learner, server_security
) -> str:
  """Serves the actors until the learner stops (a stop condition, Ctrl-C,
  SIGTERM); returns why it stopped."""
  from seed_rl.common import metrics
  from seed_rl.grpc.server import LearnerServer
  from seed_rl.grpc.validation import ValueLimits

  server = LearnerServer(
    args.server_address,
    run.observation_spec,
    run.action_spec,
    run.num_envs,
    learner,
    security=server_security,
    limits=ValueLimits(
      run.config.max_abs_reward, run.config.max_abs_observation
    ),
    # One Step stream per actor holds a slot for its lifetime; twice the
    # actors leaves room for restarts overlapping their old stream and
    # Hellos (was a fixed 64: a 64th actor was refused). Calls that have
    # not sent a message yet get their own slots (see server.py).
    max_workers=2 * _streams(args) + 16,
    silent_timeout_s=args.silent_stream_timeout_s or None,
  )
  port = server.start()
  if args.address_file:
    from seed_rl.grpc import address as address_lib

    advertised = address_lib.advertised(
      args.server_address, port, args.advertise_host
    )
    address_lib.write(args.address_file, advertised)
    metrics.log(f"[learner] wrote {advertised} to {args.address_file}")
  evals = (
    f" + {args.num_eval_actors} eval actors" if args.num_eval_actors else ""
  )
  metrics.log(
    f"[learner] {args.env}/{args.agent}: serving {run.num_envs} envs "
    f"({args.num_actors} actors x {args.envs_per_actor}{evals})"
    f" on port {port}; logdir {run.logdir}"
  )
  stop = threading.Event()

  def on_signal(signum, _):
    # Ctrl-C ends the run (actors exit 0); SIGTERM, what a cluster sends to
    # reschedule the learner, lets actors wait for the restarted learner.
    learner.finish_on_stop_event = signum == signal.SIGINT
    stop.set()

  for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, on_signal)
  try:
    reason = learner.run(stop)
  finally:
    # A finished run answers every stream's next message, and every Hello,
    # with "finished" (the actor exits 0), and stays up until each actor
    # was told or FINISH_GRACE_S passed. Stopping at once cut off actors
    # whose step was slower, or that were reconnecting (a backoff pause
    # after a learner restart): they then waited for a learner that would
    # never come back.
    if learner.finished:
      server.wait_until_told_finished(_streams(args), FINISH_GRACE_S)
    server.stop(1.0 if learner.finished else 0)
  return reason


def _streams(args) -> int:
  """Step streams of a full run: one per actor, or per env group."""
  return (args.num_actors + args.num_eval_actors) * args.env_groups


def _log_summary(run: _Run, learner, checkpointer, reason, seconds) -> None:
  from seed_rl.common import metrics

  fmt = lambda r: "n/a" if r is None else f"{r:.1f}"
  metrics.log(
    f"[learner] finished ({reason}) after {seconds:.0f} s"
    f", {learner.env_steps:,d} env steps, "
    f"{int(run.agent.step_counter.numpy()):,d} learner steps; mean return of "
    f"the last 100 episodes: best {fmt(learner.reporter.best_return)}, final "
    f"{fmt(learner.episodes.recent_mean())}\n[learner] checkpoint in "
    f"{checkpointer.directory}; curves: tensorboard --logdir {run.logdir}; "
    f"score or watch it: python -m seed_rl.evaluate --logdir {run.logdir}"
  )


def _write_result(logdir, reason, learner, profiler) -> None:
  """`<logdir>/result.json`: how the run ended (read by benchmarks); with
  --profile also the profiler's 'cpu_s' and 'steady_state'."""
  import json

  recent = learner.episodes.recent_mean()
  result = {
    "reason": reason,
    "env_steps": int(learner.env_steps),
    "learner_steps": int(learner.agent.step_counter.numpy()),
    "episodes": learner.episodes.episodes,
    # Ended episodes whose start this process did not see (after a resume,
    # or an actor restart): left out of "episodes".
    "uncounted_episodes": int(learner.uncounted_episodes),
    "final_return": recent,
    # Reached the target at some point of the run (the mean may dip
    # below it again before shutdown).
    "solved": learner.stop_rules.solved_at_s is not None,
    "solved_at_s": learner.stop_rules.solved_at_s,
    "batches": learner.batches_run,
    **profiler.summary(),
  }
  tmp = os.path.join(logdir, ".result.json.tmp")
  with open(tmp, "w") as f:
    json.dump(result, f)
  os.replace(tmp, os.path.join(logdir, "result.json"))


if __name__ == "__main__":
  sys.exit(main())
