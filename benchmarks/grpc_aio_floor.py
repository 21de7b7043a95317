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

`--server aio sync cpp` measures, in turn, the same method on grpc-aio (the
learner's server), on grpcio's thread-pool server, and on gRPC's C++
callback server (benchmarks/native/grpc_floor.cc: copies each request into
one buffer and answers, no Python; built here with `--cxx` against the
system's gRPC C++ library, Debian's libgrpc++-dev, and the run exits 77,
a skip, naming what is missing where there is no compiler, pkg-config
or libgrpc++-dev; 1 where the source does not compile). The C++ row is
the floor a native handler would start from.

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
import select
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CPUS = sorted(os.sched_getaffinity(0))[:2]
FRAME_BYTES = 84 * 84
METHOD = "/floor.Floor/Step"


def _pin(i: int) -> None:
  if len(CPUS) == 2:
    os.sched_setaffinity(0, {CPUS[i]})


def _serve(
  port_queue, result_queue, warmup_s: float, seconds: float, kind: str
) -> None:
  import grpc

  from seed_rl.grpc import protocol

  _pin(0)
  if kind == "sync":
    _serve_sync(port_queue, result_queue, warmup_s, seconds)
    return

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


def _serve_sync(port_queue, result_queue, warmup_s: float, seconds: float):
  """The same method on grpcio's thread-pool server: one handler thread
  per open stream, each blocked in gRPC's C core between messages."""
  from concurrent import futures

  import grpc

  from seed_rl.grpc import protocol

  def step(request_iterator, context):
    for _ in request_iterator:
      yield b"\0" * 64

  handler = grpc.method_handlers_generic_handler(
    "floor.Floor", {"Step": grpc.stream_stream_rpc_method_handler(step)}
  )
  server = grpc.server(
    futures.ThreadPoolExecutor(max_workers=1100),
    options=protocol.server_options(),
    maximum_concurrent_rpcs=None,
  )
  server.add_generic_rpc_handlers((handler,))
  port = server.add_insecure_port("127.0.0.1:0")
  server.start()
  port_queue.put(port)
  time.sleep(warmup_s)
  t0, w0 = os.times(), time.monotonic()
  time.sleep(seconds)
  t1, w1 = os.times(), time.monotonic()
  cpu = (t1.user + t1.system) - (t0.user + t0.system)
  result_queue.put((cpu, w1 - w0))
  time.sleep(3600)  # until terminated


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


class MissingTool(RuntimeError):
  """What --server cpp needs and this machine lacks (the run is skipped)."""


def build_cpp(cxx: str, workdir: str) -> str:
  """Compiles native/grpc_floor.cc against the system's gRPC C++ library
  (Debian: libgrpc++-dev) into `workdir`; returns the binary. Raises
  MissingTool naming what is missing, RuntimeError if the source does not
  compile."""
  hint = "--server cpp needs pkg-config and gRPC's C++ library (Debian: apt install libgrpc++-dev pkg-config)"
  try:
    flags = subprocess.run(
      ["pkg-config", "--cflags", "--libs", "grpc++"],
      capture_output=True,
      text=True,
    )
  except OSError as e:
    raise MissingTool(f"{hint}: {e}") from None
  if flags.returncode != 0:
    raise MissingTool(f"{hint}: {flags.stderr.strip()}")
  out = os.path.join(workdir, "grpc_floor")
  source = os.path.join(ROOT, "benchmarks", "native", "grpc_floor.cc")
  cmd = [cxx, "-O2", "-std=c++17", "-o", out, source, *flags.stdout.split()]
  try:
    done = subprocess.run(cmd, capture_output=True, text=True)
  except OSError as e:
    raise MissingTool(
      f"--server cpp needs a C++ compiler (--cxx): {e}"
    ) from None
  if done.returncode != 0:
    raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
  return out


class _CppServer:
  """native/grpc_floor.cc as a process pinned to the server's core, with
  the Process interface measure() uses."""

  def __init__(self, binary: str, warmup_s: float, seconds: float):
    self._dir = tempfile.mkdtemp(prefix="grpc_floor_port_")
    self._port_file = os.path.join(self._dir, "port")
    self._proc = subprocess.Popen(
      [binary, self._port_file, str(warmup_s), str(seconds)],
      stdout=subprocess.PIPE,
      text=True,
      preexec_fn=lambda: _pin(0),
    )

  def port(self, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      if os.path.exists(self._port_file):
        text = open(self._port_file).read()
        if text.endswith("\n"):
          return int(text)
      if self._proc.poll() is not None:
        raise RuntimeError(f"grpc_floor exited {self._proc.returncode}")
      time.sleep(0.05)
    raise TimeoutError("grpc_floor did not bind a port")

  def result(self, timeout: float):
    assert self._proc.stdout is not None
    ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
    if not ready:
      raise TimeoutError(f"grpc_floor printed nothing in {timeout:g} s")
    line = json.loads(self._proc.stdout.readline())
    return line["cpu_s"], line["wall_s"]

  def terminate(self) -> None:
    self._proc.terminate()

  def join(self) -> None:
    self._proc.wait()
    shutil.rmtree(self._dir, ignore_errors=True)


def measure(
  streams: int,
  envs: int,
  seconds: float,
  warmup_s: float,
  kind: str = "aio",
  cpp_binary: str = "",
) -> dict:
  message_bytes = int(envs * FRAME_BYTES * 1.01)
  ctx = multiprocessing.get_context("spawn")
  port_queue, result_queue = ctx.Queue(), ctx.Queue()
  counts = ctx.Array("q", streams, lock=False)
  server: Any
  if kind == "cpp":
    server = _CppServer(cpp_binary, warmup_s, seconds)
    try:
      port = server.port(timeout=60)
    except BaseException:
      server.terminate()
      server.join()
      raise
  else:
    server = ctx.Process(
      target=_serve, args=(port_queue, result_queue, warmup_s, seconds, kind)
    )
    server.start()
    port = port_queue.get(timeout=60)
  load = ctx.Process(target=_load, args=(port, streams, message_bytes, counts))
  load.start()
  try:
    time.sleep(warmup_s)
    before = sum(counts)
    if kind == "cpp":
      cpu, wall = server.result(timeout=seconds + warmup_s + 60)
    else:
      cpu, wall = result_queue.get(timeout=seconds + warmup_s + 60)
    messages = sum(counts) - before
  finally:
    for p in (load, server):
      p.terminate()
      p.join()
  per_message = 1e6 * cpu / max(messages, 1)
  return {
    "server": kind,
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
  parser.add_argument(
    "--server",
    nargs="+",
    choices=("aio", "sync", "cpp"),
    default=["aio"],
    help="grpc.aio (the learner's), grpcio's thread-pool server, and/or "
    "gRPC's C++ callback server (native/grpc_floor.cc), measured in turn",
  )
  parser.add_argument("--cxx", default="g++", help="C++ compiler (cpp)")
  args = parser.parse_args(argv)
  with tempfile.TemporaryDirectory(prefix="grpc_floor_") as workdir:
    binary = ""
    if "cpp" in args.server:
      try:
        binary = build_cpp(args.cxx, workdir)
      except MissingTool as e:
        print(f"grpc_aio_floor: {e}", file=sys.stderr)
        return 77
      except RuntimeError as e:
        print(f"grpc_aio_floor: {e}", file=sys.stderr)
        return 1
    for streams in args.streams:
      for kind in args.server:
        line = measure(
          streams,
          args.envs_per_message,
          args.seconds,
          args.warmup,
          kind,
          binary,
        )
        print(json.dumps(line), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
