"""Many real actors against one real learner: connect, fairness, clean end.

    python benchmarks/many_actors.py --actors 256 [--envs_per_actor 1] \
        [--seconds 60] [--connect_timeout_s 240] [--max_starting 8]

Starts one `python -m seed_rl.learner_main` (CartPole, V-trace by default)
and ACTORS `python -m seed_rl.actors.main` processes on this machine, as the
launcher (`python -m seed_rl.train`) does, but started by this script so that
it can pace their start, watch each one and see whether each one exits by
itself. It depends only on command-line flags and files: the learner's port
(it serves once the port accepts connections), the actors' stats files
(`--stats_file`, rewritten every second), the learner's result.json and
/proc.

Timeline: the learner runs for `--connect_timeout_s + --seconds` seconds (its
`--max_seconds`, counted from when it serves), so whatever part of the
connect limit the actors use, at least `--seconds` of steady state follow.
Actors start as a sliding window, the first ones while the learner loads
TensorFlow (they retry their Hello until it serves): at most
`--max_starting` of them are starting at any time (launched, but neither
holding a TCP connection to the learner's port nor connected by their stats
file); each one that gets there lets the next one start. An actor's start
costs ~0.45 s of CPU (importing numpy, gymnasium and gRPC): 256 of them at
once would starve the learner (2 cores here) and each other, while 8 at a
time already keep both cores busy. `--max_starting 0` starts them all at
once.

Checks (the exit status is 1 if any fails):
  - every actor connects within --connect_timeout_s of the learner serving
    (an actor's connect time is its stats file's mtime minus the seconds
    the file says its loop has run: the end of its Hello and env reset;
    the file appears after a second of stepping, so this script waits
    REPORT_GRACE_S more before it stops a run with actors missing);
    `connected` counts the actors connected within the limit, `connect_s`
    is when the last one connected;
  - every actor is served: max/min of the actors' own env-step counts over
    the steady window (all connected, until the learner's stop) <= 3;
  - the run ends by itself: the learner stops on --max_seconds and exits 0,
    then every actor exits 0 by itself (it heard "training is over") within
    --exit_grace_s;
  - no process started by this script (children, grandchildren) is left
    afterwards; leftovers are counted, then killed.

Reports (the last stdout line is one JSON object; progress goes to stderr):
learner RSS (peak and final), learner CPU microseconds per agent step over
the steady window (its process CPU time from /proc over the env steps the
actors made in that window; an agent step is one env step), the same for
all actors together, the machine's busy cores and the part of them neither
the learner nor the actors used (the cores are shared), actor memory (RSS,
and PSS / USS from smaps_rollup, which count shared library pages once),
the machine's lowest MemAvailable, when the actors exited relative to the
learner's stop, and how long the learner's process took to exit after
writing result.json (TensorFlow's teardown: seconds). With --keep, or when
a check fails, the learner's and every actor's log stay in the work dir
named on stderr.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, NamedTuple, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLK_TCK = os.sysconf("SC_CLK_TCK")
# After every actor is connected, this long passes before the steady window
# opens (the last actors' first batches, their stats files' first writes).
SETTLE_S = 2.0
# The window closes this long before the learner's --max_seconds run out
# (its last progress line, the shutdown).
END_MARGIN_S = 1.0
MAX_RATIO = 3.0
# How long after the connect limit this script waits for the actors' stats
# files to show that they connected (within the limit) before giving up.
REPORT_GRACE_S = 15.0


def _log(message: str) -> None:
  print(f"[many_actors] {message}", file=sys.stderr, flush=True)


def _die_with_parent() -> None:
  """preexec_fn: the kernel SIGTERMs the child if this script dies."""
  try:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
  except OSError:
    pass


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _port_open(port: int) -> bool:
  with socket.socket() as s:
    s.settimeout(0.5)
    return s.connect_ex(("localhost", port)) == 0


# ------------------------------------------------------------------ /proc --
def _stat_fields(pid: int) -> Optional[List[str]]:
  """/proc/PID/stat from field 3 (state) on, or None if it is gone."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      text = f.read()
  except OSError:
    return None
  return text[text.rindex(")") + 2 :].split()


