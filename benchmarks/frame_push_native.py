r"""What native code would save on the learner's frame push, per env.

  .venv/bin/python benchmarks/frame_push_native.py [--envs 32] \
      [--table_envs 8192] [--repeats 200] [--rounds 5] [--cc cc]

The inference thread's push of one actor's new Atari frames onto their
4-frame stacks, and the copy of those stacks into the inference batch, as
the runtime does it in NumPy (`EnvStateTable.stacked(..., out=...)`: an
in-place shift of the packed words, a strided write of the new byte, a
copy out), against two native variants in benchmarks/native/frame_push.c,
compiled here with `--cc` (-O3, SSE2) and called through ctypes:

- `native_fused`: the same packed table, shift, write and copy-out in one
  pass over the words;
- `native_ring`: a frame ring per env (the new frame written once), its
  planes interleaved into the agent's [84, 84, 4] layout with byte unpacks;
- `runtime`: `EnvStateTable.stacked` with the package's own compiled push
  (seed_rl/common/_frame_push.c, built by `pip install`), where it was
  built; the `numpy` arm turns it off.

Each repeat pushes the next `--envs` envs of a `--table_envs` table, so
the table is touched as the learner's is (out of cache for thousands of
envs). The variants run in turn, `--rounds` times; the medians and their
ratios to NumPy's are printed as one JSON line (compare within a run: the
machine is shared). Both native results are checked against NumPy's first.
Exits 77 (a skip) with the reason where no C compiler works.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from seed_rl.common import env_state  # noqa: E402
from seed_rl.common.env_state import EnvStateTable  # noqa: E402
from seed_rl.common.specs import ArraySpec  # noqa: E402

FRAME = (84, 84)
HW = FRAME[0] * FRAME[1]
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native")


def build(cc: str, workdir: str) -> ctypes.CDLL:
  """Compiles frame_push.c into `workdir`; raises RuntimeError saying why."""
  lib = os.path.join(workdir, "frame_push.so")
  cmd = [cc, "-O3", "-msse2", "-shared", "-fPIC", "-o", lib]
  cmd.append(os.path.join(SOURCE, "frame_push.c"))
  try:
    subprocess.run(cmd, check=True, capture_output=True, text=True)
  except (OSError, subprocess.CalledProcessError) as e:
    detail = getattr(e, "stderr", "") or str(e)
    raise RuntimeError(f"{' '.join(cmd)} failed: {detail.strip()}") from e
  return ctypes.CDLL(lib)


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
  assert a.flags.c_contiguous
  return ctypes.c_void_p(a.ctypes.data)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--envs", type=int, default=32, help="envs per push")
  p.add_argument("--table_envs", type=int, default=8192)
  p.add_argument("--repeats", type=int, default=200)
  p.add_argument("--rounds", type=int, default=5)
  p.add_argument("--cc", default="cc", help="C compiler")
  args = p.parse_args(argv)
  n, total = args.envs, max(args.table_envs, args.envs)
  total -= total % n
  with tempfile.TemporaryDirectory() as tmp:
    try:
      lib = build(args.cc, tmp)
    except RuntimeError as e:
      print(f"skipped: no working C compiler ({e})", file=sys.stderr)
      return 77
    return _measure(lib, n, total, args.repeats, args.rounds)


def _measure(lib, n: int, total: int, repeats: int, rounds: int) -> int:
  rng = np.random.default_rng(0)
  frames = rng.integers(0, 256, (n,) + FRAME, np.uint8)
  table = EnvStateTable(
    total,
    ArraySpec(FRAME, "uint8"),
    ArraySpec((), "int32", num_values=2),
    lambda k: (),
    frame_stack=4,
  )
  assert table.stack is not None
  table.stack[...] = rng.integers(0, 256, table.stack.shape, np.uint8)
  words = table.stack.view(np.uint32)[..., 0].reshape(total, HW)
  ring = rng.integers(0, 256, (total, 4, HW), np.uint8)
  out = np.empty((n,) + FRAME + (4,), np.uint8)
  c_long, c_int = ctypes.c_long, ctypes.c_int

  def fused(lo: int) -> None:
    lib.fused_push(
      _ptr(words[lo : lo + n]), _ptr(frames), _ptr(out), c_long(n), c_long(HW)
    )

  def ring_push(lo: int, newest: int) -> None:
    lib.ring_push(
      _ptr(ring[lo : lo + n]),
      _ptr(frames),
      _ptr(out),
      c_long(n),
      c_long(HW),
      c_int(newest),
    )

  # The native results against NumPy's, on the first rows.
  built = env_state._NATIVE
  env_state._NATIVE = None
  before = table.stack[:n].copy()
  want = table.stacked(slice(0, n), frames, out=np.empty_like(out)).copy()
  table.stack[:n] = before
  fused(0)
  assert np.array_equal(out, want) and np.array_equal(table.stack[:n], want)
  ring[:n] = np.moveaxis(before, -1, 1).reshape(n, 4, HW)  # oldest in plane 0
  ring_push(0, 0)  # the oldest plane takes the new frame: newest is plane 0
  assert np.array_equal(out, want)
  if built is not None:
    table.stack[:n] = before
    env_state._NATIVE = built
    got = table.stacked(slice(0, n), frames, out=np.empty_like(out))
    assert np.array_equal(got, want) and np.array_equal(table.stack[:n], want)

  state = {"lo": 0, "newest": 0}

  def advance() -> int:
    state["lo"] = (state["lo"] + n) % total
    if state["lo"] == 0:
      state["newest"] = (state["newest"] + 1) & 3
    return state["lo"]

  def table_push(native) -> None:
    env_state._NATIVE = native
    lo = advance()
    table.stacked(slice(lo, lo + n), frames, out=out)

  passes = {
    "numpy": lambda: table_push(None),
    "native_fused": lambda: fused(advance()),
    "native_ring": lambda: ring_push(advance(), state["newest"]),
  }
  if built is not None:
    passes["runtime"] = lambda: table_push(built)
  times: dict = {k: [] for k in passes}
  for _ in range(rounds):
    for name, fn in passes.items():
      fn()
      start = time.perf_counter()
      for _ in range(repeats):
        fn()
      times[name].append((time.perf_counter() - start) / repeats / n * 1e6)
  env_state._NATIVE = built
  med = {k: float(np.median(v)) for k, v in times.items()}
  print(
    json.dumps(
      {
        "benchmark": "frame_push_native",
        "envs": n,
        "table_envs": total,
        "us_per_env": {k: round(v, 3) for k, v in med.items()},
        "ratio_to_numpy": {
          k: round(med[k] / med["numpy"], 3) for k in med if k != "numpy"
        },
      }
    )
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
