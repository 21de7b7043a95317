"""A training run on a faulty network: what it keeps, scenario by scenario.

    sudo python benchmarks/network_faults.py                 # every scenario
    sudo python benchmarks/network_faults.py --scenarios latency20,partition30

Each scenario builds fresh hosts (benchmarks/netlab.py: network namespaces
behind an emulated router, each link with its own delay, loss, rate or
partition): the learner on one (CartPole V-trace over TLS with a token,
as in a cluster), two actors on each of two actor hosts. The run trains for
a `--before` window, the fault is applied for the scenario's duration, then
healed, and once cut-off actors step again the run goes on for an `--after`
window. Then the actors and the learner get SIGTERM. One JSON line per
scenario:

- `learner_steps_per_s`, `env_steps_per_s`: before, during and after the
  fault (env steps by host: what the actors stepped, from their stats files);
- `resume_s`: for a fault that cuts hosts off, seconds from the heal until
  every actor of those hosts stepped again (its stats file grew); null where
  none was cut off, "never" if one did not within 60 s (the after window
  starts when they all stepped again, or then);
- `episodes_played` (the actors' own count, their stats files as they
  ended), `episodes_counted` and `episodes_uncounted` (the learner's, its
  result.json as it exited; summed over every learner process in
  `preempt`). A resumed learner leaves out each env's first, partly unseen
  episode (uncounted, at most one per env per resume; it may be one the
  old learner counted, when the batch that ended it was resent after the
  restart), and an actor's last batch, stepped but never sent, holds at
  most one episode per env, so nothing is counted twice when `counted <=
  played`, and nothing is lost when `played <= counted + uncounted +
  envs`;
- `preempted` (scenario `preempt`): the learner's exit code and seconds to
  exit after SIGTERM, its step and return(last100) then, and the step the
  new learner resumed from (its final checkpoint);
- `learner_rss_mib` at the end of each window, `learner_threads`,
  `learner_fds`; actor restarts (`actors_exited`), actors that logged a
  reconnect (`actors_reconnected`: said Hello again and resent a batch),
  actors still up 30 s after their SIGTERM and killed (`actors_killed`),
  and the learner's exit code and seconds to exit after SIGTERM
  (`learner_exit`).

Needs root, iproute2, /dev/net/tun and openssl; says why and exits 2
otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from netlab import Lab, Proc, read_json, unavailable  # noqa: E402

ACTOR_HOSTS = ("actors0", "actors1")
ACTORS_PER_HOST, ENVS_PER_ACTOR = 2, 4
PORT = 8687
# How long a run waits after the heal for cut-off actors to step again before
# its after window starts anyway (their resume_s is then "never").
RESUME_LIMIT_S = 60.0
_LINE = re.compile(
  r"^\[learner +\d+s\] \| step +(\d+) \| env steps +([\d,]+) .*?"
  r"\| return\(last100\) +(\S+) \| episodes +(\d+)"
)
_RESUMED = re.compile(r"resumed from \S+: learner step (\d+)")

# name: (fault, seconds, hosts cut off). A fault is applied on the lab.
Fault = Callable[[Lab], None]


def _on_actor_hosts(**netem) -> Fault:
  def apply(lab: Lab) -> None:
    for host in ACTOR_HOSTS:
      lab.shape(host, **netem)

  return apply


SCENARIOS: Dict[str, Tuple[Optional[Fault], float, Tuple[str, ...]]] = {
  "none": (None, 20.0, ()),
  # Round trips between actors and learner: +2 x delay (both directions).
  "latency20": (_on_actor_hosts(delay_ms=10, jitter_ms=2.5), 20.0, ()),
  "latency100": (_on_actor_hosts(delay_ms=50), 20.0, ()),
  "loss1": (_on_actor_hosts(loss_pct=1), 20.0, ()),
  "loss5": (_on_actor_hosts(loss_pct=5), 20.0, ()),
  "reorder": (_on_actor_hosts(delay_ms=5, reorder_pct=25), 20.0, ()),
  "bandwidth1mbit": (_on_actor_hosts(rate_mbit=1), 20.0, ()),
  "partition30": (lambda lab: lab.partition("actors1"), 30.0, ("actors1",)),
  "partition180": (lambda lab: lab.partition("actors1"), 180.0, ("actors1",)),
  "learner_unreachable30": (
    lambda lab: lab.partition("learner"),
    30.0,
    ACTOR_HOSTS,
  ),
  # SIGTERM to the learner (a cluster moving it); a new learner process on
  # the same host, address and logdir after the fault's seconds.
  "preempt": (None, 20.0, ACTOR_HOSTS),
}


def _env() -> Dict[str, str]:
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  env.pop("SEED_RL_TOKEN", None)
  return env


def _start_learner(
  lab: Lab, tmp: str, certs: str, envs: int, groups: int = 1
) -> Proc:
  return Proc(
    lab.prefix("learner")
    + [sys.executable, "-m", "seed_rl.learner_main", "--env", "classic",
       "--agent", "vtrace",
       "--num_actors", str(len(ACTOR_HOSTS) * ACTORS_PER_HOST),
       "--envs_per_actor", str(envs), "--env_groups", str(groups),
       "--server_address", f"0.0.0.0:{PORT}",
       "--tls_cert", f"{certs}/learner.pem", "--tls_key", f"{certs}/learner.key",
       "--token_file", f"{certs}/token", "--logdir", f"{tmp}/run",
       # Trains until stopped: CartPole's gin file stops at return 475.
       "--gin_bindings", "LearnerConfig.log_every_s = 1.0",
       "--gin_bindings", "LearnerConfig.target_return = None"],
    _env(), ROOT,
  )  # fmt: skip


def _start(
  lab: Lab, tmp: str, certs: str, envs: int, groups: int = 1
) -> Tuple[Proc, Dict[str, List]]:
  learner = _start_learner(lab, tmp, certs, envs, groups)
  actors: Dict[str, List] = {}
  for h, host in enumerate(ACTOR_HOSTS):
    for a in range(ACTORS_PER_HOST):
      actor_id = h * ACTORS_PER_HOST + a
      stats = f"{tmp}/actor{actor_id}.json"
      proc = Proc(
        lab.prefix(host)
        + [sys.executable, "-m", "seed_rl.actors.main", "--env", "classic",
           "--actor_id", str(actor_id), "--num_envs", str(envs),
           "--env_groups", str(groups),
           "--server_address", f"{lab.address('learner')}:{PORT}",
           "--tls_ca", f"{certs}/ca.pem", "--token_file", f"{certs}/token",
           "--gin_config", f"{ROOT}/seed_rl/classic/gin/vtrace.gin",
           "--log_interval_s", "0.5", "--stats_file", stats],
        _env(), ROOT,
      )  # fmt: skip
      actors.setdefault(host, []).append((proc, stats))
  return learner, actors


def _learner_at(learner: Proc, t: float) -> Dict[str, Any]:
  """Learner steps, env steps, episodes and return(last100) (None before the
  first episodes) of its last console line by monotonic time t."""
  last: Dict[str, Any] = {"step": 0, "env_steps": 0, "episodes": 0}
  last["return"] = None
  for when, line in list(learner.lines):
    if when > t:
      break
    m = _LINE.match(line)
    if m:
      ret = m.group(3)
      last = {
        "step": int(m.group(1)),
        "env_steps": int(m.group(2).replace(",", "")),
        "episodes": int(m.group(4)),
        "return": None if ret == "n/a" else float(ret),
      }
  return last


def _host_steps(actors: Dict[str, List]) -> Dict[str, List[int]]:
  return {
    host: [(read_json(stats) or {}).get("env_steps", 0) for _, stats in procs]
    for host, procs in actors.items()
  }


def _rate(a: float, b: float, seconds: float) -> float:
  return round((b - a) / max(seconds, 1e-9), 1)


def run_scenario(
  name: str,
  before: float,
  after: float,
  fault_s: Optional[float] = None,
  envs: int = ENVS_PER_ACTOR,
  groups: int = 1,
) -> Dict[str, Any]:
  """Runs scenario `name` (its fault for `fault_s` if given) on fresh hosts,
  `envs` envs per actor stepped as `groups` env groups (--env_groups)."""
  fault, duration, cut_off = SCENARIOS[name]
  duration = fault_s or duration
  lab = Lab(("learner",) + ACTOR_HOSTS)
  out: Dict[str, Any] = {"scenario": name, "fault_s": duration}
  out["envs_per_actor"], out["env_groups"] = envs, groups
  with tempfile.TemporaryDirectory(prefix="seedrl-netfault-") as tmp:
    certs = f"{tmp}/certs"
    subprocess.run(
      ["bash", f"{ROOT}/scripts/make_certs.sh", certs, "learner.test",
       lab.address("learner")],
      check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    lab.up()
    learner: Optional[Proc] = None
    actors: Dict[str, List] = {}
    run: Optional[_Windows] = None
    try:
      learner, actors = _start(lab, tmp, certs, envs, groups)
      _wait_for_training(learner, actors)
      run = _Windows(learner, actors, envs)
      result = f"{tmp}/run/result.json"
      run.window("before", before)
      if name == "preempt":
        setup = (lab, tmp, certs, envs, groups)
        out["preempted"] = _preempt(run, duration, setup, result)
      elif fault:
        fault(lab)
      run.window("during", 0.0 if name == "preempt" else duration)
      for host in set(ACTOR_HOSTS) | {"learner"}:
        lab.heal(host)
      run.watch_resume(cut_off)
      run.until_resumed(RESUME_LIMIT_S)
      run.window("after", after)
      out.update(_summary(run, cut_off))
      out.update({f"learner_{k}": v for k, v in run.learner.counts().items()})
      out.update(_finish(run, result))
    finally:
      for proc, _ in _all(actors):
        proc.stop(signal.SIGKILL, timeout=10)
      for proc in run.learners if run else [learner]:
        if proc is not None:
          proc.stop(signal.SIGKILL, timeout=10)
      lab.down()
  return out


def _all(actors: Dict[str, List]) -> List:
  return [pair for procs in actors.values() for pair in procs]


def _wait_for_training(learner: Proc, actors: Dict[str, List]) -> None:
  deadline = time.monotonic() + 240
  while _learner_at(learner, time.monotonic())["step"] == 0 or not all(
    s > 0 for steps in _host_steps(actors).values() for s in steps
  ):
    if learner.popen.poll() is not None or time.monotonic() > deadline:
      raise RuntimeError(f"no training started:\n{learner.output[-3000:]}")
    time.sleep(0.5)


class _Windows:
  """The run's clock: marks, the actors' step counts and the learner's RSS
  at the end of each window, and when cut-off hosts stepped again."""

  def __init__(self, learner: Proc, actors: Dict[str, List], envs: int):
    self.actors, self.envs_per_actor = actors, envs
    self.learners = [learner]  # one more after each preemption
    self.episodes_counted: List[int] = []  # by each learner that exited
    self.episodes_uncounted: List[int] = []
    self.marks = {"start": time.monotonic()}
    self.samples = {"start": _host_steps(actors)}
    self.rss: Dict[str, Optional[float]] = {}
    self.resumed: Dict[str, float] = {}
    self._watch: Tuple[str, ...] = ()

  def count_episodes(self, result: Optional[Dict[str, Any]]) -> None:
    """Adds what an exited learner counted (its result.json) to the run's."""
    result = result or {}
    self.episodes_counted.append(result.get("episodes", 0))
    self.episodes_uncounted.append(result.get("uncounted_episodes", 0))

  @property
  def learner(self) -> Proc:
    """The learner process serving now."""
    return self.learners[-1]

  def watch_resume(self, hosts: Tuple[str, ...]) -> None:
    self._watch = hosts
    self._healed = time.monotonic()
    self._healed_steps = _host_steps(self.actors)

  def _note_resumed(self) -> None:
    now = _host_steps(self.actors)
    for host in self._watch:
      grew = all(n > o for n, o in zip(now[host], self._healed_steps[host]))
      if grew and host not in self.resumed:
        self.resumed[host] = time.monotonic() - self._healed

  def until_resumed(self, limit_s: float) -> None:
    """Waits until every watched host stepped again (at most `limit_s`), and
    marks "resumed": the after window measures the run once recovered, so a
    slow machine's reconnection does not read as a stalled learner."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end and set(self._watch) - set(self.resumed):
      self._note_resumed()
      time.sleep(0.25)
    self.marks["resumed"] = time.monotonic()
    self.samples["resumed"] = _host_steps(self.actors)

  def window(self, label: str, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
      self._note_resumed()
      time.sleep(0.25)
    self.marks[label] = time.monotonic()
    self.samples[label] = _host_steps(self.actors)
    self.rss[label] = self.learner.rss_mib()

  def step_at(self, label: str) -> int:
    """The learner step at a mark: of the newest learner that had logged."""
    t = self.marks[label]
    return max(_learner_at(p, t)["step"] for p in self.learners)


def _preempt(
  run: _Windows, away_s: float, setup: Tuple, result: str
) -> Dict[str, Any]:
  """SIGTERM to the learner; a new one after `away_s` on the same logdir."""
  old = run.learner
  before = _learner_at(old, time.monotonic())
  t0 = time.monotonic()
  rc = old.stop(signal.SIGTERM, timeout=120)
  run.count_episodes(read_json(result))
  out: Dict[str, Any] = {
    "exit_code": rc,
    "exit_s": round(time.monotonic() - t0, 1),
    "step_at_sigterm": before["step"],
    "return_at_sigterm": before["return"],
  }
  time.sleep(away_s)
  new = _start_learner(*setup)
  run.learners.append(new)
  deadline = time.monotonic() + 180
  while not _RESUMED.search(new.output) and time.monotonic() < deadline:
    time.sleep(0.25)
  m = _RESUMED.search(new.output)
  # At or past the step of the last console line before SIGTERM: the final
  # checkpoint held everything trained.
  out["resumed_at_step"] = int(m.group(1)) if m else None
  return out


def _finish(run: _Windows, result: str) -> Dict[str, Any]:
  """Stops the actors, then the learner (SIGTERM); what each counted (the
  learner: its result.json as it exited, every learner process summed)."""
  actors, learner = run.actors, run.learner
  out: Dict[str, Any] = {
    "actors_exited": sum(p.popen.poll() is not None for p, _ in _all(actors))
  }
  played = killed = reconnected = 0
  for proc, stats in _all(actors):
    # None: still up 30 s after SIGTERM and killed (its stats file is then
    # one written before the end, short of what it sent).
    killed += proc.stop(signal.SIGTERM, timeout=30) is None
    reconnected += "lost the learner" in proc.output
    # Its last stats file, written as it ended.
    played += (read_json(stats) or {}).get("episodes") or 0
  out["actors_killed"] = killed
  out["actors_reconnected"] = reconnected
  out["episodes_played"] = played
  out["return_last100"] = _learner_at(learner, time.monotonic())["return"]
  t0 = time.monotonic()
  rc = learner.stop(signal.SIGTERM, timeout=120)
  out["learner_exit"] = {"code": rc, "seconds": round(time.monotonic() - t0, 1)}
  run.count_episodes(read_json(result))
  out["episodes_counted"] = sum(run.episodes_counted)
  out["episodes_uncounted"] = sum(run.episodes_uncounted)
  out["learner_resumes"] = len(run.learners) - 1
  return out


def _summary(run: _Windows, cut_off: Tuple[str, ...]) -> Dict[str, Any]:
  # The after window starts once cut-off actors stepped again.
  spans = (("start", "before"), ("before", "during"), ("resumed", "after"))
  steps = {k: run.step_at(k) for span in spans for k in span}
  out: Dict[str, Any] = {"learner_steps_per_s": {}, "env_steps_per_s": {}}
  for a, b in spans:
    seconds = run.marks[b] - run.marks[a]
    out["learner_steps_per_s"][b] = _rate(steps[a], steps[b], seconds)
    out["env_steps_per_s"][b] = {
      host: _rate(sum(run.samples[a][host]), sum(run.samples[b][host]), seconds)
      for host in ACTOR_HOSTS
    }
  out["resume_s"] = (
    {
      h: round(run.resumed[h], 1) if h in run.resumed else "never"
      for h in cut_off
    }
    if cut_off
    else None
  )
  out["learner_rss_mib"] = {
    k: None if v is None else round(v, 1) for k, v in run.rss.items()
  }
  return out


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--scenarios", default=",".join(SCENARIOS))
  p.add_argument("--before", type=float, default=20.0, help="seconds")
  p.add_argument("--after", type=float, default=40.0, help="seconds")
  p.add_argument(
    "--fault_s", type=float, default=None, help="override every fault's length"
  )
  p.add_argument("--envs_per_actor", type=int, default=ENVS_PER_ACTOR)
  p.add_argument(
    "--env_groups",
    type=int,
    default=1,
    help="each actor's envs in this many groups in flight (--env_groups)",
  )
  args = p.parse_args(argv)
  names = args.scenarios.split(",")
  unknown = sorted(set(names) - set(SCENARIOS))
  if unknown:
    p.error(f"--scenarios {unknown}: one of {', '.join(SCENARIOS)}")
  why = unavailable()
  if why:
    print(f"network_faults: cannot run: {why}", file=sys.stderr)
    return 2
  for name in names:
    line = run_scenario(
      name,
      args.before,
      args.after,
      args.fault_s,
      args.envs_per_actor,
      args.env_groups,
    )
    print(json.dumps(line), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