def _cpu_s(pid: int) -> Optional[float]:
  """User + system CPU seconds of the process (all its threads)."""
  fields = _stat_fields(pid)
  if fields is None:
    return None
  return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _status_kib(pid: int, *keys: str) -> Dict[str, int]:
  """Fields of /proc/PID/status in KiB (VmRSS, VmHWM)."""
  out: Dict[str, int] = {}
  try:
    with open(f"/proc/{pid}/status") as f:
      for line in f:
        key = line.split(":", 1)[0]
        if key in keys:
          out[key] = int(line.split()[1])
  except OSError:
    pass
  return out


def _rollup_kib(pid: int) -> Dict[str, int]:
  """Rss, Pss and private (USS) KiB of the process from smaps_rollup."""
  out: Dict[str, int] = collections.defaultdict(int)
  try:
    with open(f"/proc/{pid}/smaps_rollup") as f:
      for line in f:
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
          key = parts[0].rstrip(":")
          if key in ("Rss", "Pss"):
            out[key] += int(parts[1])
          elif key in ("Private_Clean", "Private_Dirty"):
            out["Uss"] += int(parts[1])
  except OSError:
    return {}
  return dict(out)


def _machine_busy_s() -> float:
  """CPU seconds all cores spent busy since boot (/proc/stat)."""
  with open("/proc/stat") as f:
    fields = [int(x) for x in f.readline().split()[1:9]]
  idle = fields[3] + fields[4]  # idle, iowait
  return (sum(fields) - idle) / CLK_TCK


def _threads(pid: int) -> Dict[str, int]:
  """'name state wchan' -> count over the threads of `pid`."""
  out: Dict[str, int] = collections.Counter()
  try:
    tids = os.listdir(f"/proc/{pid}/task")
  except OSError:
    return {}
  for tid in tids:
    try:
      with open(f"/proc/{pid}/task/{tid}/stat") as f:
        text = f.read()
      with open(f"/proc/{pid}/task/{tid}/wchan") as f:
        wchan = f.read().strip() or "-"
    except OSError:
      continue
    name = text[text.index("(") + 1 : text.rindex(")")]
    state = text[text.rindex(")") + 2]
    out[f"{name} {state} {wchan}"] += 1
  return dict(out)


def _mem_available_mib() -> float:
  with open("/proc/meminfo") as f:
    for line in f:
      if line.startswith("MemAvailable:"):
        return int(line.split()[1]) / 1024
  return float("nan")


def _connections_to(port: int) -> int:
  """Established TCP connections from this machine to `port` (the client
  ends; the server's own ends have it as their local port)."""
  count = 0
  for path in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
      with open(path) as f:
        rows = f.read().splitlines()[1:]
    except OSError:
      continue
    for row in rows:
      fields = row.split()
      if len(fields) > 3 and fields[3] == "01":  # ESTABLISHED
        if int(fields[2].rsplit(":", 1)[1], 16) == port:
          count += 1
  return count


def _descendants(root: int) -> Dict[int, str]:
  """{pid: start time} of every live process below `root` (zombies too)."""
  parents: Dict[int, int] = {}
  starts: Dict[int, str] = {}
  for name in os.listdir("/proc"):
    if name.isdigit():
      fields = _stat_fields(int(name))
      if fields is not None:
        parents[int(name)] = int(fields[1])
        starts[int(name)] = fields[19]
  children = collections.defaultdict(list)
  for pid, ppid in parents.items():
    children[ppid].append(pid)
  out, todo = {}, [root]
  while todo:
    for child in children.get(todo.pop(), ()):
      out[child] = starts[child]
      todo.append(child)
  return out


def _alive(pid: int, start: str) -> bool:
  """The process `pid` started at `start` still runs (not a zombie)."""
  fields = _stat_fields(pid)
  return fields is not None and fields[19] == start and fields[0] != "Z"


# ---------------------------------------------------------------- actors --
class _Sample(NamedTuple):
  """What one pass of the watch loop read."""

  t: float  # wall clock
  learner_cpu_s: float
  env_steps: List[int]  # per actor, from its stats file
  actor_cpu_s: float  # all live actors, from /proc
  machine_busy_s: float  # every process on the machine


