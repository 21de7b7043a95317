"""Soak benchmark: CartPole V-trace under constant faults for a long while.

    python benchmarks/soak.py [--minutes 10] [--kill_every_s 5] \
        [--restart_learner_every_s 600]

Starts one learner (`python -m seed_rl.learner_main`) and --num_actors actor
processes on localhost. Every --kill_every_s seconds one actor, picked at
random, is SIGKILLed and started again at once (the learner must release its
stream, drop its partial unrolls and serve the new process). Meanwhile a
fuzzing client, on the env ids of one more actor slot, sends randomly
mutated Step messages (the mutations of tests/faults/test_fuzz_protocol.py: dtype,
shape, payload bytes, truncation, extension, cleared fields, raw wire
damage), each on a fresh Hello and stream, and checks that each is served
or refused with INVALID_ARGUMENT. The learner process's RSS, thread count
and open file descriptors are sampled from /proc.

With --restart_learner_every_s the learner also gets SIGTERM on that
schedule (it writes its final checkpoint) and a new one starts on the same
port and logdir, as a rescheduled pod behind a Service would: it resumes,
and the actors and the fuzzer reconnect by themselves.

Prints one JSON line: learner and env steps over time (every window after
warm-up must show learner progress), RSS growth after warm-up (%), threads
and fds after warm-up and at the end, per learner process (`lives`: each
one's own warm-up, RSS, threads and fds), kills and restarts, fuzz
outcomes, and `passed` (steps always increasing, RSS growth < 10% within
every learner process, no thread or fd growth beyond a small slack, no
unexpected fuzz answer, every learner exit 0). Exit status 0 iff passed.
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
from typing import Any, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import grpc
import numpy as np

from seed_rl.common.specs import ArraySpec, StepBatch
from seed_rl.grpc import codec, protocol, seed_rl_pb2

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
GIN = os.path.join(ROOT, "seed_rl", "classic", "gin", "vtrace.gin")
# CartPole's wire specs, as a classic actor sends them in Hello.
OBS = ArraySpec(
  (4,),
  "float32",
  "observation",
  minimum=np.array([-4.8, -np.inf, -0.41887903, -np.inf], np.float32),
  maximum=np.array([4.8, np.inf, 0.41887903, np.inf], np.float32),
)
ACT = ArraySpec((), "int32", "action", num_values=2)
TENSOR_FIELDS = [
  f.name
  for f in seed_rl_pb2.StepRequest.DESCRIPTOR.fields
  if f.message_type is not None and f.message_type.name == "Tensor"
]
DTYPES = sorted(codec.WIRE_DTYPES) + ["object", "", "float16x", "<f4", "V8"]
# Thread and fd counts may differ by this much between the end of warm-up and
# the end (a gRPC worker or a socket in flight at the moment of sampling).
SLACK = 4
# 40 env steps per learner step instead of 320: actors killed every few
# seconds still complete unrolls, and the learner trains often.
SMALL_BATCHES = [
  "VtraceConfig.unroll_length = 10",
  "VtraceConfig.batch_size = 4",
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


# ------------------------------------------------------------- fuzzing --


def _batch(first_env_id: int, k: int, rng: np.random.Generator) -> StepBatch:
  """A valid CartPole batch; some envs truncated (with final observations)."""
  truncated = rng.random(k) < 0.3
  ended = int(truncated.sum())
  return StepBatch(
    env_ids=np.arange(first_env_id, first_env_id + k, dtype=np.int32),
    run_ids=np.full(k, 77, np.int64),
    reward=rng.normal(size=k).astype(np.float32),
    terminated=np.zeros(k, bool),
    truncated=truncated,
    observation=rng.uniform(-0.05, 0.05, (k, 4)).astype(np.float32),
    final_observation=rng.uniform(-0.05, 0.05, (ended, 4)).astype(np.float32),
    episode_return=rng.uniform(1, 50, ended).astype(np.float32),
    episode_length=np.full(ended, 50, np.int32),
  )


def _mutate(request, rng: np.random.Generator) -> bytes:
  """One random mutation of `request` (the kinds of test_fuzz_protocol)."""
  kind = rng.choice(
    ["dtype", "shape", "data", "truncate", "extend", "bytes", "clear"]
  )
  field = str(rng.choice(TENSOR_FIELDS))
  tensor = getattr(request, field)
  if kind == "dtype":
    tensor.dtype = str(rng.choice(DTYPES))
  elif kind == "shape":
    tensor.ClearField("shape")
    tensor.shape.extend(
      int(rng.choice([rng.integers(-3, 10), rng.integers(0, 2**31 - 1)]))
      for _ in range(rng.integers(0, 5))
    )
  elif kind == "data" and tensor.data:
    payload = bytearray(tensor.data)
    payload[rng.integers(len(payload))] = rng.integers(256)
    tensor.data = bytes(payload)
  elif kind == "truncate":
    tensor.data = tensor.data[: rng.integers(0, len(tensor.data) + 1)]
  elif kind == "extend":
    tensor.data += rng.bytes(int(rng.integers(1, 65)))
  elif kind == "clear":
    request.ClearField(field)
  wire = bytearray(request.SerializeToString())
  if kind == "bytes" and wire:
    for _ in range(rng.integers(1, 9)):
      wire[rng.integers(len(wire))] = rng.integers(256)
  return bytes(wire)


class Fuzzer(threading.Thread):
  """Sends mutated Step messages as actor `actor_id` until stopped."""

  def __init__(self, address: str, actor_id: int, k: int, interval_s: float):
    super().__init__(daemon=True, name="fuzzer")
    self._address, self._actor_id, self._k = address, actor_id, k
    self._interval_s = interval_s
    self.stop = threading.Event()
    self.counts = {"served": 0, "invalid_argument": 0, "retried": 0}
    self.unexpected: List[str] = []

  def run(self) -> None:
    rng = np.random.default_rng(0)
    channel = grpc.insecure_channel(self._address)
    hello = channel.unary_unary(
      "/seed_rl.SeedRL/Hello",
      request_serializer=seed_rl_pb2.HelloRequest.SerializeToString,
      response_deserializer=seed_rl_pb2.HelloResponse.FromString,
    )
    step = channel.stream_stream(
      "/seed_rl.SeedRL/Step",
      request_serializer=lambda b: b,
      response_deserializer=seed_rl_pb2.StepResponse.FromString,
    )
    request = seed_rl_pb2.HelloRequest(
      protocol_version=protocol.PROTOCOL_VERSION,
      actor_id=self._actor_id,
      num_envs=self._k,
      observation_spec=codec.encode_spec(OBS),
      action_spec=codec.encode_spec(ACT),
    )
    while not self.stop.wait(self._interval_s):
      try:
        session = hello(request, timeout=10).session_id
      except grpc.RpcError as e:  # the previous stream not released yet
        self.counts["retried"] += 1
        if e.code() not in (
          grpc.StatusCode.ALREADY_EXISTS,
          grpc.StatusCode.UNAVAILABLE,
          grpc.StatusCode.DEADLINE_EXCEEDED,
        ):
          self.unexpected.append(f"Hello: {e.code().name}: {e.details()}")
        continue
      message = codec.encode_step_batch(
        _batch(self._actor_id * self._k, self._k, rng)
      )
      call = step(
        iter([_mutate(message, rng)]),
        timeout=10,
        metadata=((protocol.SESSION_METADATA_KEY, session),),
      )
      try:
        next(call)
        self.counts["served"] += 1
      except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
          self.counts["invalid_argument"] += 1
        elif e.code() not in (
          grpc.StatusCode.UNAVAILABLE,
          grpc.StatusCode.DEADLINE_EXCEEDED,
        ):
          self.unexpected.append(f"Step: {e.code().name}: {e.details()}")
      finally:
        call.cancel()
    channel.close()


# ---------------------------------------------------------------- main --


class Learner:
  """The learner process; its progress lines give learner steps."""

  def __init__(self, args: List[str]):
    self.popen = subprocess.Popen(
      [sys.executable, "-m", "seed_rl.learner_main", *args],
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


def _start_actor(port: int, actor_id: int, k: int) -> subprocess.Popen:
  return subprocess.Popen(
    [
      sys.executable,
      "-m",
      "seed_rl.actors.main",
      "--env=classic",
      f"--actor_id={actor_id}",
      f"--num_envs={k}",
      f"--server_address=localhost:{port}",
      f"--gin_config={GIN}",
      "--connect_timeout_s=120",
    ],
    cwd=ROOT,
    env=ENV,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
  )


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
  """The processes of one soak and what was sampled from them."""

  def __init__(self, args: argparse.Namespace, logdir: str):
    self.args = args
    self.port = _free_port()
    address = f"localhost:{self.port}"
    k, n = args.envs_per_actor, args.num_actors
    self.learner_args = [
      "--env=classic",
      "--agent=vtrace",
      f"--num_actors={n + 1}",  # the last slot is the fuzzer's
      f"--envs_per_actor={k}",
      f"--server_address={address}",
      f"--logdir={logdir}",
      "--gin_bindings=LearnerConfig.target_return = None",
      "--gin_bindings=LearnerConfig.log_every_s = 1.0",
      "--gin_bindings=LearnerConfig.checkpoint_every_s = 30.0",
    ] + [f"--gin_bindings={b}" for b in (args.gin_bindings or SMALL_BATCHES)]
    self.learner = Learner(self.learner_args)
    self.actors = {i: _start_actor(self.port, i, k) for i in range(n)}
    self.fuzzer = Fuzzer(address, n, k, args.fuzz_interval_s)
    self.samples: List[Dict[str, float]] = []
    self.life_starts: List[float] = [0.0]  # run seconds each learner began
    self.restart_codes: List[Optional[int]] = []
    self.kills = self.unexpected_exits = 0
    self.last_step, self.last_env_steps = -1, 0
    self.t0 = time.monotonic()

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
    self.fuzzer.start()
    self.t0 = last_kill = last_sample = last_restart = time.monotonic()
    while (now := time.monotonic()) - self.t0 < duration:
      if self.learner.popen.poll() is not None:
        break
      for i, actor in self.actors.items():
        if actor.poll() is not None:  # exited on its own: restart it
          self.unexpected_exits += 1
          self.actors[i] = _start_actor(self.port, i, args.envs_per_actor)
      if now - last_kill >= args.kill_every_s:
        self._kill_one(rand)
        last_kill = now
      every = args.restart_learner_every_s
      if every and now - last_restart >= every:
        if not self._restart_learner():
          break
        last_restart = time.monotonic()
      if now - last_sample >= args.sample_every_s:
        self._sample(now)
        last_sample = now
      time.sleep(0.1)

  def _kill_one(self, rand: random.Random) -> None:
    victim = rand.randrange(self.args.num_actors)
    self.actors[victim].send_signal(signal.SIGKILL)
    self.actors[victim].wait(30)
    self.actors[victim] = _start_actor(
      self.port, victim, self.args.envs_per_actor
    )
    self.kills += 1

  def _restart_learner(self) -> bool:
    """SIGTERM (a final checkpoint), then a new learner on the same port
    and logdir, which resumes; the actors and the fuzzer reconnect."""
    self.restart_codes.append(_stop(self.learner, signal.SIGTERM))
    self.learner = Learner(self.learner_args)
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

  def stop(self) -> Optional[int]:
    self.fuzzer.stop.set()
    self.fuzzer.join(30)
    rc = _stop(self.learner, signal.SIGINT)
    for actor in self.actors.values():
      try:
        actor.wait(30)
      except subprocess.TimeoutExpired:
        actor.kill()
        actor.wait(30)
    return rc


def _stop(learner: "Learner", sig: int) -> Optional[int]:
  learner.popen.send_signal(sig)
  try:
    return learner.popen.wait(120)
  except subprocess.TimeoutExpired:
    learner.popen.kill()
    return learner.popen.wait(30)


def _windows(samples, window: float, warmup: float):
  """[seconds, learner steps, env steps] once per window, and whether the
  steps rose in every window from the last one before warm-up on."""
  steps_over_time = []
  next_t = 0.0
  for s in samples:
    if s["t"] >= next_t:
      steps_over_time.append([s["t"], int(s["step"]), int(s["env_steps"])])
      next_t += window
  last = samples[-1]
  if steps_over_time[-1][0] != last["t"]:
    steps_over_time.append(
      [last["t"], int(last["step"]), int(last["env_steps"])]
    )
  # Progress in every window after warm-up (TF traces its graphs first).
  checked = [w for w in steps_over_time if w[0] >= warmup] or steps_over_time
  checked = [w for w in steps_over_time if w[0] < warmup][-1:] + checked
  increasing = len(checked) >= 2 and all(
    b[1] > a[1] for a, b in zip(checked, checked[1:])
  )
  return steps_over_time, increasing


def _lives(soak: _Soak, warmup: float) -> List[Dict[str, Any]]:
  """Per learner process: RSS, threads and fds after its warm-up (its own
  first `warmup` seconds, and its first step) and at its end."""
  out = []
  for life, start in enumerate(soak.life_starts):
    mine = [s for s in soak.samples if s["life"] == life]
    if not mine:
      continue
    trained = [s["t"] for s in mine if s["step"] > 0]
    begin = max(start + warmup, trained[0] if trained else mine[-1]["t"])
    after = [s for s in mine if s["t"] >= begin] or mine[-1:]
    base, end = after[0], after[-1]
    out.append(
      {
        "life": life,
        "start_s": start,
        "warm_s": base["t"],
        "end_s": end["t"],
        "rss_mb_after_warmup": round(base["rss_mb"], 1),
        "rss_mb_end": round(end["rss_mb"], 1),
        "rss_mb_max_after_warmup": round(max(s["rss_mb"] for s in after), 1),
        "rss_growth_pct": round(
          100.0 * (end["rss_mb"] - base["rss_mb"]) / base["rss_mb"], 2
        ),
        "threads": [base["threads"], end["threads"]],
        "fds": [base["fds"], end["fds"]],
      }
    )
  return out


def main(argv=None) -> int:
  args = _parse(argv)
  duration = args.minutes * 60.0
  warmup = (
    args.warmup_s if args.warmup_s is not None else min(120.0, duration / 5)
  )
  window = max(10.0, duration / 10)  # steps must rise in every window
  logdir = tempfile.mkdtemp(prefix="seed_rl_soak_")
  soak = _Soak(args, logdir)
  if not soak.wait_for_first_step(soak.learner):
    soak.stop()
    return 1
  try:
    soak.run(duration)
  finally:
    learner_rc = soak.stop()
  samples = soak.samples
  lives = _lives(soak, warmup)
  first = lives[0]
  steps_over_time, increasing = _windows(
    samples, window, max(warmup, first["warm_s"])
  )
  worst = max(lives, key=lambda life: life["rss_growth_pct"])
  result = {
    "benchmark": "soak",
    "minutes": args.minutes,
    "num_actors": args.num_actors,
    "envs_per_actor": args.envs_per_actor,
    "kills": soak.kills,
    "unexpected_actor_exits": soak.unexpected_exits,
    "learner_restarts": len(soak.life_starts) - 1,
    # [seconds, learner steps, env steps], one per window.
    "learner_steps": steps_over_time,
    "steps_always_increasing": increasing,
    # None: the first train step (TF tracing) never finished: too short
    # a run for this machine's load.
    "first_learner_step_s": next(
      (s["t"] for s in samples if s["step"] > 0), None
    ),
    "warmup_s": round(first["warm_s"], 1),
    "rss_mb": {
      "start": round(samples[0]["rss_mb"], 1),
      "after_warmup": first["rss_mb_after_warmup"],
      "end": lives[-1]["rss_mb_end"],
      "max_after_warmup": max(
        life["rss_mb_max_after_warmup"] for life in lives
      ),
    },
    # The largest growth within one learner process after its warm-up.
    "rss_growth_after_warmup_pct": worst["rss_growth_pct"],
    "threads": {
      "start": samples[0]["threads"],
      "after_warmup": first["threads"][0],
      "end": lives[-1]["threads"][1],
      "max": max(s["threads"] for s in samples),
    },
    "fds": {
      "start": samples[0]["fds"],
      "after_warmup": first["fds"][0],
      "end": lives[-1]["fds"][1],
      "max": max(s["fds"] for s in samples),
    },
    "lives": lives,
    "restart_exit_codes": soak.restart_codes,
    "fuzz": dict(soak.fuzzer.counts, unexpected=soak.fuzzer.unexpected[:5]),
    "learner_exit": learner_rc,
  }
  result["passed"] = bool(
    increasing
    and worst["rss_growth_pct"] < 10.0
    and all(
      life["threads"][1] <= life["threads"][0] + SLACK
      and life["fds"][1] <= life["fds"][0] + SLACK
      for life in lives
    )
    and not soak.fuzzer.unexpected
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
