r"""CPU per env of pushing one Atari frame onto the learner's 4-frame stacks.

  .venv/bin/python benchmarks/frame_push.py [--envs 32] [--repeats 2000]

What the inference thread does per step of one actor's envs with frame
stacking (common/env_state.py, learner.py): push each env's new 84x84
frame onto its stack and hand `act` the stacks, and copy the frame into
its unroll slot. Each pass is timed alone on one actor's batch, and the
whole push as the runtime runs it (`EnvStateTable.stacked(..., view=True)`
plus the slot copy; `push_kind` says whether that was the compiled push or
NumPy's passes). For comparison, the passes of a table that keeps the
newest frame in the low byte, which must be copied out byte-swapped into
the agent's layout: shift, OR of the widened frame, swapped copy; and of a
frame ring (each env's last k frames as planes [k, 84, 84], the newest
written once, contiguously), which must interleave the planes into the
agent's [84, 84, k] layout for every inference batch: as one transposing
copy, or as k strided channel writes.

Prints one JSON line: microseconds per env for each pass and both pushes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from seed_rl.common.env_state import EnvStateTable  # noqa: E402
from seed_rl.common.specs import ArraySpec  # noqa: E402

FRAME = (84, 84)


def _per_env_us(fn, envs: int, repeats: int) -> float:
  fn()
  start = time.perf_counter()
  for _ in range(repeats):
    fn()
  return round((time.perf_counter() - start) / repeats / envs * 1e6, 3)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--envs", type=int, default=32)
  parser.add_argument("--repeats", type=int, default=2000)
  args = parser.parse_args(argv)
  n, r = args.envs, args.repeats
  rng = np.random.default_rng(0)
  frames = rng.integers(0, 256, (n,) + FRAME, np.uint8)
  table = EnvStateTable(
    n,
    ArraySpec(FRAME, "uint8"),
    ArraySpec((), "int32", num_values=2),
    lambda k: (),
    frame_stack=4,
  )
  slots = np.empty((n,) + FRAME, np.uint8)
  rows = slice(0, n)

  def runtime_push():
    table.stacked(rows, frames, view=True)
    np.copyto(slots, frames)

  stack = np.zeros((n,) + FRAME + (4,), np.uint8)
  words = stack.view(np.uint32)[..., 0]
  swapped = np.empty_like(stack)

  def low_byte_push():
    np.left_shift(words, 8, out=words)
    np.bitwise_or(words, frames, out=words)
    np.copyto(swapped.view(">u4")[..., 0], words)

  ring = rng.integers(0, 256, (n, 4) + FRAME, np.uint8)
  interleaved = np.empty_like(stack)

  def ring_push_transpose():
    np.copyto(ring[:, 3], frames)
    np.copyto(interleaved, ring.transpose(0, 2, 3, 1))

  def ring_push_channels():
    np.copyto(ring[:, 3], frames)
    for k in range(4):
      np.copyto(interleaved[..., k], ring[:, k])

  result = {
    "benchmark": "frame_push",
    "envs": n,
    "push_kind": table.push_kind,  # runtime_push: 'compiled' or 'numpy'
    "us_per_env": {
      "runtime_push": _per_env_us(runtime_push, n, r),
      "shift": _per_env_us(lambda: np.right_shift(words, 8, out=words), n, r),
      "frame_into_channel": _per_env_us(
        lambda: np.copyto(stack[..., 3], frames), n, r
      ),
      "frame_into_slot": _per_env_us(lambda: np.copyto(slots, frames), n, r),
      "low_byte_push": _per_env_us(low_byte_push, n, r),
      "or_widened_frame": _per_env_us(
        lambda: np.bitwise_or(words, frames, out=words), n, r
      ),
      "swapped_copy_out": _per_env_us(
        lambda: np.copyto(swapped.view(">u4")[..., 0], words), n, r
      ),
      "ring_push_transpose": _per_env_us(ring_push_transpose, n, r),
      "ring_push_channels": _per_env_us(ring_push_channels, n, r),
    },
  }
  print(json.dumps(result))


if __name__ == "__main__":
  main()
