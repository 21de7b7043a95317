"""Soak benchmark: CartPole V-trace under constant faults for a long while.

    python benchmarks/soak.py [--minutes 10] [--kill_every_s 5] \
        [--restart_learner_every_s 600] [--network --fault_every_s 120]

Starts one learner (`python -m seed_rl.learner_main`) and --num_actors actor
processes. Every --kill_every_s seconds one actor, picked at random, is
SIGKILLed and started again at once (the learner must release its stream,
drop its partial unrolls and serve the new process). Meanwhile a fuzzing
client (benchmarks/soak_fuzz.py), on the env ids of one more actor slot,
sends randomly mutated Step messages and checks that each is served or
refused with INVALID_ARGUMENT. The learner process's RSS, thread count and
open file descriptors are sampled from /proc.

With --restart_learner_every_s the learner also gets SIGTERM on that
schedule (it writes its final checkpoint) and a new one starts on the same
port and logdir, as a rescheduled pod behind a Service would: it resumes,
and the actors and the fuzzer reconnect by themselves.

With --network the learner, half the actors and the other half with the
fuzzer run on three hosts of an emulated network (benchmarks/netlab.py:
network namespaces, needs root), and every --fault_every_s one fault of
FAULTS, in turn, is applied for its seconds and then healed: latency with
jitter, packet loss, one actor host partitioned, the learner unreachable.

Prints one JSON line: learner and env steps over time (every window after
warm-up must show learner progress), RSS growth after warm-up (%), threads
and fds after warm-up and at the end, per learner process (`lives`: each
one's own warm-up, RSS, threads, fds, and where its memory is: malloc's
live and kept bytes and Python's small blocks, from the learner's own
`system/*` scalars, seed_rl/common/memory.py), kills, restarts and faults,
fuzz outcomes, and `passed` (steps always increasing, RSS growth below
--max_rss_growth_pct within every learner process, no thread or fd growth
beyond a small slack, no unexpected fuzz answer, every learner exit 0; a
fuzzed call may end CANCELLED only while a learner is stopping).
Exit status 0 iff passed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import soak_report as report  # noqa: E402
from netlab import Lab, Proc, unavailable  # noqa: E402

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
ENV["PYTHONPATH"] = ROOT + os.pathsep + ENV.get("PYTHONPATH", "")
GIN = os.path.join(ROOT, "seed_rl", "classic", "gin", "vtrace.gin")
# Thread and fd counts may differ by this much between the end of warm-up and
# the end (a gRPC worker or a socket in flight at the moment of sampling).
SLACK = 4
# 40 env steps per learner step instead of 320: actors killed every few
# seconds still complete unrolls, and the learner trains often.
SMALL_BATCHES = [
  "VtraceConfig.unroll_length = 10",
  "VtraceConfig.batch_size = 4",
]
CANCEL_SLACK_S = 2.0
ACTOR_HOSTS = ("actors0", "actors1")  # with --network; the fuzzer on the last


def _both_actor_hosts(**netem) -> Callable[[Lab], None]:
  def apply(lab: Lab) -> None:
    for host in ACTOR_HOSTS:
      lab.shape(host, **netem)

  return apply


# (name, seconds, applied to the lab); every fault is healed after it.
FAULTS: List[Tuple[str, float, Callable[[Lab], None]]] = [
  ("latency20", 30.0, _both_actor_hosts(delay_ms=10, jitter_ms=2.5)),
  ("loss1", 30.0, _both_actor_hosts(loss_pct=1)),
  ("partition30", 30.0, lambda lab: lab.partition(ACTOR_HOSTS[-1])),
  ("latency100", 30.0, _both_actor_hosts(delay_ms=50)),
  ("loss5", 30.0, _both_actor_hosts(loss_pct=5)),
  ("learner_unreachable30", 30.0, lambda lab: lab.partition("learner")),
]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _proc_stats(pid: int) -> Optional[Dict[str, float]]:
  """RSS (MiB), threads and open fds of `pid` from /proc; None if gone."""
  try:
    with open(f"/proc/{pid}/status") as f:
      status = dict(line.split(":", 1) for line in f if ":" in line)
    fds = len(os.listdir(f"/proc/{pid}/fd"))
  except (FileNotFoundError, ProcessLookupError):
    return None
  return {
    "rss_mb": int(status["VmRSS"].split()[0]) / 1024.0,
    "threads": int(status["Threads"]),
    "fds": fds,
  }


class Learner:
  """The learner process; its progress lines give learner steps."""

  def __init__(self, args: List[str], prefix: List[str]):
    # `ip netns exec` execs the learner: the pid is the learner's own.
    self.popen = subprocess.Popen(
      prefix + [sys.executable, "-m", "seed_rl.learner_main", *args],
      cwd=ROOT,
      env=ENV,
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
    )
    self.step = -1
    self.env_steps = 0
    self.tail: List[str] = []
    threading.Thread(target=self._read, daemon=True).start()

  def _read(self) -> None:
    assert self.popen.stdout is not None
    for line in self.popen.stdout:
      self.tail = (self.tail + [line])[-40:]
      if line.startswith("[learner") and "| step" in line:
        parts = line.split(" | ")
        self.step = int(parts[1].split()[-1])
        self.env_steps = int(parts[2].split()[2].replace(",", ""))


class _Fuzz:
  """benchmarks/soak_fuzz.py as a process; `stop()` gives its counts."""

  def __init__(self, prefix: List[str], address: str, actor_id: int, k: int,
               interval_s: float):  # fmt: skip
    script = os.path.join(HERE, "soak_fuzz.py")
    self.proc = Proc(
      prefix
      + [sys.executable, script, address, str(actor_id), str(k),
         str(interval_s)],
      ENV, ROOT,
    )  # fmt: skip

  def stop(self) -> Dict[str, Any]:
    self.proc.stop(signal.SIGTERM, 30)
    for _, line in reversed(self.proc.lines):
      if line.startswith("{"):
        return json.loads(line)
    return {
      "unexpected": [f"the fuzzer printed no counts: {self.proc.output[-500:]}"]
    }


def _parse(argv) -> argparse.Namespace:
  p = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawTextHelpFormatter
  )
  p.add_argument("--minutes", type=float, default=10.0)
  p.add_argument("--kill_every_s", type=float, default=5.0)
  p.add_argument(
    "--restart_learner_every_s",
    type=float,
    default=0.0,
    help="SIGTERM the learner this often and start a new one on the same "
    "port and logdir (what a rescheduled pod behind a Service is); 0: never",
  )
  p.add_argument(
    "--network",
    action="store_true",
    help="learner, actors and fuzzer on three emulated network hosts, with "
    "a fault every --fault_every_s (needs root; see benchmarks/netlab.py)",
  )
  p.add_argument("--fault_every_s", type=float, default=120.0)
  p.add_argument("--num_actors", type=int, default=2)
  p.add_argument("--envs_per_actor", type=int, default=4)
  p.add_argument(
    "--warmup_s",
    type=float,
    default=None,
    help="RSS/threads/fds baseline taken after this long, and not before "
    "the first learner step (default: a fifth of the run, at most 120 s); "
    "with restarts, after this long in each learner's life",
  )
  p.add_argument(
    "--max_rss_growth_pct",
    type=float,
    default=10.0,
    help="the most RSS may grow within one learner process after its "
    "warm-up for the soak to pass",
  )
  p.add_argument("--sample_every_s", type=float, default=2.0)
  p.add_argument("--fuzz_interval_s", type=float, default=0.02)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument(
    "--gin_bindings",
    action="append",
    default=None,
    help="learner gin bindings (default: small V-trace batches, "
    f"{' ; '.join(SMALL_BATCHES)}, so learner steps come often)",
  )
  return p.parse_args(argv)


class _Soak:
  """The processes of one soak, the faults applied, what was sampled."""

  def __init__(self, args: argparse.Namespace, logdir: str, lab: Optional[Lab]):
    self.args, self.lab = args, lab
    self.port = _free_port()
    k, n = args.envs_per_actor, args.num_actors
    if lab is None:
      bind = self.address = f"localhost:{self.port}"
      extra = []
    else:
      self.address = f"{lab.address('learner')}:{self.port}"
      bind, extra = f"0.0.0.0:{self.port}", ["--insecure"]
    self.learner_args = [
      "--env=classic",
      "--agent=vtrace",
      f"--num_actors={n + 1}",  # the last slot is the fuzzer's
      f"--envs_per_actor={k}",
      f"--server_address={bind}",
      f"--logdir={logdir}",
      *extra,
      "--gin_bindings=LearnerConfig.target_return = None",
      "--gin_bindings=LearnerConfig.log_every_s = 1.0",
      "--gin_bindings=LearnerConfig.checkpoint_every_s = 30.0",
    ] + [f"--gin_bindings={b}" for b in (args.gin_bindings or SMALL_BATCHES)]
    self.learner = Learner(self.learner_args, self._prefix("learner"))
    self.actors = {i: self._start_actor(i) for i in range(n)}
    self.fuzz = _Fuzz(
      self._prefix(ACTOR_HOSTS[-1]), self.address, n, k, args.fuzz_interval_s
    )
    self.samples: List[Dict[str, float]] = []
    self.life_starts: List[float] = [0.0]  # run seconds each learner began
    self.restart_codes: List[Optional[int]] = []
    # Wall-clock (time.time) spans from each SIGTERM to the learner's exit:
    # the only times a fuzzed call may end CANCELLED.
    self.learner_stops: List[Tuple[float, float]] = []
    self.faults: List[Dict[str, Any]] = []
    self.kills = self.unexpected_exits = 0
    self.last_step, self.last_env_steps = -1, 0
    self.t0 = time.monotonic()

  def _prefix(self, host: str) -> List[str]:
    return [] if self.lab is None else self.lab.prefix(host)

  def _start_actor(self, actor_id: int) -> subprocess.Popen:
    return subprocess.Popen(
      self._prefix(ACTOR_HOSTS[actor_id % 2])
      + [sys.executable, "-m", "seed_rl.actors.main", "--env=classic",
         f"--actor_id={actor_id}", f"--num_envs={self.args.envs_per_actor}",
         f"--server_address={self.address}", f"--gin_config={GIN}",
         "--connect_timeout_s=120"],
      cwd=ROOT,
      env=ENV,
      stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL,
    )  # fmt: skip

  def wait_for_first_step(self, learner: "Learner") -> bool:
    """Until `learner` logs a step (TF import and graph building are start-
    up, not soak); False if it exits or 300 s pass."""
    start = time.monotonic()
    while learner.step < 0:
      if learner.popen.poll() is not None or time.monotonic() - start > 300:
        print("".join(learner.tail), file=sys.stderr)
        return False
      time.sleep(0.2)
    return True

  def run(self, duration: float) -> None:
    args, rand = self.args, random.Random(self.args.seed)
    self.t0 = last_kill = last_sample = last_restart = time.monotonic()
    next_fault, healing_at = self.t0 + args.fault_every_s / 2, None
    while (now := time.monotonic()) - self.t0 < duration:
      if self.learner.popen.poll() is not None:
        break
      for i, actor in self.actors.items():
        if actor.poll() is not None:  # exited on its own: restart it
          self.unexpected_exits += 1
          self.actors[i] = self._start_actor(i)
      if now - last_kill >= args.kill_every_s:
        self._kill_one(rand)
        last_kill = now
      if self.lab is not None and healing_at is None and now >= next_fault:
        healing_at = now + self._fault_begins(now)
        next_fault += args.fault_every_s
      elif healing_at is not None and now >= healing_at:
        self._fault_ends(now)
        healing_at = None
      every = args.restart_learner_every_s
      # Not while a fault holds: a learner cut off from its actors logs no
      # first step, which the restart waits for.
      if every and now - last_restart >= every and healing_at is None:
        if not self._restart_learner():
          break
        last_restart = time.monotonic()
      if now - last_sample >= args.sample_every_s:
        self._sample(now)
        last_sample = now
      time.sleep(0.1)
    if healing_at is not None:
      self._fault_ends(time.monotonic())

  def _fault_begins(self, now: float) -> float:
    """Applies the next fault of FAULTS; returns how long it lasts."""
    assert self.lab is not None
    name, seconds, apply = FAULTS[len(self.faults) % len(FAULTS)]
    apply(self.lab)
    self.faults.append(
      {"fault": name, "t": round(now - self.t0, 1), "step": self.learner.step}
    )
    return seconds

  def _fault_ends(self, now: float) -> None:
    assert self.lab is not None
    for host in self.lab.hosts:
      self.lab.heal(host)
    self.faults[-1]["healed_t"] = round(now - self.t0, 1)
    self.faults[-1]["step_at_heal"] = self.learner.step

  def _kill_one(self, rand: random.Random) -> None:
    victim = rand.randrange(self.args.num_actors)
    self.actors[victim].send_signal(signal.SIGKILL)
    self.actors[victim].wait(30)
    self.actors[victim] = self._start_actor(victim)
    self.kills += 1

  def _restart_learner(self) -> bool:
    """SIGTERM (a final checkpoint), then a new learner on the same port
    and logdir, which resumes; the actors and the fuzzer reconnect."""
    sent = time.time()
    self.restart_codes.append(_stop(self.learner, signal.SIGTERM))
    self.learner_stops.append((sent, time.time()))
    self.learner = Learner(self.learner_args, self._prefix("learner"))
    self.life_starts.append(round(time.monotonic() - self.t0, 1))
    return self.wait_for_first_step(self.learner)

  def _sample(self, now: float) -> None:
    stats = _proc_stats(self.learner.popen.pid)
    if stats is None:
      return
    # A new learner logs no step until its first line: carry the last one.
    if self.learner.step >= 0:
      self.last_step = self.learner.step
      self.last_env_steps = self.learner.env_steps
    self.samples.append(
      {
        "t": round(now - self.t0, 1),
        "life": len(self.life_starts) - 1,
        "step": self.last_step,
        "env_steps": self.last_env_steps,
        **stats,
      }
    )

  def stop(self) -> Tuple[Optional[int], Dict[str, Any]]:
    """Stops everything: the last learner's exit code, the fuzzer's counts."""
    fuzz = self.fuzz.stop()
    rc = _stop(self.learner, signal.SIGINT)
    for actor in self.actors.values():
      try:
        actor.wait(30)
      except subprocess.TimeoutExpired:
        actor.kill()
        actor.wait(30)
    return rc, fuzz


def _stop(learner: "Learner", sig: int) -> Optional[int]:
  learner.popen.send_signal(sig)
  try:
    return learner.popen.wait(120)
  except subprocess.TimeoutExpired:
    learner.popen.kill()
    return learner.popen.wait(30)


def _cancelled_while_stopping(
  fuzz: Dict[str, Any], stops: List[Tuple[float, float]]
) -> Dict[str, Any]:
  """The fuzzer's counts with its CANCELLED calls counted: each must end
  while a learner was stopping (its server cancels the calls in flight;
  actors take that as the learner gone, seed_rl/grpc/client.py), give or
  take `CANCEL_SLACK_S`; any other is unexpected."""
  fuzz = dict(fuzz)
  cancelled = fuzz.pop("cancelled_at", [])
  stray = [
    t
    for t in cancelled
    if not any(a - CANCEL_SLACK_S <= t <= b + CANCEL_SLACK_S for a, b in stops)
  ]
  fuzz["cancelled_while_stopping"] = len(cancelled) - len(stray)
  fuzz["unexpected"] = list(fuzz.get("unexpected", [])) + [
    f"CANCELLED at {t:.1f} while no learner was stopping" for t in stray
  ]
  return fuzz


def main(argv=None) -> int:
  args = _parse(argv)
  duration = args.minutes * 60.0
  warmup = (
    args.warmup_s if args.warmup_s is not None else min(120.0, duration / 5)
  )
  window = max(10.0, duration / 10)  # steps must rise in every window
  lab = None
  if args.network:
    why = unavailable()
    if why:
      print(f"--network needs emulated hosts: {why}", file=sys.stderr)
      return 2
    lab = Lab(["learner", *ACTOR_HOSTS])
    lab.up()
  logdir = tempfile.mkdtemp(prefix="seed_rl_soak_")
  try:
    soak = _Soak(args, logdir, lab)
    if not soak.wait_for_first_step(soak.learner):
      soak.stop()
      return 1
    try:
      soak.run(duration)
    finally:
      learner_rc, fuzz = soak.stop()
    result = report.result(args, soak, warmup, window, logdir)
  finally:
    if lab is not None:
      lab.down()
  result["learner_exit"] = learner_rc
  result["fuzz"] = _cancelled_while_stopping(fuzz, soak.learner_stops)
  result["passed"] = bool(
    result["steps_always_increasing"]
    and result["rss_growth_after_warmup_pct"] < args.max_rss_growth_pct
    and all(
      life["threads"][1] <= life["threads"][0] + SLACK
      and life["fds"][1] <= life["fds"][0] + SLACK
      for life in result["lives"]
    )
    and not fuzz.get("unexpected")
    and learner_rc == 0
    and all(rc == 0 for rc in soak.restart_codes)
  )
  print(json.dumps(result))
  if learner_rc != 0:
    print("".join(soak.learner.tail), file=sys.stderr)
  shutil.rmtree(logdir, ignore_errors=True)
  return 0 if result["passed"] else 1


if __name__ == "__main__":
  sys.exit(main())
