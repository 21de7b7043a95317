r"""Actor process entry point (no TensorFlow).

  python -m seed_rl.actors.main --env classic --actor_id 0 --num_envs 16 \
      --server_address localhost:8686 --seed 0 \
      --gin_config seed_rl/classic/gin/vtrace.gin \
      --gin_bindings "classic.create_environment.env_id = 'Acrobot-v1'"

gin is parsed with skip_unknown=True: the same config files serve the learner,
whose configurables (agents, optimizers) are not imported here. Env bindings
use the domain names `classic.create_environment`, `atari.create_environment`
and `mujoco.create_environment`. SIGTERM/SIGINT stop the actor cleanly (envs
and worker processes are closed) with exit status 0; a rejected handshake, a
protocol error or a failed learner exits with status 2, an env failure with
status 3.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import sys
import threading
import traceback
from typing import Any, Dict, List, Optional

import gin

from seed_rl import profiles
from seed_rl import registry
from seed_rl.actors.actor import EnvConfigError, run_actor
from seed_rl.actors.groups import check_groups
from seed_rl.actors.subprocess_env import EnvWorkerError
from seed_rl.cluster import cluster_spec
from seed_rl.cluster import tuning
from seed_rl.grpc import security
from seed_rl.grpc.client import ActorClient
from seed_rl.grpc.client import AuthenticationError
from seed_rl.grpc.client import LearnerFinished
from seed_rl.grpc.client import LearnerError
from seed_rl.grpc.client import LearnerUnavailableError
from seed_rl.grpc.client import ProtocolError
from seed_rl.grpc.client import SpecMismatchError

# The learner refused one request (a bad message, a timeout): the launcher
# restarts the actor within its restart budget.
EXIT_PROTOCOL_ERROR = 2
EXIT_ENV_ERROR = 3
# The environment could not be created: the launcher stops the run instead
# of restarting the actor. SEED_RL_DEBUG=1 prints the traceback too.
EXIT_CONFIG_ERROR = 4
# This actor can never be served (its specs differ from the learner's, its
# token or TLS settings are refused): the launcher stops the run.
EXIT_FATAL = 5


class _Stopped(BaseException):
  """Raised in the main thread by the SIGTERM/SIGINT handler."""


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
  """The actor's flags, checked; cluster placeholders ($CLUSTER_SPEC)
  resolved to this replica's actor id and the learner's address."""
  parser = argparse.ArgumentParser(
    prog="python -m seed_rl.actors.main",
    description="SEED RL actor: steps envs, the learner picks actions.",
  )
  _add_placement_flags(parser)
  _add_connection_flags(parser)
  _add_run_flags(parser)
  argv = list(sys.argv[1:] if argv is None else argv)
  try:
    # A tuning trial's parameters (`--hp_...`, seed_rl/cluster/tuning.py):
    # gin bindings, skipped where they name no configurable of the actor.
    argv, tuned = tuning.extract_hyperparameters(argv)
  except ValueError as e:
    parser.error(str(e))
  args = parser.parse_args(argv)
  args.gin_bindings += tuned
  try:
    registry.check_env(args.env)
    args.actor_id = cluster_spec.resolve_actor_id(args.actor_id)
    args.server_address = cluster_spec.resolve_server_address(
      args.server_address
    )
  except ValueError as e:
    parser.error(str(e))
  if args.num_envs < 1:
    parser.error(f"--num_envs must be >= 1, got {args.num_envs}")
  if args.actor_id < 0:
    parser.error(f"--actor_id must be >= 0, got {args.actor_id}")
  try:
    check_groups(args.num_envs, args.env_groups)
  except ValueError as e:
    parser.error(f"--env_groups: {e}")
  try:
    args.machine_profile = profiles.resolve(args.machine_profile)
  except ValueError as e:
    parser.error(f"--machine_profile: {e}")
  return args


def _add_placement_flags(parser: argparse.ArgumentParser) -> None:
  """Which envs this actor steps and where its learner is."""
  parser.add_argument(
    "--env",
    required=True,
    help=f"environment domain: one of {', '.join(sorted(registry.ENVS))}, "
    "or a domain package's dotted path",
  )
  parser.add_argument(
    "--actor_id",
    required=True,
    help="I; this actor owns global env ids [I*K, (I+1)*K); "
    f"'{cluster_spec.FROM_CLUSTER_SPEC}': this replica's index in worker "
    "pool 1 of $CLUSTER_SPEC (Vertex AI)",
  )
  parser.add_argument("--num_envs", type=int, default=1, help="K")
  parser.add_argument(
    "--env_groups",
    type=int,
    default=1,
    help="G: step the K envs as G groups of K/G, each with its own stream, "
    "so that one group steps while the others wait for their actions "
    "(hides network latency); group g says Hello as actor I*G + g and "
    "keeps env ids and seeds of the ungrouped actor. K must be a multiple "
    "of G",
  )
  parser.add_argument(
    "--server_address",
    default="localhost:8686",
    help="the learner's host:port; "
    f"'{cluster_spec.FROM_CLUSTER_SPEC}:PORT': PORT on the host of worker "
    "pool 0 in $CLUSTER_SPEC (Vertex AI); 'file:PATH': read from the file "
    "the learner writes (its --address_file) before every connection "
    "attempt, so a learner moved to another host or port is found",
  )


def _add_connection_flags(parser: argparse.ArgumentParser) -> None:
  """Time limits, TLS and the token."""
  parser.add_argument(
    "--env_step_timeout_s",
    type=float,
    default=None,
    help="exit (code 3, the launcher restarts the actor) when one batched "
    "env step runs longer than this; default: no limit",
  )
  parser.add_argument(
    "--connect_timeout_s",
    type=float,
    default=None,
    help="give up (exit 2) if no learner answers for this long, at start or "
    "after losing it; default: wait forever",
  )
  parser.add_argument(
    "--tls_ca",
    default=None,
    help="PEM CA certificate that signed the learner's "
    "certificate: connect with TLS",
  )
  parser.add_argument(
    "--tls_server_name",
    default=None,
    help="name in the learner's certificate, when it "
    "differs from the host in --server_address",
  )
  parser.add_argument(
    "--token_file",
    default=None,
    help="file holding the learner's token (default: $SEED_RL_TOKEN)",
  )


def _add_run_flags(parser: argparse.ArgumentParser) -> None:
  """Seeds, gin configuration, length and logging of the run."""
  parser.add_argument(
    "--seed",
    type=int,
    default=0,
    help="run seed; env i of actor I gets seed + I*K + i",
  )
  profiles.add_flag(parser)
  parser.add_argument(
    "--gin_config",
    action="append",
    default=[],
    help="gin config file (repeatable)",
  )
  parser.add_argument(
    "--gin_bindings",
    action="append",
    default=[],
    help="gin binding (repeatable)",
  )
  parser.add_argument(
    "--max_steps",
    type=int,
    default=None,
    help="stop after this many batched steps",
  )
  parser.add_argument("--log_interval_s", type=float, default=30.0)
  parser.add_argument(
    "--stats_file",
    default=None,
    help="write throughput stats (JSON) here every --log_interval_s seconds",
  )


def main(argv: Optional[List[str]] = None) -> int:
  """Runs one actor until it is stopped or fails; the exit code (0, or one
  of the EXIT_* codes above)."""
  args = parse_args(argv)
  logging.basicConfig(
    level=logging.INFO, format="%(asctime)s actor %(process)d %(message)s"
  )
  try:
    client_security = security.ClientSecurity(
      args.tls_ca, security.read_token(args.token_file), args.tls_server_name
    )
  except ValueError as e:
    print(f"actor {args.actor_id}: {e}", file=sys.stderr)
    return EXIT_FATAL
  create_environment = _configure(args)
  stop_event = threading.Event()
  previous = _stop_on_signals(stop_event)
  try:
    summary = run_actor(
      args.server_address,
      args.actor_id,
      args.num_envs,
      create_environment,
      args.seed,
      max_steps=args.max_steps,
      stop_event=stop_event,
      client_factory=functools.partial(
        ActorClient,
        security=client_security,
        connect_timeout_s=args.connect_timeout_s,
      ),
      log_interval_s=args.log_interval_s,
      stats_path=args.stats_file,
      env_step_timeout_s=args.env_step_timeout_s,
      env_groups=args.env_groups,
    )
    logging.info("actor %d done: %s", args.actor_id, summary)
  except _Stopped as e:
    logging.info("actor %d stopped by %s; envs closed", args.actor_id, e)
  except LearnerFinished:
    logging.info(
      "actor %d: the learner finished training; exiting", args.actor_id
    )
  except _FAILURES as e:
    return _failure_exit_code(args, e)
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)
  return 0


def _configure(args: argparse.Namespace):
  """Parses the gin configuration; the domain's create_environment."""
  # The domain's module registers its gin configurables before parsing;
  # the registry is the learner's, so a domain added there works here too.
  create_environment = registry.env_module(args.env).create_environment
  gin.parse_config_files_and_bindings(
    profiles.gin_files(args.machine_profile, args.env)
    + profiles.with_overlays(args.machine_profile, args.gin_config),
    args.gin_bindings,
    skip_unknown=True,
  )
  if "tensorflow" in sys.modules:
    logging.warning(
      "a gin config imported tensorflow into the actor; keep "
      "agent imports out of configs that actors parse"
    )
  return create_environment