class _Actor:
  """One actor process, what its stats file said and when."""

  def __init__(self, index: int, proc: subprocess.Popen, stats_path: str):
    self.index, self.proc, self.stats_path = index, proc, stats_path
    self.connected_at: Optional[float] = None  # wall clock
    self.env_steps = 0  # the last count its stats file held
    self.exit_code: Optional[int] = None
    self.exited_at: Optional[float] = None

  def read_stats(self) -> None:
    try:
      mtime = os.stat(self.stats_path).st_mtime
      with open(self.stats_path) as f:
        stats = json.load(f)
    except (OSError, ValueError):
      return
    self.env_steps = int(stats["env_steps"])
    if self.connected_at is None:
      # The loop's clock starts after Hello and the env reset.
      self.connected_at = mtime - float(stats["seconds"])


def _learner_command(args, port: int, logdir: str) -> List[str]:
  return [
    sys.executable,
    "-m",
    "seed_rl.learner_main",
    "--env",
    "classic",
    "--agent",
    args.agent,
    "--num_actors",
    str(args.actors),
    "--envs_per_actor",
    str(args.envs_per_actor),
    "--server_address",
    f"localhost:{port}",
    "--logdir",
    logdir,
    "--seed",
    "0",
    "--max_seconds",
    str(args.connect_timeout_s + args.seconds),
    "--gin_bindings",
    "LearnerConfig.stop_at_target = False",
  ]


def _actor_command(args, i: int, port: int, stats_path: str) -> List[str]:
  gin_file = os.path.join(
    ROOT, "seed_rl", "classic", "gin", f"{args.agent}.gin"
  )
  return [
    sys.executable,
    "-m",
    "seed_rl.actors.main",
    "--env",
    "classic",
    "--actor_id",
    str(i),
    "--num_envs",
    str(args.envs_per_actor),
    "--server_address",
    f"localhost:{port}",
    "--seed",
    "0",
    "--gin_config",
    gin_file,
    "--stats_file",
    stats_path,
    "--log_interval_s",
    "1",
  ]


def _popen(cmd: List[str], log_path: str) -> subprocess.Popen:
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
  with open(log_path, "w") as log:
    return subprocess.Popen(
      cmd,
      cwd=ROOT,
      env=env,
      stdin=subprocess.DEVNULL,
      stdout=log,
      stderr=subprocess.STDOUT,
      preexec_fn=_die_with_parent,
    )


def _tail(path: str, lines: int = 15) -> str:
  try:
    with open(path, errors="replace") as f:
      return "".join(f.readlines()[-lines:])
  except OSError:
    return ""


