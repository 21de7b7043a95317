"""The floor under the learner's gRPC handler thread: a bare grpc-aio server.

A server process with the learner's server options and one bidirectional
stream method that reads each request and answers 64 bytes (no parsing, no
validation, no batching), and a client process of asyncio streams sending
requests of the learner's Step size in lock step, as actors do. Prints one
JSON line per stream count: the server process's CPU per message and per
agent step (message / envs_per_message), next to what
`learner_capacity.py --model null` reports for its `grpc_handlers` thread,
whose work is this plus parsing and validation.

  .venv/bin/python benchmarks/grpc_aio_floor.py --streams 16 256 \\
      --envs_per_message 32 --seconds 8

The message is K Atari frames (84 x 84 bytes each) plus ~1% for the other
fields. Server and client are pinned to a core each when there are two
(`os.sched_setaffinity`), as in learner_capacity.py. Process CPU (user +
system) includes the kernel's socket receive copy and gRPC's event engine
threads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CPUS = sorted(os.sched_getaffinity(0))[:2]
FRAME_BYTES = 84 * 84
METHOD = "/floor.Floor/Step"


def _pin(i: int) -> None:
  if len(CPUS) == 2:
    os.sched_setaffinity(0, {CPUS[i]})


def _serve(port_queue, result_queue, warmup_s: float, seconds: float) -> None:
  import grpc

  from seed_rl.grpc import protocol

  _pin(0)

  async def step(request_iterator, context):
    async for _ in request_iterator:
      yield b"\0" * 64

  async def main():
    handler = grpc.method_handlers_generic_handler(
      "floor.Floor", {"Step": grpc.stream_stream_rpc_method_handler(step)}
    )
    server = grpc.aio.server(options=protocol.server_options())
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    port_queue.put(port)
    await asyncio.sleep(warmup_s)
    t0, w0 = os.times(), time.monotonic()
    await asyncio.sleep(seconds)
    t1, w1 = os.times(), time.monotonic()
    cpu = (t1.user + t1.system) - (t0.user + t0.system)
    result_queue.put((cpu, w1 - w0))
    await asyncio.sleep(3600)  # until terminated

  asyncio.run(main())


def _load(port: int, streams: int, message_bytes: int, counts) -> None:
  import grpc

  from seed_rl.grpc import protocol

  _pin(1)

  async def main():
    channel = grpc.aio.insecure_channel(
      f"127.0.0.1:{port}", options=protocol.channel_options(1.0)
    )
    call_fn = channel.stream_stream(METHOD)
    payload = os.urandom(message_bytes)

    async def one(i):
      call = call_fn()
      while True:
        await call.write(payload)
        await call.read()
        counts[i] += 1

    await asyncio.gather(*[one(i) for i in range(streams)])

  asyncio.run(main())


def measure(streams: int, envs: int, seconds: float, warmup_s: float) -> dict:
  message_bytes = int(envs * FRAME_BYTES * 1.01)
  ctx = multiprocessing.get_context("spawn")
  port_queue, result_queue = ctx.Queue(), ctx.Queue()
  counts = ctx.Array("q", streams, lock=False)
  server = ctx.Process(
    target=_serve, args=(port_queue, result_queue, warmup_s, seconds)
  )
  server.start()
  port = port_queue.get(timeout=60)
  load = ctx.Process(target=_load, args=(port, streams, message_bytes, counts))
  load.start()
  try:
    time.sleep(warmup_s)
    before = sum(counts)
    cpu, wall = result_queue.get(timeout=seconds + warmup_s + 60)
    messages = sum(counts) - before
  finally:
    for p in (load, server):
      p.terminate()
      p.join()
  per_message = 1e6 * cpu / max(messages, 1)
  return {
    "streams": streams,
    "envs_per_message": envs,
    "message_bytes": message_bytes,
    "messages_per_s": round(messages / wall, 1),
    "server_cpu_cores": round(cpu / wall, 3),
    "server_cpu_us_per_message": round(per_message, 1),
    "server_cpu_us_per_agent_step": round(per_message / envs, 2),
    "pinned": len(CPUS) == 2,
  }


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--streams", type=int, nargs="+", default=[16])
  parser.add_argument("--envs_per_message", type=int, default=32)
  parser.add_argument("--seconds", type=float, default=8.0)
  parser.add_argument("--warmup", type=float, default=3.0)
  args = parser.parse_args(argv)
  for streams in args.streams:
    line = measure(streams, args.envs_per_message, args.seconds, args.warmup)
    print(json.dumps(line), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
