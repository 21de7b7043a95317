"""The soak's fuzzing client, as its own process (so it can run on another
network host than the soak's driver).

    python benchmarks/soak_fuzz.py ADDRESS ACTOR_ID NUM_ENVS INTERVAL_S

Says Hello as actor ACTOR_ID with NUM_ENVS CartPole envs and sends randomly
mutated Step messages (the mutations of tests/faults/test_fuzz_protocol.py:
dtype, shape, payload bytes, truncation, extension, cleared fields, raw wire
damage), each on a fresh Hello and stream, one every INTERVAL_S, and checks
that each is served or refused with INVALID_ARGUMENT (a learner that is
away, restarting or cut off answers UNAVAILABLE or DEADLINE_EXCEEDED, which
are allowed; a call in flight while a learner stops is CANCELLED, which the
soak allows only then, by the wall-clock times in `cancelled_at`). On
SIGTERM or SIGINT it stops and prints one JSON line: {"served",
"invalid_argument", "retried", "cancelled_at": [time.time()],
"unexpected": [first 5]}.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import grpc
import numpy as np

from seed_rl.common.specs import ArraySpec, StepBatch
from seed_rl.grpc import codec, protocol, seed_rl_pb2

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
    self.cancelled_at: List[float] = []

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
        if e.code() == grpc.StatusCode.CANCELLED:
          self.cancelled_at.append(time.time())
        elif e.code() not in (
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
        elif e.code() == grpc.StatusCode.CANCELLED:
          self.cancelled_at.append(time.time())
        elif e.code() not in (
          grpc.StatusCode.UNAVAILABLE,
          grpc.StatusCode.DEADLINE_EXCEEDED,
        ):
          self.unexpected.append(f"Step: {e.code().name}: {e.details()}")
      finally:
        call.cancel()
    channel.close()


def main(argv=None) -> int:
  address, actor_id, k, interval_s = (argv or sys.argv[1:])[:4]
  fuzzer = Fuzzer(address, int(actor_id), int(k), float(interval_s))
  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda *_: fuzzer.stop.set())
  fuzzer.start()
  while fuzzer.is_alive():  # the main thread, so the signals get through
    fuzzer.join(0.5)
  print(
    json.dumps(
      dict(
        fuzzer.counts,
        cancelled_at=fuzzer.cancelled_at,
        unexpected=fuzzer.unexpected[:5],
      )
    )
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