# ------------------------------------------------------------------- run --
class _Run:
  """The processes of one benchmark run and what was sampled of them."""

  def __init__(self, args, workdir: str):
    self.args = args
    self.workdir = workdir
    self.logdir = os.path.join(workdir, "logdir")
    self.stats_dir = os.path.join(workdir, "stats")
    self.logs_dir = os.path.join(workdir, "logs")
    for d in (self.stats_dir, self.logs_dir):
      os.makedirs(d)
    self.port = _free_port()
    self.learner: Optional[subprocess.Popen] = None
    self.actors: List[_Actor] = []
    self.serving_at: Optional[float] = None  # wall clock
    self.learner_start_s: Optional[float] = None
    self.launched_all_at: Optional[float] = None
    self.learner_exited_at: Optional[float] = None
    # From result.json (the learner's last act) to its process's exit.
    self.learner_exit_after_result_s: Optional[float] = None
    self.learner_lingering_threads: Optional[int] = None
    self.stopped_by_us = False  # the learner was stopped, not by itself
    self.failures: List[str] = []
    self.samples: List[_Sample] = []
    self.learner_rss_kib: List[int] = []
    self.learner_hwm_kib = 0
    self.actor_rss_kib_max = 0
    self.actor_rollup: Dict[str, float] = {}
    self.mem_available_min_mib = _mem_available_mib()
    self.seen: Dict[int, str] = {}  # every descendant ever seen
    self.loadavg_start = [round(x, 2) for x in os.getloadavg()]

  # -- starting --------------------------------------------------------------
  def start_learner(self) -> bool:
    """Starts the learner and, while it loads, the first --max_starting
    actors (they retry Hello until it serves); True once it serves."""
    cmd = _learner_command(self.args, self.port, self.logdir)
    self.learner = _popen(cmd, os.path.join(self.logs_dir, "learner.log"))
    _log(f"learner pid {self.learner.pid} on port {self.port}")
    started = time.monotonic()
    deadline = started + self.args.learner_start_timeout_s
    while time.monotonic() < deadline:
      if self.learner.poll() is not None:
        self.failures.append(f"learner exited {self.learner.returncode}")
        return False
      if _port_open(self.port):
        self.serving_at = time.time()
        self.learner_start_s = round(time.monotonic() - started, 1)
        _log(f"learner serving after {self.learner_start_s} s")
        return True
      self._launch_more()
      time.sleep(0.2)
    self.failures.append("learner did not serve in time")
    return False

  def _launch(self, i: int) -> None:
    stats = os.path.join(self.stats_dir, f"actor_{i}.json")
    cmd = _actor_command(self.args, i, self.port, stats)
    proc = _popen(cmd, os.path.join(self.logs_dir, f"actor_{i}.log"))
    self.actors.append(_Actor(i, proc, stats))

  def _connected(self) -> int:
    return sum(a.connected_at is not None for a in self.actors)

  # -- watching --------------------------------------------------------------
  def sample(self, full: bool = False) -> None:
    """Reads the actors' stats files and the learner's CPU and memory;
    `full`: also actor memory and the process tree."""
    assert self.learner is not None
    now = time.time()
    for a in self.actors:
      if a.exit_code is None:
        a.read_stats()
        code = a.proc.poll()
        if code is not None:
          a.exit_code, a.exited_at = code, now
    if self.learner_exited_at is None:
      cpu = _cpu_s(self.learner.pid)
      mem = _status_kib(self.learner.pid, "VmRSS", "VmHWM")
      if cpu is not None and "VmRSS" in mem:
        actor_cpu = sum(
          _cpu_s(a.proc.pid) or 0.0 for a in self.actors if a.exit_code is None
        )
        self.samples.append(
          _Sample(
            now,
            cpu,
            [a.env_steps for a in self.actors],
            actor_cpu,
            _machine_busy_s(),
          )
        )
        self.learner_rss_kib.append(mem["VmRSS"])
        self.learner_hwm_kib = max(self.learner_hwm_kib, mem.get("VmHWM", 0))
    self.mem_available_min_mib = min(
      self.mem_available_min_mib, _mem_available_mib()
    )
    if full:
      self.seen.update(_descendants(os.getpid()))
      live = [a for a in self.actors if a.exit_code is None]
      rss = sum(_status_kib(a.proc.pid, "VmRSS").get("VmRSS", 0) for a in live)
      self.actor_rss_kib_max = max(self.actor_rss_kib_max, rss)

  def sample_actor_rollup(self) -> None:
    """PSS and USS of every actor (all of them alive and connected)."""
    rollups = [_rollup_kib(a.proc.pid) for a in self.actors]
    rollups = [r for r in rollups if r]
    if len(rollups) != len(self.actors):
      return
    n = len(rollups)
    total = {
      k: sum(r.get(k, 0) for r in rollups) / 1024 for k in ("Rss", "Pss", "Uss")
    }
    self.actor_rollup = {
      "actor_rss_mib_total": round(total["Rss"], 1),
      "actor_pss_mib_total": round(total["Pss"], 1),
      "actor_rss_mib_mean": round(total["Rss"] / n, 1),
      "actor_pss_mib_mean": round(total["Pss"] / n, 1),
      "actor_uss_mib_mean": round(total["Uss"] / n, 1),
    }

  def progress(self) -> None:
    assert self.serving_at is not None
    t = time.time() - self.serving_at
    steps = sum(a.env_steps for a in self.actors)
    rss = self.learner_rss_kib[-1] / 1024 if self.learner_rss_kib else 0
    cores = ""
    if len(self.samples) >= 6:
      a, b = self.samples[-6], self.samples[-1]
      t0, c0, t1, c1 = a.t, a.learner_cpu_s, b.t, b.learner_cpu_s
      cores = f", learner {(c1 - c0) / max(t1 - t0, 1e-9):.2f} cores"
    _log(
      f"t={t:5.0f}s launched {len(self.actors)}/{self.args.actors}, "
      f"connected {self._connected()}, actor env steps {steps:,d}, "
      f"learner RSS {rss:.0f} MiB{cores}, "
      f"MemAvailable {_mem_available_mib():,.0f} MiB"
    )

  def _starting(self) -> int:
    """Launched actors still starting: not yet holding a TCP connection to
    the learner's port (importing numpy, gymnasium, gRPC) nor connected by
    their stats file. The TCP count comes earlier than the stats file (the
    first write follows a second of stepping)."""
    launched = len(self.actors)
    past_import = max(
      self._connected(), min(launched, _connections_to(self.port))
    )
    return launched - past_import

  def _launch_more(self) -> None:
    """Tops the actors that are starting up to --max_starting."""
    args = self.args
    limit = args.max_starting or args.actors
    launched = len(self.actors)
    room = min(limit - self._starting(), args.actors - launched)
    if room <= 0:
      return
    for i in range(launched, launched + room):
      self._launch(i)
    if len(self.actors) == args.actors:
      self.launched_all_at = time.time()
      _log(f"started all {args.actors} actors")

  def run(self) -> None:
    """Starts the actors (at most --max_starting at a time) and watches
    until the learner exits (or the connect deadline passes with actors
    missing: then it stops the learner)."""
    assert self.learner is not None and self.serving_at is not None
    args = self.args
    deadline = self.serving_at + args.connect_timeout_s
    last_sample = last_progress = last_full = 0.0
    rollup_done = False
    while self.learner.poll() is None:
      now = time.time()
      if len(self.actors) < args.actors:
        self._launch_more()
      if now - last_sample < 1.0:
        time.sleep(0.2)
        continue
      last_sample = now
      full = now - last_full >= 5.0
      self.sample(full=full)
      if full:
        last_full = now
      all_in = self._connected() == args.actors
      if all_in and not rollup_done and now > self._all_connected_at() + 5:
        self.sample_actor_rollup()
        rollup_done = bool(self.actor_rollup)
      # An actor's stats file shows its connect time after its first steps
      # (which wait for the learner's first inference, tracing included).
      if not all_in and now > deadline + REPORT_GRACE_S:
        _log(
          f"{args.actors - self._connected()} actors not connected "
          f"{args.connect_timeout_s + REPORT_GRACE_S:g} s after the learner "
          "served; stopping the learner (SIGINT)"
        )
        self.stopped_by_us = True
        self.learner.send_signal(signal.SIGINT)
        break
      if now - last_progress >= 5.0:
        self.progress()
        last_progress = now
    self._wait_for_learner()
    self.sample(full=True)

  def _wait_for_learner(self, timeout_s: float = 180.0) -> None:
    """Waits for the learner's exit, still watching the actors; logs the
    learner's threads if it lingers after writing result.json."""
    assert self.learner is not None
    result = os.path.join(self.logdir, "result.json")
    deadline = time.time() + timeout_s
    logged = False
    while self.learner.poll() is None and time.time() < deadline:
      self.sample(full=False)
      if os.path.exists(result) and not logged:
        lingering = time.time() - os.stat(result).st_mtime
        if lingering > 5.0:
          threads = _threads(self.learner.pid)
          top = sorted(threads.items(), key=lambda kv: -kv[1])[:8]
          _log(
            f"learner still running {lingering:.0f} s after writing "
            f"result.json; its threads (name state wchan: count): {top}"
          )
          self.learner_lingering_threads = sum(threads.values())
          logged = True
      time.sleep(0.5)
    self.learner_exited_at = time.time()
    if self.learner.poll() is None:
      self.failures.append(f"the learner did not exit within {timeout_s:g} s")
    elif os.path.exists(result):
      self.learner_exit_after_result_s = round(
        self.learner_exited_at - os.stat(result).st_mtime, 1
      )

  def _all_connected_at(self) -> float:
    return max(a.connected_at or float("inf") for a in self.actors)

  def wait_for_actors(self) -> None:
    """Waits --exit_grace_s for every actor to exit by itself."""
    deadline = time.time() + self.args.exit_grace_s
    while time.time() < deadline:
      self.sample(full=False)
      if all(a.exit_code is not None for a in self.actors):
        return
      time.sleep(0.5)
    self.sample(full=False)

  def leftovers(self) -> List[int]:
    """Processes this script started (at any depth) that still run; every
    one is then stopped (SIGTERM, 5 s, SIGKILL) and reaped."""
    self.seen.update(_descendants(os.getpid()))
    left = [pid for pid, start in self.seen.items() if _alive(pid, start)]
    for pid in left:
      try:
        os.kill(pid, signal.SIGTERM)
      except OSError:
        pass
    deadline = time.time() + 5
    while time.time() < deadline and any(_alive(p, self.seen[p]) for p in left):
      self._reap()
      time.sleep(0.2)
    for pid in left:
      if _alive(pid, self.seen[pid]):
        try:
          os.kill(pid, signal.SIGKILL)
        except OSError:
          pass
    time.sleep(0.2)
    self._reap()
    return left

  def write_actor_table(self, path: str) -> None:
    """Per actor: pid, connect and exit times (wall clock), exit code,
    env steps (the last stats file)."""
    rows = [
      {
        "actor": a.index,
        "pid": a.proc.pid,
        "connected_at": a.connected_at,
        "exited_at": a.exited_at,
        "exit_code": a.exit_code,
        "env_steps": a.env_steps,
      }
      for a in self.actors
    ]
    with open(path, "w") as f:
      json.dump({"serving_at": self.serving_at, "actors": rows}, f)

  def _reap(self) -> None:
    for proc in [self.learner] + [a.proc for a in self.actors]:
      if proc is not None:
        proc.poll()

  # -- results ---------------------------------------------------------------
  def result(self) -> dict:
    assert self.learner is not None
    args = self.args
    serving = self.serving_at or time.time()
    connected = sum(
      a.connected_at is not None
      and a.connected_at - serving <= args.connect_timeout_s
      for a in self.actors
    )
    connect_s = (
      round(self._all_connected_at() - serving, 2)
      if self._connected() == args.actors
      else None
    )
    window = self._window()
    learner_result = self._learner_result()
    reason = learner_result.get("reason", "")
    codes = collections.Counter(a.exit_code for a in self.actors)
    actors_exited = [a.exited_at for a in self.actors if a.exited_at]
    learner_by_itself = (
      not self.stopped_by_us
      and self.learner.returncode == 0
      and "max_seconds" in str(reason)
    )
    ended = (
      learner_by_itself
      and len(self.actors) == args.actors
      and set(codes) == {0}
    )
    rss = self.learner_rss_kib
    out = {
      "actors": args.actors,
      "envs_per_actor": args.envs_per_actor,
      "agent": args.agent,
      "connected": connected,
      "connect_s": connect_s,
      "connect_timeout_s": args.connect_timeout_s,
      "max_starting": args.max_starting,
      "learner_start_s": self.learner_start_s,
      # 0: all started before the learner served.
      "launch_s": (
        round(max(0.0, self.launched_all_at - serving), 1)
        if self.launched_all_at
        else None
      ),
      **window,
      "ended_by_itself": ended,
      "learner_exit_code": self.learner.returncode,
      "learner_exit_after_result_s": self.learner_exit_after_result_s,
      "learner_stop_reason": reason,
      "actor_exit_codes": {
        str(k): v for k, v in sorted(codes.items(), key=str)
      },
      # From the end of the learner's --max_seconds to the actors' exits
      # (noticed within about a second): min, median, max.
      "actor_exit_s_after_stop": (
        _spread([t - self._stop_time() for t in actors_exited])
        if actors_exited and self.serving_at
        else None
      ),
      # Actors still running after --exit_grace_s, and how many of them had
      # connected (they did not hear that training is over: they wait for
      # the learner to come back).
      "actors_not_exited": sum(a.exit_code is None for a in self.actors),
      "actors_not_exited_connected": sum(
        a.exit_code is None and a.connected_at is not None for a in self.actors
      ),
      "leftover_processes": None,  # filled in after the count
      "learner_rss_mib": {
        "peak": round(max(self.learner_hwm_kib, max(rss, default=0)) / 1024, 1),
        "final": round(rss[-1] / 1024, 1) if rss else None,
      },
      "env_steps": sum(a.env_steps for a in self.actors),
      "learner_env_steps": learner_result.get("env_steps"),
      "learner_steps": learner_result.get("learner_steps"),
      "actor_rss_mib_total_max": round(self.actor_rss_kib_max / 1024, 1),
      **self.actor_rollup,
      "mem_available_min_mib": round(self.mem_available_min_mib),
      "cpus": os.cpu_count(),
      # Other work on the machine (1, 5, 15-minute load averages) at the
      # start and the end: the cores are shared.
      "loadavg_start": self.loadavg_start,
      "loadavg_end": [round(x, 2) for x in os.getloadavg()],
    }
    return out

  def _window(self) -> dict:
    """Per-actor env steps and learner CPU between the first sample after
    every actor connected (+SETTLE_S) and the last one before the learner's
    time ran out (-END_MARGIN_S)."""
    empty = {
      "window_s": None,
      "window_env_steps": None,
      "env_steps_per_s": None,
      "actor_env_steps_min": None,
      "actor_env_steps_max": None,
      "max_min_env_steps_ratio": None,
      "learner_cpu_cores": None,
      "learner_cpu_us_per_agent_step": None,
      "actor_cpu_cores": None,
      "actor_cpu_us_per_agent_step": None,
      "machine_busy_cores": None,
      "other_cores": None,
    }
    if self._connected() != self.args.actors or self.serving_at is None:
      return empty
    opens = self._all_connected_at() + SETTLE_S
    closes = self._stop_time() - END_MARGIN_S
    inside = [s for s in self.samples if opens <= s.t <= closes]
    if len(inside) < 2:
      return empty
    first, last = inside[0], inside[-1]
    per_actor = [b - a for a, b in zip(first.env_steps, last.env_steps)]
    steps = sum(per_actor)
    lo, hi = min(per_actor), max(per_actor)
    dt = last.t - first.t
    learner = last.learner_cpu_s - first.learner_cpu_s
    actors = last.actor_cpu_s - first.actor_cpu_s
    machine = last.machine_busy_s - first.machine_busy_s
    return {
      "window_s": round(dt, 1),
      "window_env_steps": steps,
      "env_steps_per_s": round(steps / dt, 1),
      "actor_env_steps_min": lo,
      "actor_env_steps_max": hi,
      "max_min_env_steps_ratio": round(hi / lo, 3) if lo > 0 else None,
      "learner_cpu_cores": round(learner / dt, 3),
      "learner_cpu_us_per_agent_step": (
        round(learner / steps * 1e6, 1) if steps else None
      ),
      "actor_cpu_cores": round(actors / dt, 3),
      "actor_cpu_us_per_agent_step": (
        round(actors / steps * 1e6, 1) if steps else None
      ),
      # Every process on the machine, and what neither the learner nor
      # the actors used (this script, other people's work).
      "machine_busy_cores": round(machine / dt, 3),
      "other_cores": round((machine - learner - actors) / dt, 3),
    }

  def _stop_time(self) -> float:
    """When the learner's --max_seconds run out (wall clock)."""
    assert self.serving_at is not None
    return self.serving_at + self.args.connect_timeout_s + self.args.seconds

  def _learner_result(self) -> dict:
    try:
      with open(os.path.join(self.logdir, "result.json")) as f:
        return json.load(f)
    except (OSError, ValueError):
      return {}


