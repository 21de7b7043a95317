"""Local launcher: one learner and N actor processes on this machine.

    python -m seed_rl.train [ENV] [AGENT] [NUM_ACTORS] [ENVS_PER_ACTOR] [flags]

(./run_local.sh sets up the virtual environment and calls this.) Flags it
does not know go to the learner (e.g. --gin_bindings, --logdir,
--max_seconds); --gin_config/--gin_bindings also go to the actors, which
ignore bindings meant for the learner. An actor that crashes (e.g. its
environment raised) is restarted while the learner serves the others; one the
learner refuses stops the run. Ctrl-C, SIGTERM or the learner's exit stops
every process it started; children also die if this process is killed.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from typing import List, Optional, Tuple

from seed_rl import profiles
from seed_rl import registry

# Actor exit codes (seed_rl.actors.main's EXIT_*) that stop the run: every
# other failure is restarted within the restart budget (a crashed or hung
# environment, a refused message, a lost learner).
ACTOR_ENV_CONFIG_ERROR = 4  # the environment could not be created
ACTOR_FATAL = 5  # specs differ from the learner's, or token/TLS refused
MAX_ACTOR_RESTARTS_PER_MINUTE = 10
# The learner ends a stream silent for --silent_stream_timeout_s (30 s by
# default; learner_main.SILENT_STREAM_TIMEOUT_S). With --env_step_timeout_s
# T the learner's deadline must exceed T: an actor whose env step runs past
# T exits by itself (its stream closes at once), so the learner's deadline,
# unless given, becomes max(30, T + this margin).
SILENT_STREAM_TIMEOUT_S = 30.0
SILENT_STREAM_MARGIN_S = 10.0

DEFAULTS = {  # what `./run_local.sh` with no arguments runs
  "env": "classic",
  "agent": "vtrace",
  "num_actors": 2,
  "envs_per_actor": 16,
}


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def die_with_parent():
  """preexec_fn: the kernel sends SIGTERM to the child if we die (Linux)."""
  try:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
  except OSError:
    pass


def _forwarded(extra: List[str], names) -> List[str]:
  """The `--name value` / `--name=value` pairs of `extra` for `names`."""
  out, i = [], 0
  while i < len(extra):
    arg = extra[i]
    key = arg.split("=", 1)[0]
    if key in names:
      if "=" in arg:
        out.append(arg)
      elif i + 1 < len(extra):
        out += [arg, extra[i + 1]]
        i += 1
    i += 1
  return out


def build_parser(flags_only: bool = False) -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
    prog="python -m seed_rl.train",
    description=__doc__,
    formatter_class=argparse.RawTextHelpFormatter,
  )
  if not flags_only:
    p.add_argument(
      "env",
      nargs="?",
      default=DEFAULTS["env"],
      help=f"one of {', '.join(registry.ENVS)}",
    )
    p.add_argument(
      "agent",
      nargs="?",
      default=DEFAULTS["agent"],
      help=f"one of {', '.join(registry.AGENTS)}",
    )
    p.add_argument(
      "num_actors", nargs="?", type=int, default=DEFAULTS["num_actors"]
    )
    p.add_argument(
      "envs_per_actor", nargs="?", type=int, default=DEFAULTS["envs_per_actor"]
    )
  p.add_argument("--num_eval_actors", type=int, default=0)
  p.add_argument(
    "--env_groups",
    type=int,
    default=1,
    help="each actor steps its envs as this many groups, each with its own "
    "stream, so one group steps while the others wait for their actions "
    "(hides network latency; envs_per_actor must be a multiple)",
  )
  p.add_argument(
    "--env_step_timeout_s",
    type=float,
    default=None,
    help="an actor whose env step runs longer exits and is restarted; the "
    "learner's --silent_stream_timeout_s (default 30) then defaults to at "
    f"least this + {SILENT_STREAM_MARGIN_S:g} s",
  )
  p.add_argument(
    "--tensorboard",
    action="store_true",
    help="also start TensorBoard on --tensorboard_port",
  )
  p.add_argument("--tensorboard_port", type=int, default=6006)
  p.add_argument("--port", type=int, default=0, help="0 picks a free port")
  p.add_argument("--seed", type=int, default=0)
  profiles.add_flag(p)
  p.add_argument(
    "--actor_stats_dir",
    default=None,
    help="actors write throughput stats (JSON) here every 5 s",
  )
  return p


def learner_run_flags(
  env: str, agent: str, num_actors: int, envs_per_actor: int
) -> List[str]:
  """The learner flags that name a run: env, agent, N actors of K envs.

  Shared with the cluster launcher (seed_rl/cluster/vertex.py), so that both
  start the learner for the same run the same way."""
  return [
    "--env",
    env,
    "--agent",
    agent,
    "--num_actors",
    str(num_actors),
    "--envs_per_actor",
    str(envs_per_actor),
  ]


def main(argv=None) -> int:
  """Checks the run, starts every process, supervises them; the exit code."""
  args, extra = _parse_args(argv)
  try:
    gin_args = _prepare(args, extra)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  address = f"localhost:{args.port or _free_port()}"
  stopping: List[int] = []  # signals, or the actor exit code that stops us

  def on_signal(signum, _):
    stopping.append(signum)

  signal.signal(signal.SIGINT, on_signal)
  signal.signal(signal.SIGTERM, on_signal)
  procs: List[Tuple[str, subprocess.Popen]] = []
  for name, cmd in _commands(args, extra, gin_args, address):
    proc = subprocess.Popen(cmd, preexec_fn=die_with_parent)
    procs.append((name, proc))
    print(f"[launcher] started {name} (pid {proc.pid})", flush=True)
  if args.tensorboard:
    print(
      f"[launcher] TensorBoard: http://localhost:{args.tensorboard_port}",
      flush=True,
    )
  learner = procs[0][1]
  try:
    code = _supervise(procs, stopping)
  finally:
    _stop_all(procs)
  return _exit_code(code, learner, stopping)


def _parse_args(argv) -> Tuple[argparse.Namespace, List[str]]:
  """(our arguments, the flags we do not know: the learner's)."""
  argv = list(sys.argv[1:] if argv is None else argv)
  # Positionals lead (ENV AGENT NUM_ACTORS ENVS_PER_ACTOR); everything after
  # them is flags, ours or the learner's: parsing them apart keeps a learner
  # flag's value ('--max_seconds 60') from being read as a positional.
  npos = 0
  while npos < min(4, len(argv)) and not argv[npos].startswith("-"):
    npos += 1
  args = build_parser().parse_args(argv[:npos])
  _, extra = build_parser(flags_only=True).parse_known_args(
    argv[npos:], namespace=args
  )
  return args, extra


def _prepare(args: argparse.Namespace, extra: List[str]) -> List[str]:
  """Checks the run before anything starts (a configuration mistake is one
  message, not a restart loop); returns the actors' gin flags.

  Raises:
    ValueError: what is wrong, to print after 'error: '.
  """
  registry.check_pair(args.env, args.agent)
  if args.num_actors < 1 or args.envs_per_actor < 1:
    raise ValueError("NUM_ACTORS and ENVS_PER_ACTOR must be >= 1")
  if args.env_groups < 1 or args.envs_per_actor % args.env_groups:
    raise ValueError(
      f"--env_groups {args.env_groups}: must be >= 1 and divide "
      f"ENVS_PER_ACTOR {args.envs_per_actor}"
    )
  if args.actor_stats_dir:
    os.makedirs(args.actor_stats_dir, exist_ok=True)
  args.machine_profile = profiles.resolve(args.machine_profile)
  print(
    f"[launcher] machine profile {args.machine_profile} "
    f"({os.cpu_count()} cores; --machine_profile "
    f"{'|'.join(profiles.PROFILES)} to choose)",
    flush=True,
  )
  gin_args = ["--gin_config", registry.gin_file(args.env, args.agent)]
  gin_args += _forwarded(extra, ("--gin_config", "--gin_bindings"))
  configs, bindings = _gin_sources(gin_args[2:])  # the user's, as the learner's
  configs = (
    profiles.config_files(args.machine_profile, args.env, args.agent) + configs
  )
  from seed_rl import gin_utils

  gin_utils.check_renamed(configs, bindings)
  problem = _check_environment(args.env, configs, bindings, args.seed)
  if problem:
    raise ValueError(f"cannot create the environment: {problem}")
  silent = _silent_stream_timeout(extra)
  step = args.env_step_timeout_s
  if step and silent and silent <= step:
    raise ValueError(
      f"--silent_stream_timeout_s {silent:g} must exceed --env_step_timeout_s "
      f"{step:g}: the learner would end the streams of actors whose env step "
      f"is legitimately slow"
    )
  return gin_args


def _silent_stream_timeout(extra: List[str]) -> Optional[float]:
  """The learner's --silent_stream_timeout_s given among `extra`, if any."""
  given = _forwarded(extra, ("--silent_stream_timeout_s",))
  if not given:
    return None
  value = given[-1].split("=", 1)[-1]
  try:
    return float(value)
  except ValueError:
    raise ValueError(
      f"--silent_stream_timeout_s: {value!r} is not a number"
    ) from None


def _commands(
  args: argparse.Namespace, extra: List[str], gin_args: List[str], address: str
) -> List[Tuple[str, List[str]]]:
  """(name, command line) of each process: the learner first, then the
  actors (training ones, then evaluation ones), then TensorBoard if asked."""
  py = sys.executable
  learner = (
    [py, "-m", "seed_rl.learner_main"]
    + learner_run_flags(
      args.env, args.agent, args.num_actors, args.envs_per_actor
    )
    + ["--num_eval_actors", str(args.num_eval_actors)]
    + ["--env_groups", str(args.env_groups)]
    + ["--server_address", address, "--seed", str(args.seed)]
    + ["--machine_profile", args.machine_profile]
    + _silent_stream_flags(args, extra)
    + extra
  )
  commands = [("learner", learner)]
  for i in range(args.num_actors + args.num_eval_actors):
    commands.append((f"actor {i}", _actor_command(args, gin_args, i, address)))
  if args.tensorboard:
    forwarded_logdir = _forwarded(extra, ("--logdir",))
    logdir = (
      forwarded_logdir[-1].split("=", 1)[-1]
      if forwarded_logdir
      else os.path.join("runs", f"{args.env}-{args.agent}")
    )
    commands.append(
      (
        "tensorboard",
        [py, "-m", "tensorboard.main", "--logdir", logdir]
        + ["--port", str(args.tensorboard_port)],
      )
    )
  return commands


def _silent_stream_flags(args: argparse.Namespace, extra: List[str]):
  """The learner's silence deadline when the actors have an env step limit
  and the deadline is not given: longer than that limit."""
  step = args.env_step_timeout_s
  if not step or _silent_stream_timeout(extra) is not None:
    return []
  deadline = max(SILENT_STREAM_TIMEOUT_S, step + SILENT_STREAM_MARGIN_S)
  return ["--silent_stream_timeout_s", f"{deadline:g}"]


def _actor_command(
  args: argparse.Namespace, gin_args: List[str], i: int, address: str
) -> List[str]:
  """Actor `i`'s command line."""
  cmd = [sys.executable, "-m", "seed_rl.actors.main", "--env", args.env]
  cmd += ["--actor_id", str(i), "--num_envs", str(args.envs_per_actor)]
  cmd += ["--env_groups", str(args.env_groups)]
  cmd += ["--server_address", address, "--seed", str(args.seed)]
  cmd += ["--machine_profile", args.machine_profile]
  if args.env_step_timeout_s:
    cmd += ["--env_step_timeout_s", str(args.env_step_timeout_s)]
  cmd += gin_args
  if args.actor_stats_dir:
    stats_file = os.path.join(args.actor_stats_dir, f"actor_{i}.json")
    cmd += ["--stats_file", stats_file, "--log_interval_s", "5"]
  return cmd


def _supervise(
  procs: List[Tuple[str, subprocess.Popen]], stopping: list
) -> Optional[int]:
  """Polls every 0.2 s until the learner exits (returns its exit code) or
  something lands in `stopping` (returns None): a signal, or the exit code of
  an actor that must not be restarted. Other crashed actors are restarted in
  place in `procs`."""
  learner = procs[0][1]
  # Times of actor restarts, to give up on a crash loop.
  restarts: List[float] = []
  while not stopping:
    code = learner.poll()
    if code is not None:
      return code
    for i, (name, proc) in enumerate(procs):
      rc = proc.poll()
      if rc in (None, 0) or not name.startswith("actor"):
        continue
      reason = _why_not_restart(name, rc, restarts)
      if reason:
        print(f"[launcher] {name} {reason}", file=sys.stderr, flush=True)
        stopping.append(rc)
        break
      # The learner keeps serving the other actors; the restarted one draws
      # new run ids, so the learner resets its envs' state and unrolls.
      print(
        f"[launcher] {name} exited with code {rc}; restarting it",
        file=sys.stderr,
        flush=True,
      )
      new = subprocess.Popen(proc.args, preexec_fn=die_with_parent)
      procs[i] = (name, new)
      print(f"[launcher] restarted {name} (pid {new.pid})", flush=True)
    time.sleep(0.2)
  return None


def _why_not_restart(name: str, rc: int, restarts: List[float]) -> str:
  """Why an actor that exited with `rc` stops the run, or '' to restart it
  (then its restart time is added to `restarts`, the last minute's)."""
  if rc == ACTOR_ENV_CONFIG_ERROR:
    return (
      "could not create its environment (the message above says why); "
      "stopping without restarts"
    )
  if rc == ACTOR_FATAL:
    return f"was refused by the learner (exit {rc}); stopping"
  now = time.monotonic()
  restarts[:] = [t for t in restarts if now - t < 60] + [now]
  if len(restarts) > MAX_ACTOR_RESTARTS_PER_MINUTE:
    return (
      f"exited with code {rc}; more than {MAX_ACTOR_RESTARTS_PER_MINUTE} "
      "actor restarts in a minute, stopping"
    )
  return ""


def _exit_code(
  code: Optional[int], learner: subprocess.Popen, stopping: list
) -> int:
  """The launcher's exit code: the learner's when it ended the run; 0 when a
  signal stopped a learner that then exited cleanly; 2 when an actor's
  configuration was refused."""
  if code is not None:
    return code
  code = learner.returncode if learner.returncode is not None else 1
  if stopping and stopping[0] in (signal.SIGINT, signal.SIGTERM):
    code = 0 if learner.returncode in (0, -signal.SIGTERM) else code
  elif stopping:  # an actor's configuration was refused: not a success
    code = 2
  return code


def _gin_sources(gin_args: List[str]) -> Tuple[List[str], List[str]]:
  """['--gin_config', F, '--gin_bindings=B', ...] -> (files, bindings)."""
  values: dict = {"--gin_config": [], "--gin_bindings": []}
  i = 0
  while i < len(gin_args):
    key, eq, value = gin_args[i].partition("=")
    if not eq and i + 1 < len(gin_args):
      value, i = gin_args[i + 1], i + 1
    values[key].append(value)
    i += 1
  return values["--gin_config"], values["--gin_bindings"]


def _check_environment(
  env: str, configs: List[str], bindings: List[str], seed: int
) -> str:
  """Creates one env as the actors will (same gin, TF-free) before anything
  starts, so a configuration mistake is one message, not a restart loop.
  Returns the problem, or '' if the environment builds."""
  import gin

  try:
    create = registry.env_module(env).create_environment
    gin.parse_config_files_and_bindings(configs, bindings, skip_unknown=True)
    create(num_envs=1, seed=seed).close()
  except Exception as e:
    if os.environ.get("SEED_RL_DEBUG"):
      raise
    return f"{type(e).__name__}: {e}"
  finally:
    gin.clear_config()
  return ""


def _stop_all(procs) -> None:
  """SIGTERM the learner first (it saves a checkpoint), then the rest."""
  for _, proc in procs:
    if proc.poll() is None:
      proc.send_signal(signal.SIGTERM)
  deadline = time.monotonic() + 30
  for _, proc in procs:
    try:
      proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.wait()


if __name__ == "__main__":
  sys.exit(main())
