"""Does a preempted run's learning curve go on where it was?

    python benchmarks/preempt_resume.py --agent vtrace --before 20 --after 30
    python benchmarks/preempt_resume.py --agent r2d2 --before 60 --after 60

CartPole, real learner_main and actors.main processes on localhost, the
actors given `--server_address file:PATH`. Three learners:

1. `preempted`: trains for `--before` seconds of its own clock, then gets
   SIGTERM (what Kubernetes and Vertex AI send) and writes its final
   checkpoint (R2D2: with its replay, `LearnerConfig.checkpoint_replay`).
2. `resumed`: a new process on another port and the same logdir, 2 s later;
   the actors, left running, find it through the address file. It trains
   for `--after` seconds.
3. `fresh`: the control, a learner from scratch on a new logdir with new
   actors, never stopped, for `--before` + `--after` seconds. Its first
   `--after` seconds are what the resumed learner's would give without the
   checkpoint; read at the resumed learner's env steps, it is the curve
   without the preemption (`uninterrupted`; the same seed, so the same
   envs, though not the same actions: thread timing differs).

A resumed learner's return(last100) counts only the episodes it saw start,
so its first value is the resumed policy's own. One JSON line:
`return_at_sigterm` (the preempted learner's last return(last100)),
`resumed_first` and `fresh_first` (return(last100) at the first console line
with at least `--min_episodes` episodes), `resumed_end` and `fresh_end`
(after `--after` seconds), `uninterrupted` (the control at the env steps of
`at_sigterm`, `resumed_first` and `resumed_end`), the
learner steps and env steps of each, `resumed_at_step` (the step of the
final checkpoint it loaded), `replay_restored_mib` (R2D2; null if none),
and `continues`: the resumed learner's first return is at least half the
return at SIGTERM and above the fresh learner's first return.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from netlab import Proc  # noqa: E402

from seed_rl.common.metrics import parse_progress_line  # noqa: E402

NUM_ACTORS, ENVS_PER_ACTOR = 2, 8
_RESUMED = re.compile(r"resumed from \S+: learner step (\d+)")
_RESTORED = re.compile(r"replay restored from \S+ \(([\d.]+) MiB")
BINDINGS = {
  "vtrace": [],
  "r2d2": ["LearnerConfig.checkpoint_replay = True"],
}


def _env() -> Dict[str, str]:
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  return env


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _learner(agent: str, logdir: str, address_file: str, seed: int) -> Proc:
  cmd = [sys.executable, "-m", "seed_rl.learner_main", "--env", "classic"]
  cmd += ["--agent", agent, "--num_actors", str(NUM_ACTORS)]
  cmd += ["--envs_per_actor", str(ENVS_PER_ACTOR), "--seed", str(seed)]
  cmd += ["--server_address", f"localhost:{_free_port()}"]
  cmd += ["--logdir", logdir, "--address_file", address_file]
  # Trains until stopped: CartPole's gin files stop at return 475.
  for binding in [
    "LearnerConfig.log_every_s = 1.0",
    "LearnerConfig.target_return = None",
  ] + BINDINGS[agent]:
    cmd += ["--gin_bindings", binding]
  return Proc(cmd, _env(), ROOT)


def _actors(agent: str, address_file: str, seed: int) -> List[Proc]:
  gin_file = os.path.join(ROOT, "seed_rl", "classic", "gin", f"{agent}.gin")
  return [
    Proc(
      [
        sys.executable,
        "-m",
        "seed_rl.actors.main",
        "--env",
        "classic",
        "--actor_id",
        str(i),
        "--num_envs",
        str(ENVS_PER_ACTOR),
        "--server_address",
        f"file:{address_file}",
        "--seed",
        str(seed),
        "--gin_config",
        gin_file,
        "--connect_timeout_s",
        "300",
      ],
      _env(),
      ROOT,
    )  # fmt: skip
    for i in range(NUM_ACTORS)
  ]


def _rows(proc: Proc) -> List[Dict[str, float]]:
  rows = [parse_progress_line(line) for _, line in list(proc.lines)]
  return [r for r in rows if r is not None]


def _train_for(proc: Proc, seconds: float, others: List[Proc]) -> None:
  """Until the learner's own clock passed `seconds` (its console lines)."""
  deadline = time.monotonic() + seconds + 300
  while time.monotonic() < deadline:
    if proc.popen.poll() is not None:
      raise RuntimeError(f"learner exited early:\n{proc.output[-3000:]}")
    for other in others:
      if other.popen.poll() is not None:
        raise RuntimeError(f"an actor exited:\n{other.output[-3000:]}")
    rows = _rows(proc)
    if rows and rows[-1]["elapsed_s"] >= seconds:
      return
    time.sleep(0.5)
  raise RuntimeError(f"no progress for {seconds} s:\n{proc.output[-3000:]}")


