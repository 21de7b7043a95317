"""Round-trip latency and throughput of the actor <-> learner wire protocol.

Runs a LearnerServer with a trivial handler (zeros as actions) in its own
process and ActorClients in other processes, as in a real run, and prints one
JSON line: per batch kind (K=16 CartPole-sized [16, 4] float32, K=16 Atari
frames [16, 84, 84] uint8) and client count (1, 4), the mean/p50/p99 round-trip
time of ActorClient.step in microseconds and the messages per second summed
over clients. "baseline" is bare gRPC on the same layout: a bidirectional
stream of empty messages with no encoding or validation, i.e. the floor that
the protocol's own overhead sits on.

  .venv/bin/python benchmarks/grpc_roundtrip.py --seconds 3
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import time
from typing import Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from seed_rl.common.specs import ArraySpec, StepBatch

_WARMUP_STEPS = 200
_ACTION_SPEC = ArraySpec((), "int64", "action", num_values=6)
_BATCHES = {
  "cartpole": (16, ArraySpec((4,), "float32", "observation")),
  "atari": (16, ArraySpec((84, 84), "uint8", "frame")),
}
_CLIENT_COUNTS = (1, 4)


class _ZerosHandler:
  def step(self, batch: StepBatch) -> np.ndarray:
    return np.zeros(batch.num_envs, np.int64)


def _serve(kind: str, num_envs: int, port_queue, stop_event) -> None:
  from seed_rl.grpc.server import LearnerServer

  _, obs_spec = _BATCHES[kind]
  server = LearnerServer(
    "localhost:0", obs_spec, _ACTION_SPEC, num_envs, _ZerosHandler()
  )
  port_queue.put(server.start())
  stop_event.wait()
  server.stop()


def _serve_baseline(port_queue, stop_event) -> None:
  import grpc
  from concurrent import futures
  from seed_rl.grpc import seed_rl_pb2, seed_rl_pb2_grpc

  class Echo(seed_rl_pb2_grpc.SeedRLServicer):
    def Step(self, request_iterator, context):
      response = seed_rl_pb2.StepResponse()
      for _ in request_iterator:
        yield response

  server = grpc.server(futures.ThreadPoolExecutor(8))
  seed_rl_pb2_grpc.add_SeedRLServicer_to_server(Echo(), server)
  port_queue.put(server.add_insecure_port("localhost:0"))
  server.start()
  stop_event.wait()
  server.stop(None)


def _run_baseline_client(port: int, seconds: float) -> np.ndarray:
  import queue
  import grpc
  from seed_rl.grpc import seed_rl_pb2, seed_rl_pb2_grpc

  requests: queue.SimpleQueue = queue.SimpleQueue()
  channel = grpc.insecure_channel(f"localhost:{port}")
  responses = seed_rl_pb2_grpc.SeedRLStub(channel).Step(
    iter(requests.get, None)
  )
  request = seed_rl_pb2.StepRequest()
  for _ in range(_WARMUP_STEPS):
    requests.put(request)
    next(responses)
  times = []
  deadline = time.perf_counter() + seconds
  while True:
    t0 = time.perf_counter()
    requests.put(request)
    next(responses)
    t1 = time.perf_counter()
    times.append(t1 - t0)
    if t1 >= deadline:
      break
  requests.put(None)
  responses.cancel()
  channel.close()
  return np.asarray(times)


def _make_batch(first_env_id: int, k: int, obs_spec: ArraySpec) -> StepBatch:
  rng = np.random.default_rng(first_env_id)
  if obs_spec.dtype == "uint8":
    observation = rng.integers(0, 256, (k,) + obs_spec.shape, dtype=np.uint8)
  else:
    observation = rng.normal(size=(k,) + obs_spec.shape).astype(obs_spec.dtype)
  return StepBatch(
    env_ids=np.arange(first_env_id, first_env_id + k, dtype=np.int32),
    run_ids=np.ones(k, np.int64),
    reward=np.zeros(k, np.float32),
    terminated=np.zeros(k, bool),
    truncated=np.zeros(k, bool),
    observation=observation,
    final_observation=np.zeros((0,) + obs_spec.shape, obs_spec.dtype),
    episode_return=np.zeros(0, np.float32),
    episode_length=np.zeros(0, np.int32),
  )


def _run_client(args) -> Tuple[np.ndarray, float]:
  """Steps for `seconds` after warm-up.

  Returns:
    The round-trip times in seconds and the client's CPU seconds.
  """
  kind, port, actor_id, seconds, start_at = args
  from seed_rl.grpc.client import ActorClient

  k, obs_spec = _BATCHES[kind]
  client = ActorClient(
    f"localhost:{port}",
    actor_id,
    k,
    obs_spec,
    _ACTION_SPEC,
    connect_timeout_s=30,
  )
  client.connect()
  batch = _make_batch(client.first_env_id, k, obs_spec)
  for _ in range(_WARMUP_STEPS):
    client.step(batch)
  # Concurrent clients start timing together so their loads overlap.
  time.sleep(max(0.0, start_at - time.time()))
  times = []
  cpu0 = time.process_time()
  deadline = time.perf_counter() + seconds
  while True:
    t0 = time.perf_counter()
    client.step(batch)
    t1 = time.perf_counter()
    times.append(t1 - t0)
    if t1 >= deadline:
      break
  cpu = time.process_time() - cpu0
  client.close()
  return np.asarray(times), cpu


def _process_cpu_s(pid: int) -> float:
  """User + system CPU seconds of process `pid` so far (Linux /proc)."""
  with open(f"/proc/{pid}/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(
  ctx, kind: str, port: int, server_pid: int, clients: int, seconds: float
) -> dict:
  k, obs_spec = _BATCHES[kind]
  start_at = time.time() + 3.0  # after every client connected and warmed up
  with ctx.Pool(clients) as pool:
    pending = pool.map_async(
      _run_client,
      [
        (kind, port, actor_id, seconds, start_at) for actor_id in range(clients)
      ],
    )
    time.sleep(max(0.0, start_at - time.time()))
    server_cpu0 = _process_cpu_s(server_pid)
    results = pending.get()
    server_cpu = _process_cpu_s(server_pid) - server_cpu0
  per_client = [times for times, _ in results]
  client_cpu = sum(cpu for _, cpu in results)
  wall = max(t.sum() for t in per_client)  # seconds
  times = np.concatenate(per_client) * 1e6
  return {
    "batch": kind,
    "k": k,
    "obs_shape": list(obs_spec.shape),
    "obs_dtype": obs_spec.dtype,
    "clients": clients,
    "mean_us": round(float(times.mean()), 1),
    "p50_us": round(float(np.percentile(times, 50)), 1),
    "p99_us": round(float(np.percentile(times, 99)), 1),
    "msgs_per_s": round(len(times) / wall, 1),
    "env_steps_per_s": round(len(times) * k / wall, 1),
    # CPU per message: the actor side (encode, gRPC client threads,
    # decode) and the learner side (gRPC server, decode, validation,
    # handler, encode; the server's CPU is sampled over the same window
    # give or take the clients' last round trips).
    "client_cpu_us_per_msg": round(client_cpu / len(times) * 1e6, 1),
    "server_cpu_us_per_msg": round(server_cpu / len(times) * 1e6, 1),
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    "--seconds",
    type=float,
    default=3.0,
    help="timed seconds per configuration (after warm-up)",
  )
  args = parser.parse_args()
  if args.seconds <= 0:
    parser.error(f"--seconds: {args.seconds}, expected > 0")
  # Fresh interpreters: forking a process with gRPC threads is unsafe.
  ctx = multiprocessing.get_context("spawn")
  port_queue, stop_event = ctx.Queue(), ctx.Event()
  server = ctx.Process(target=_serve_baseline, args=(port_queue, stop_event))
  server.start()
  try:
    times = _run_baseline_client(port_queue.get(timeout=60), args.seconds) * 1e6
  finally:
    stop_event.set()
    server.join(10)
  baseline = {
    "batch": "empty",
    "clients": 1,
    "mean_us": round(float(times.mean()), 1),
    "p50_us": round(float(np.percentile(times, 50)), 1),
    "p99_us": round(float(np.percentile(times, 99)), 1),
  }
  results = []
  for kind, (k, _) in _BATCHES.items():
    port_queue, stop_event = ctx.Queue(), ctx.Event()
    server = ctx.Process(
      target=_serve,
      args=(kind, k * max(_CLIENT_COUNTS), port_queue, stop_event),
    )
    server.start()
    assert server.pid is not None  # set by start()
    try:
      port = port_queue.get(timeout=60)
      for clients in _CLIENT_COUNTS:
        results.append(
          _measure(ctx, kind, port, server.pid, clients, args.seconds)
        )
    finally:
      stop_event.set()
      server.join(10)
  print(
    json.dumps(
      {
        "benchmark": "grpc_roundtrip",
        "seconds": args.seconds,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "baseline": baseline,
        "results": results,
      }
    )
  )


if __name__ == "__main__":
  main()