def _spread(values: List[float]) -> Dict[str, float]:
  values = sorted(values)
  return {
    "min": round(values[0], 1),
    "median": round(values[len(values) // 2], 1),
    "max": round(values[-1], 1),
  }


def _checks(out: dict) -> List[str]:
  """What failed, from the result's figures."""
  failures = []
  if out["connected"] != out["actors"]:
    last = out["connect_s"]
    failures.append(
      f"{out['connected']}/{out['actors']} actors connected within "
      f"{out['connect_timeout_s']:g} s ("
      + ("some never did" if last is None else f"the last after {last} s")
      + ")"
    )
  ratio = out["max_min_env_steps_ratio"]
  if ratio is None or ratio > MAX_RATIO:
    failures.append(f"max/min env steps ratio {ratio} (limit {MAX_RATIO:g})")
  if not out["ended_by_itself"]:
    failures.append(
      f"did not end by itself (learner exit {out['learner_exit_code']}, "
      f"reason {out['learner_stop_reason']!r}, actor exit codes "
      f"{out['actor_exit_codes']})"
    )
  if out["leftover_processes"]:
    failures.append(f"{out['leftover_processes']} leftover processes")
  return failures


def _parse_args(argv) -> argparse.Namespace:
  p = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawTextHelpFormatter
  )
  p.add_argument("--actors", type=int, default=256)
  p.add_argument("--envs_per_actor", type=int, default=1)
  p.add_argument(
    "--seconds",
    type=float,
    default=60.0,
    help="steady state at least this long: the learner's --max_seconds is "
    "connect_timeout_s + seconds",
  )
  # Starting an actor costs ~0.45 s of CPU (imports): 256 of them take
  # ~115 CPU-seconds, 125-173 s on 2 shared cores (RESULTS.md).
  p.add_argument("--connect_timeout_s", type=float, default=240.0)
  p.add_argument(
    "--max_starting",
    type=int,
    default=8,
    help="at most this many actors starting at a time (launched, not yet "
    "connected); 0: all at once",
  )
  p.add_argument(
    "--agent", default="vtrace", help="a classic agent with a gin file"
  )
  p.add_argument(
    "--exit_grace_s",
    type=float,
    default=30.0,
    help="how long actors may take to exit after the learner did",
  )
  p.add_argument("--learner_start_timeout_s", type=float, default=180.0)
  p.add_argument(
    "--keep",
    action="store_true",
    help="keep the logs and logdir (path on stderr)",
  )
  args = p.parse_args(argv)
  if args.actors < 1 or args.envs_per_actor < 1 or args.max_starting < 0:
    p.error("--actors and --envs_per_actor must be >= 1, --max_starting >= 0")
  return args


def main(argv=None) -> int:
  args = _parse_args(argv)
  workdir = tempfile.mkdtemp(prefix="many-actors-")
  run = _Run(args, workdir)
  _log(
    f"{args.actors} actors x {args.envs_per_actor} CartPole envs, "
    f"{args.agent}; learner --max_seconds "
    f"{args.connect_timeout_s + args.seconds:g}; work dir {workdir}"
  )
  out: dict = {}
  try:
    if run.start_learner():
      run.run()
      run.wait_for_actors()
    elif run.learner is not None:
      _log("learner log:\n" + _tail(os.path.join(run.logs_dir, "learner.log")))
    out = run.result()
  finally:
    left = run.leftovers()
  out["leftover_processes"] = len(left)
  failures = run.failures + _checks(out)
  out["passed"] = not failures
  out["failures"] = failures
  if failures:
    _log("FAILED: " + "; ".join(failures))
    _log(
      "learner log tail:\n" + _tail(os.path.join(run.logs_dir, "learner.log"))
    )
    for a in run.actors:
      if a.exit_code not in (0, None) or a.connected_at is None:
        _log(
          f"actor {a.index} log tail:\n"
          + _tail(os.path.join(run.logs_dir, f"actor_{a.index}.log"), 8)
        )
        break
  if args.keep or failures:
    run.write_actor_table(os.path.join(workdir, "actors.json"))
    _log(f"logs and actors.json (per actor) kept in {workdir}")
  else:
    shutil.rmtree(workdir, ignore_errors=True)
  print(json.dumps(out), flush=True)
  return 0 if not failures else 1


if __name__ == "__main__":
  sys.exit(main())