def _stop_on_signals(stop_event: threading.Event) -> Dict[int, Any]:
  """SIGTERM and SIGINT set `stop_event` and raise _Stopped in the main
  thread; returns the previous handlers."""

  def on_signal(signum, frame):
    del frame
    if not stop_event.is_set():  # a second signal must not break the cleanup
      stop_event.set()
      raise _Stopped(signal.Signals(signum).name)

  return {
    s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)
  }


# What ends an actor with an error exit code (see _failure_exit_code).
_FAILURES = (
  EnvConfigError,
  ProtocolError,  # AuthenticationError and SpecMismatchError included
  LearnerUnavailableError,
  LearnerError,
  EnvWorkerError,
)


def _failure_exit_code(args: argparse.Namespace, e: BaseException) -> int:
  """Prints what went wrong; the exit code that tells the launcher whether
  a restart can help."""
  actor = f"actor {args.actor_id}"
  if isinstance(e, EnvConfigError):
    print(f"{actor}: cannot create the environment: {e}", file=sys.stderr)
    if os.environ.get("SEED_RL_DEBUG"):
      traceback.print_exception(e.__cause__ or e)
    return EXIT_CONFIG_ERROR
  if isinstance(e, AuthenticationError):
    print(
      f"{actor}: the learner refused this actor's token: {e}", file=sys.stderr
    )
    return EXIT_FATAL
  if isinstance(e, SpecMismatchError):
    print(
      f"{actor}: the learner rejected this actor's specs: {e}", file=sys.stderr
    )
    return EXIT_FATAL
  if isinstance(e, ProtocolError):
    print(f"{actor}: protocol error from the learner: {e}", file=sys.stderr)
    return EXIT_PROTOCOL_ERROR
  if isinstance(e, (LearnerUnavailableError, LearnerError)):
    print(
      f"{actor}: learner at {args.server_address} failed: {e}",
      file=sys.stderr,
    )
    return EXIT_PROTOCOL_ERROR
  print(f"{actor}: environment failed: {e}", file=sys.stderr)
  return EXIT_ENV_ERROR


if __name__ == "__main__":
  sys.exit(main())
