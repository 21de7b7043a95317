r"""CPU per message of reading a StepRequest and writing its StepResponse.

  .venv/bin/python benchmarks/wire_decode.py [--envs 1 8 32] [--obs atari]
      [--repeats 2000] [--rounds 3]

What the learner's gRPC handler thread does with each message of an actor
of K envs, timed alone: read the request either by a protobuf parse and
validation.check_step_request (what every message cost before, and what
any message does that is not its session's usual one), or from its wire
bytes by the session's template (grpc/wire_template.py); and build the
response either as a StepResponse serialized by protobuf or from the
per-shape prefix. The messages are serialized by protobuf as actors
serialize them (usual steps: no episode ended). Rounds alternate the two
readings; the figures are the rounds' medians.

Prints one JSON line per K: microseconds per message and per agent step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from seed_rl.common.specs import ArraySpec, StepBatch  # noqa: E402
from seed_rl.grpc import codec, seed_rl_pb2, validation  # noqa: E402
from seed_rl.grpc import wire_template  # noqa: E402
from seed_rl.grpc.sessions import Session  # noqa: E402

SPECS = {
  "atari": ArraySpec((84, 84), "uint8", "frame"),
  "cartpole": ArraySpec((4,), "float32", "observation"),
}


def _messages(spec: ArraySpec, k: int, count: int) -> List[bytes]:
  rng = np.random.default_rng(0)
  out = []
  for i in range(count):
    if spec.dtype == "uint8":
      observation = rng.integers(0, 256, (k, *spec.shape), dtype=np.uint8)
    else:
      observation = rng.normal(size=(k, *spec.shape)).astype(spec.dtype)
    request = codec.encode_step_batch(
      StepBatch(
        env_ids=np.arange(k, dtype=np.int32),
        run_ids=rng.integers(1, 2**62, k),
        reward=(rng.random(k) < 0.05).astype(np.float32),
        terminated=np.zeros(k, bool),
        truncated=np.zeros(k, bool),
        observation=observation,
        final_observation=np.zeros((0, *spec.shape), spec.dtype),
        episode_return=np.zeros(0, np.float32),
        episode_length=np.zeros(0, np.int32),
      )
    )
    request.sequence = 2**33 + i
    out.append(request.SerializeToString())
  return out


def _us_per_call(fn: Callable[[Any], object], items, repeats: int) -> float:
  start = time.perf_counter()
  for i in range(repeats):
    fn(items[i % len(items)])
  return (time.perf_counter() - start) / repeats * 1e6


def measure(obs: str, k: int, repeats: int, rounds: int) -> dict:
  spec, limits = SPECS[obs], validation.ValueLimits()
  messages = _messages(spec, k, 16)
  session = Session("bench", 0, 0, k)

  def parse(wire: bytes):
    request = seed_rl_pb2.StepRequest.FromString(wire)
    batch = validation.check_step_request(
      request, spec, session, k, lambda _: None, limits
    )
    return request.sequence, batch

  def template(wire: bytes):
    return wire_template.check_wire(wire, spec, session, limits)

  _, first = parse(messages[0])
  wire_template.remember(messages[0], first, session)
  assert isinstance(session.wire_template, wire_template.WireTemplate)
  for wire in messages:  # the same sequence and arrays, or no figure
    (s1, b1), (s2, b2) = parse(wire), template(wire)
    assert s1 == s2
    for field in codec.STEP_FIELDS:
      assert np.array_equal(getattr(b1, field), getattr(b2, field)), field

  actions = [np.arange(k, dtype=np.int32) % 4 + i for i in range(4)]
  encoder = wire_template.ResponseEncoder()

  def serialize(a: np.ndarray) -> bytes:
    response = seed_rl_pb2.StepResponse()
    codec.fill_tensor(response.action, a, "action")
    return response.SerializeToString()

  assert all(encoder.encode(a) == serialize(a) for a in actions)
  arms: Dict[str, Tuple[Callable[[Any], object], Sequence[Any]]] = {
    "parse": (parse, messages),
    "template": (template, messages),
    "response_serialized": (serialize, actions),
    "response_prefix": (encoder.encode, actions),
  }
  times: dict = {name: [] for name in arms}
  for _ in range(rounds):
    for name, (fn, items) in arms.items():
      fn(items[0])
      times[name].append(_us_per_call(fn, items, repeats))
  per_message = {
    name: round(statistics.median(t), 2) for name, t in times.items()
  }
  return {
    "benchmark": "wire_decode",
    "obs": obs,
    "envs_per_message": k,
    "message_bytes": len(messages[0]),
    "us_per_message": per_message,
    "us_per_agent_step": {
      name: round(us / k, 3) for name, us in per_message.items()
    },
    "template_vs_parse": round(
      per_message["template"] / per_message["parse"], 3
    ),
  }


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--obs", choices=sorted(SPECS), default="atari")
  parser.add_argument("--envs", type=int, nargs="+", default=[1, 8, 32])
  parser.add_argument("--repeats", type=int, default=2000)
  parser.add_argument("--rounds", type=int, default=3)
  args = parser.parse_args(argv)
  for k in args.envs:
    print(
      json.dumps(measure(args.obs, k, args.repeats, args.rounds)), flush=True
    )
  return 0


if __name__ == "__main__":
  sys.exit(main())
