"""How many agent steps one learner process can serve: CPU per agent step.

Plays many actors at once against the real learner process
(`python -m seed_rl.learner_main`, real gRPC server and runtime) and
measures the learner's own CPU per agent step. The load generator is one
process of asyncio gRPC streams (one Hello + one Step stream per simulated
actor) sending pre-encoded, realistic StepRequests (Atari: one 84x84 uint8
frame per env; CartPole: [4] float32; rewards; one env's episode ending
every `episode_length / K` messages) and reading the actions back. The
learner is pinned to one CPU and the load generator to another (`taskset`).

Two model modes: `--model null` serves benchmarks/null_agent (zero actions,
no training, no TensorFlow in `act`), so the figure is the runtime's own
cost before any model compute; `--model real` serves the V-trace agent with
the domain's gin defaults (inference and training on this CPU).

Prints one JSON line per (streams, envs_per_message) configuration:

  python benchmarks/learner_capacity.py --model null --obs atari \\
      --streams 16 64 256 1024 --envs_per_message 1 8 32 64 --seconds 10

Fields: model, obs, streams, envs_per_message, agent_steps_per_s,
learner_cpu_us_per_agent_step (total) and learner_cpu_us_by_thread
(grpc_handlers = the server's asyncio loop thread, where requests are
parsed and validated, or the worker threads of a threaded server;
inference = the batcher thread; training; main; grpc_native = gRPC's C-core
threads (event engine, poller); tf_native = TensorFlow's pools; other), learner_cpu_cores (learner
CPU seconds per second: 1.0 means its core was saturated), latency_p50_ms /
latency_p99_ms (per-stream round trip of one message), learner_rss_mib
and learner_rss_kib_per_env (the whole process's RSS over the envs served).
A configuration whose learner state would not fit `--max_learner_gib` is
printed with "skipped" instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# The load generator and the learner each get a core of their own when there
# are two (sorted(os.sched_getaffinity(0))[:2]); with one, neither is pinned.
CPUS = sorted(os.sched_getaffinity(0))[:2]
# Mean episode length in agent steps (one env's episode ends every
# EPISODE_STEPS / K messages of a stream).
EPISODE_STEPS = {"atari": 1000, "cartpole": 100}
ENV_OF_OBS = {"atari": "atari", "cartpole": "classic"}
# Messages every stream sends before the measurement starts: two fills of
# the null agent's unrolls (T + 1 = 21 steps).
WARMUP_MESSAGES = 42
# A learner that starves some streams never warms them all up: measure
# anyway after this long (the line then says "warmed_up": false).
WARMUP_LIMIT_S = 120.0


# ---------------------------------------------------------------- learner --
def _run_learner(threads_file: str, argv: List[str]) -> int:
  """The learner process: learner_main.main(argv), plus a thread that keeps
  `threads_file` holding {native thread id: Python thread name}."""

  def dump_thread_names():
    while True:
      names = {t.native_id: t.name for t in threading.enumerate()}
      tmp = threads_file + ".tmp"
      with open(tmp, "w") as f:
        json.dump(names, f)
      os.replace(tmp, threads_file)
      time.sleep(1.0)

  threading.Thread(
    target=dump_thread_names, name="capacity-probe", daemon=True
  ).start()
  from seed_rl import learner_main

  return learner_main.main(argv)


def _thread_cpu_ns(pid: int) -> Dict[int, int]:
  """{tid: CPU nanoseconds so far} of every thread of `pid` (schedstat)."""
  out = {}
  task_dir = f"/proc/{pid}/task"
  for tid in os.listdir(task_dir):
    try:
      with open(f"{task_dir}/{tid}/schedstat") as f:
        out[int(tid)] = int(f.read().split()[0])
    except (OSError, ValueError):
      pass  # the thread ended meanwhile
  return out


def _comm(pid: int, tid: int) -> str:
  try:
    with open(f"/proc/{pid}/task/{tid}/comm") as f:
      return f.read().strip()
  except OSError:
    return ""


def _group(pid: int, tid: int, python_names: Dict[str, str]) -> str:
  """Which role a learner thread plays (see the module docstring)."""
  name = python_names.get(str(tid))
  if name is not None:
    if name.startswith("seed_rl_grpc") or name.startswith("grpc-aio"):
      return "grpc_handlers"
    if "_poll_wrapper" in name:  # gRPC asyncio's completion-queue poller
      return "grpc_native"
    if name in ("inference", "training"):
      return name
    if name == "MainThread":
      return "main"
    return "other"
  comm = _comm(pid, tid)
  if comm.startswith(
    ("grpc", "event_engine", "default-executo", "resolver-execu", "timer")
  ):
    return "grpc_native"
  if comm.startswith("tf_"):
    return "tf_native"
  return "other"


def _rss_mib(pid: int) -> float:
  with open(f"/proc/{pid}/status") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) / 1024.0
  return float("nan")


# --------------------------------------------------------- load generator --
def _varint(value: int) -> bytes:
  out = bytearray()
  while True:
    byte = value & 0x7F
    value >>= 7
    if value:
      out.append(byte | 0x80)
    else:
      out.append(byte)
      return bytes(out)


def _messages(obs: str, k: int, first_env_id: int, rng) -> List[bytes]:
  """Serialized StepRequests of one stream, without their sequence field:
  [regular, ending env 0, ending env 1, ...] (min(k, 4) ending variants)."""
  from seed_rl.common.specs import StepBatch
  from seed_rl.grpc import codec

  if obs == "atari":
    observation = rng.integers(0, 256, (k, 84, 84), dtype=np.uint8)
    empty = np.zeros((0, 84, 84), np.uint8)
  else:
    observation = rng.standard_normal((k, 4)).astype(np.float32)
    empty = np.zeros((0, 4), np.float32)
  env_ids = np.arange(first_env_id, first_env_id + k, dtype=np.int32)
  run_ids = rng.integers(1, 2**62, k, dtype=np.int64)
  reward = (rng.random(k) < 0.05).astype(np.float32)
  out = []
  for ending in [None] + list(range(min(k, 4))):
    terminated = np.zeros(k, bool)
    if ending is not None:
      terminated[ending] = True
    ended = int(terminated.sum())
    batch = StepBatch(
      env_ids=env_ids,
      run_ids=run_ids,
      reward=reward,
      terminated=terminated,
      truncated=np.zeros(k, bool),
      observation=observation,
      final_observation=empty,
      episode_return=np.full(ended, 1.0, np.float32),
      episode_length=np.full(ended, EPISODE_STEPS[obs], np.int32),
    )
    out.append(codec.encode_step_batch(batch).SerializeToString())
  return out


async def _stream(
  channel, hello_stub, obs, k, actor_id, specs, clock, stats, rng
) -> None:
  """One simulated actor: Hello, then one Step stream until `clock` ends."""
  import grpc
  from seed_rl.grpc import codec, protocol, seed_rl_pb2

  request = seed_rl_pb2.HelloRequest(
    protocol_version=protocol.PROTOCOL_VERSION, actor_id=actor_id, num_envs=k
  )
  request.observation_spec.CopyFrom(codec.encode_spec(specs[0]))
  request.action_spec.CopyFrom(codec.encode_spec(specs[1]))
  step = channel.stream_stream(
    "/seed_rl.SeedRL/Step",
    request_serializer=None,
    response_deserializer=None,
  )
  sequence = int(rng.integers(1, 2**40))
  # A real actor reconnects when its stream fails; so does this one, while
  # connecting (seen once in a few runs of 1,024 streams: the client's
  # first write failed with INTERNAL before reaching the learner).
  for attempt in range(10):
    try:
      hello = await hello_stub.Hello(request, wait_for_ready=True, timeout=60)
      messages = _messages(obs, k, hello.first_env_id, rng)
      call = step(metadata=((protocol.SESSION_METADATA_KEY, hello.session_id),))
      sequence += 1
      await call.write(messages[0] + b"\x50" + _varint(sequence))
      if await call.read() is not grpc.aio.EOF:
        break
    except grpc.aio.AioRpcError:
      if attempt == 9:
        raise
    stats["retries"] += 1
    await asyncio.sleep(0.5)
  every = max(1, EPISODE_STEPS[obs] // k)
  stats["connected"] += 1
  i = 0
  latencies = stats["latencies"]
  while not clock["done"]:
    i += 1
    sequence += 1
    body = (
      messages[1 + (i // every) % (len(messages) - 1)]
      if (i % every == 0)
      else messages[0]
    )
    t = time.perf_counter()
    await call.write(body + b"\x50" + _varint(sequence))
    response = await call.read()
    if response is grpc.aio.EOF:
      raise RuntimeError(f"stream {actor_id} ended: {await call.code()}")
    stats["sent"][actor_id] += 1
    if clock["measuring"]:
      latencies.append(time.perf_counter() - t)
      stats["messages"] += 1
  await call.done_writing()


async def _load(args) -> dict:
  import grpc
  from seed_rl import registry
  from seed_rl.grpc import protocol, seed_rl_pb2_grpc

  probe = registry.env_module(ENV_OF_OBS[args.obs]).create_environment(
    num_envs=1, seed=0
  )
  specs = (probe.observation_spec, probe.action_spec)
  probe.close()
  # One channel per 64 streams: a single HTTP/2 connection would serialize
  # every stream on one socket, which no real deployment does.
  channels = [
    grpc.aio.insecure_channel(
      f"localhost:{args.port}", options=protocol.channel_options(1.0)
    )
    for _ in range(-(-args.streams // 64))
  ]
  clock = {"done": False, "measuring": False}
  stats: Dict[str, Any] = {
    "connected": 0,
    "messages": 0,
    "latencies": [],
    "sent": [0] * args.streams,
    "retries": 0,
  }
  tasks = [
    asyncio.ensure_future(
      _stream(
        channels[i // 64],
        seed_rl_pb2_grpc.SeedRLStub(channels[i // 64]),
        args.obs,
        args.k,
        i,
        specs,
        clock,
        stats,
        np.random.default_rng(i),
      )
    )
    for i in range(args.streams)
  ]
  deadline = time.monotonic() + 120
  while stats["connected"] < args.streams:
    if time.monotonic() > deadline or any(t.done() for t in tasks):
      for t in tasks:
        if t.done() and (error := t.exception()) is not None:
          raise error
      raise RuntimeError(f"only {stats['connected']} streams connected")
    await asyncio.sleep(0.1)
  # Warm up for --warmup seconds and until every env's unroll buffers were
  # filled twice: the first fill of the learner's buffers page-faults
  # (fresh memory), which is a start-up cost, not a steady-state one.
  await asyncio.sleep(args.warmup)
  give_up = time.monotonic() + WARMUP_LIMIT_S
  while min(stats["sent"]) < WARMUP_MESSAGES and time.monotonic() < give_up:
    await asyncio.sleep(0.1)
  warmed_up = min(stats["sent"]) >= WARMUP_MESSAGES
  sent_before = list(stats["sent"])
  clock["measuring"] = True
  print("MARK start", flush=True)
  t0 = time.perf_counter()
  await asyncio.sleep(args.seconds)
  clock["measuring"] = False
  elapsed = time.perf_counter() - t0
  print("MARK end", flush=True)
  clock["done"] = True
  await asyncio.wait(tasks, timeout=10)
  latencies = np.asarray(stats["latencies"] or [float("nan")]) * 1e3
  per_stream = np.asarray(stats["sent"]) - np.asarray(sent_before)
  return {
    "connect_retries": stats["retries"],
    "warmed_up": warmed_up,
    # Starvation: the least and most served streams of the window.
    "stream_messages_min": int(per_stream.min()),
    "stream_messages_max": int(per_stream.max()),
    "messages": stats["messages"],
    "seconds": elapsed,
    "latency_p50_ms": float(np.percentile(latencies, 50)),
    "latency_p99_ms": float(np.percentile(latencies, 99)),
  }


def _run_load(args) -> int:
  result = asyncio.run(_load(args))
  print(json.dumps(result), flush=True)
  return 0


# ------------------------------------------------------------ orchestrator --
def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _wait_for_port(port: int, learner, timeout_s: float) -> None:
  """Returns once the learner accepts connections (TensorFlow's import
  and the agent's construction take a while)."""
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    if learner.poll() is not None:
      raise RuntimeError(f"the learner exited with {learner.returncode}")
    with socket.socket() as s:
      if s.connect_ex(("localhost", port)) == 0:
        return
    time.sleep(0.2)
  raise RuntimeError(f"the learner did not listen within {timeout_s} s")


def _learner_state_gib(obs: str, envs: int, model: str) -> float:
  """What the learner's per-env state takes (a frame stack, and unroll
  buffers of k-1 + T+1 frames, one spare), roughly: configurations beyond
  --max_learner_gib are skipped."""
  per_env = 84 * 84 * (4 + 2 * 24) if obs == "atari" else 4 * 4 * 22 + 64
  return envs * per_env / 2**30 * (2 if model == "real" else 1)


def _measure(args, streams: int, k: int) -> dict:
  config = {
    **({"gin_bindings": args.gin_bindings} if args.gin_bindings else {}),
    "model": args.model,
    "obs": args.obs,
    "streams": streams,
    "envs_per_message": k,
  }
  gib = _learner_state_gib(args.obs, streams * k, args.model)
  if gib > args.max_learner_gib:
    return {**config, "skipped": f"learner state ~{gib:.1f} GiB"}
  port = _free_port()
  tmp = tempfile.mkdtemp(prefix="capacity-")
  threads_file = os.path.join(tmp, "threads.json")
  env = dict(
    os.environ,
    PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
    TF_CPP_MIN_LOG_LEVEL="3",
  )
  agent = "benchmarks.null_agent" if args.model == "null" else "vtrace"
  learner_argv = [
    "--env",
    ENV_OF_OBS[args.obs],
    "--agent",
    agent,
    "--num_actors",
    str(streams),
    "--envs_per_actor",
    str(k),
    "--server_address",
    f"localhost:{port}",
    "--logdir",
    os.path.join(tmp, "logdir"),
    "--max_seconds",
    str(args.warmup + args.seconds + 600),
  ] + [f"--gin_bindings={b}" for b in args.gin_bindings]
  pin = lambda i: ["taskset", "-c", str(CPUS[i])] if len(CPUS) == 2 else []
  learner = subprocess.Popen(
    pin(1)
    + [sys.executable, __file__, "_learner"]
    + [threads_file, "--"]
    + learner_argv,
    env=env,
    stdout=subprocess.DEVNULL if args.quiet else sys.stderr,
    stderr=subprocess.STDOUT if args.quiet else sys.stderr,
  )
  _wait_for_port(port, learner, timeout_s=300)
  load = subprocess.Popen(
    pin(0)
    + [sys.executable, __file__, "_load"]
    + ["--port", str(port), "--obs", args.obs, "--streams", str(streams)]
    + ["--k", str(k), "--warmup", str(args.warmup)]
    + ["--seconds", str(args.seconds)],
    env=env,
    stdout=subprocess.PIPE,
    text=True,
  )
  try:
    snapshots = []
    result = None
    assert load.stdout is not None
    for line in load.stdout:
      if line.startswith("MARK"):
        snapshots.append((time.perf_counter(), _thread_cpu_ns(learner.pid)))
        if line.startswith("MARK end"):
          rss = _rss_mib(learner.pid)
          with open(threads_file) as f:
            names = json.load(f)
      elif line.strip().startswith("{"):
        result = json.loads(line)
    if load.wait() != 0 or result is None or len(snapshots) != 2:
      raise RuntimeError(f"load generator failed (exit {load.returncode})")
  finally:
    if load.poll() is None:
      load.kill()
    learner.send_signal(signal.SIGINT)
    try:
      learner.wait(timeout=60)
    except subprocess.TimeoutExpired:
      learner.kill()
    shutil.rmtree(tmp, ignore_errors=True)
  (_, cpu0), (_, cpu1) = snapshots
  agent_steps = result["messages"] * k
  by_group: Dict[str, float] = {}
  for tid, ns in cpu1.items():
    group = _group(learner.pid, tid, names)
    by_group[group] = by_group.get(group, 0.0) + (ns - cpu0.get(tid, 0))
  total_ns = sum(by_group.values())
  per_step = lambda ns: round(ns / 1e3 / max(agent_steps, 1), 2)
  return {
    **config,
    "agent_steps_per_s": round(agent_steps / result["seconds"], 1),
    "learner_cpu_us_per_agent_step": per_step(total_ns),
    "learner_cpu_us_by_thread": {
      g: per_step(ns) for g, ns in sorted(by_group.items())
    },
    "learner_cpu_cores": round(total_ns / 1e9 / result["seconds"], 3),
    "latency_p50_ms": round(result["latency_p50_ms"], 3),
    "latency_p99_ms": round(result["latency_p99_ms"], 3),
    "learner_rss_mib": round(rss, 1),
    "learner_rss_kib_per_env": round(rss * 1024 / (streams * k), 1),
    "messages_per_s": round(result["messages"] / result["seconds"], 1),
    "warmed_up": result["warmed_up"],
    "connect_retries": result["connect_retries"],
    "stream_messages_min": result["stream_messages_min"],
    "stream_messages_max": result["stream_messages_max"],
    "pinned": len(CPUS) == 2,
  }


def main(argv: Optional[List[str]] = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if argv[:1] == ["_learner"]:
    return _run_learner(argv[1], argv[3:])
  if argv[:1] == ["_load"]:
    p = argparse.ArgumentParser()
    for name, kind in (
      ("port", int),
      ("obs", str),
      ("streams", int),
      ("k", int),
      ("warmup", float),
      ("seconds", float),
    ):
      p.add_argument(f"--{name}", type=kind, required=True)
    return _run_load(p.parse_args(argv[1:]))
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--model", choices=("null", "real"), default="null")
  p.add_argument("--obs", choices=("atari", "cartpole"), default="atari")
  p.add_argument("--streams", type=int, nargs="+", default=[16])
  p.add_argument("--envs_per_message", type=int, nargs="+", default=[32])
  p.add_argument("--seconds", type=float, default=10.0)
  p.add_argument("--warmup", type=float, default=5.0)
  p.add_argument("--max_learner_gib", type=float, default=8.0)
  p.add_argument(
    "--quiet", action="store_true", help="hide the learner's own output"
  )
  p.add_argument(
    "--gin_bindings",
    action="append",
    default=[],
    help="passed to the learner, e.g. "
    "'LearnerConfig.max_inference_batch_size = 256' (repeatable)",
  )
  args = p.parse_args(argv)
  for streams in args.streams:
    for k in args.envs_per_message:
      print(json.dumps(_measure(args, streams, k)), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