def _first(rows: List[Dict[str, float]], min_episodes: int) -> Optional[Dict]:
  for row in rows:
    if row["episodes"] >= min_episodes:
      return row
  return None


def _last_before(rows: List[Dict[str, float]], seconds: float) -> Dict:
  """The last row logged within `seconds` of learner clock."""
  return [r for r in rows if r["elapsed_s"] <= seconds][-1]


def _at_env_steps(rows: List[Dict[str, float]], env_steps: float):
  """The first row at or past `env_steps` (None if the run stopped short)."""
  for row in rows:
    if row["env_steps"] >= env_steps:
      return row
  return None


def _point(row: Optional[Dict[str, float]]) -> Optional[Dict[str, float]]:
  if row is None:
    return None
  keys = ("elapsed_s", "learner_steps", "env_steps", "return_last100")
  return {k: row[k] for k in keys} | {"episodes": row["episodes"]}


def run(agent: str, before: float, after: float, min_episodes: int, seed: int):
  """One preempted-and-resumed run and its fresh control; the JSON dict."""
  procs: List[Proc] = []
  out: Dict[str, Any] = {"agent": agent, "before_s": before, "after_s": after}
  with tempfile.TemporaryDirectory(prefix="seedrl-preempt-") as tmp:
    try:
      logdir, address = f"{tmp}/run", f"{tmp}/learner.address"
      actors = _actors(agent, address, seed)
      first = _learner(agent, logdir, address, seed)
      procs += actors + [first]
      _train_for(first, before, actors)
      at_sigterm = _rows(first)[-1]
      t0 = time.monotonic()
      out["exit_code"] = first.stop(signal.SIGTERM, timeout=120)
      out["exit_s"] = round(time.monotonic() - t0, 1)
      out["at_sigterm"] = _point(at_sigterm)
      time.sleep(2.0)
      second = _learner(agent, logdir, address, seed)
      procs.append(second)
      _train_for(second, after, actors)
      resumed = _rows(second)
      m = _RESUMED.search(second.output)
      out["resumed_at_step"] = int(m.group(1)) if m else None
      m = _RESTORED.search(second.output)
      out["replay_restored_mib"] = float(m.group(1)) if m else None
      out["resumed_first"] = _point(_first(resumed, min_episodes))
      out["resumed_end"] = _point(resumed[-1])
      for proc in [second] + actors:
        proc.stop(signal.SIGTERM, timeout=60)

      # One control run from scratch, never stopped, for before + after
      # seconds: read early it is the fresh start, read at the resumed
      # learner's env steps it is the curve without the preemption.
      fresh_logdir, fresh_address = f"{tmp}/fresh", f"{tmp}/fresh.address"
      fresh_actors = _actors(agent, fresh_address, seed)
      fresh = _learner(agent, fresh_logdir, fresh_address, seed)
      procs += fresh_actors + [fresh]
      _train_for(fresh, before + after, fresh_actors)
      rows = _rows(fresh)
      out["fresh_first"] = _point(_first(rows, min_episodes))
      out["fresh_end"] = _point(_last_before(rows, after))
      out["uninterrupted"] = {
        name: _point(_at_env_steps(rows, out[name]["env_steps"]))
        for name in ("at_sigterm", "resumed_first", "resumed_end")
        if out.get(name)
      }
    finally:
      for proc in procs:
        proc.stop(signal.SIGKILL, timeout=10)
  out["continues"] = _continues(out)
  return out


def _continues(out: Dict[str, Any]) -> Optional[bool]:
  resumed, fresh = out.get("resumed_first"), out.get("fresh_first")
  if not resumed or not fresh:
    return None
  before = out["at_sigterm"]["return_last100"]
  first = resumed["return_last100"]
  return first >= 0.5 * before and first > fresh["return_last100"]


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--agent", choices=sorted(BINDINGS), default="vtrace")
  p.add_argument("--before", type=float, default=20.0, help="seconds")
  p.add_argument("--after", type=float, default=30.0, help="seconds")
  p.add_argument("--min_episodes", type=int, default=20)
  p.add_argument("--seed", type=int, default=0)
  args = p.parse_args(argv)
  line = run(args.agent, args.before, args.after, args.min_episodes, args.seed)
  print(json.dumps(line), flush=True)
  return 0 if line["continues"] else 1


if __name__ == "__main__":
  sys.exit(main())
