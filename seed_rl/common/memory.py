"""Where the learner process's memory is: RSS split by who holds it.

RSS alone cannot tell a leak from an allocator that keeps freed pages, so
the learner also writes (TensorBoard, `system/*`, every report):

- `system/rss_mib`: resident memory (/proc/self/status VmRSS);
- `system/malloc_in_use_mib`: bytes glibc's malloc has handed out and not
  had back, over all arenas and mmap'd chunks (mallinfo2 `uordblks +
  hblkhd`): TensorFlow's CPU tensors, NumPy arrays, gRPC buffers and
  Python's large objects. Growth here is live data: a cache or a leak;
- `system/malloc_free_mib`: bytes freed to malloc and kept by it
  (`fordblks`): growth here is fragmentation, returned by `malloc_trim`;
- `system/python_blocks`: blocks Python's small-object allocator holds
  (`sys.getallocatedblocks`), a count of live small Python objects;
- `system/threads`, `system/fds`.

Whatever RSS holds beyond malloc's in-use and free bytes is Python's
small-object arenas, thread stacks and mapped code. mallinfo2 needs glibc
2.33 or later; elsewhere the two malloc scalars are left out.

`freeze_long_lived` takes what a learner process built at start-up
(TensorFlow's modules and traced graphs, ~1.7M objects) out of the cyclic
garbage collector's reach. Python runs a full collection only once the
objects that survived into its oldest generation since the last one number
a quarter of those already there, so with TensorFlow loaded the cyclic
garbage a server makes (gRPC's aio calls that end in an abort leave some:
a fuzzing client at ~30 refused calls/s made ~450 blocks/s) piles up for
~15 minutes before each full collection, and RSS keeps the high-water mark
(+9% in the soak). With the start-up objects frozen, full collections come
often and only walk what was made since.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import sys
from typing import Dict, Mapping, Optional

_MIB = 1024.0 * 1024.0


class _Mallinfo2(ctypes.Structure):
  # glibc's struct mallinfo2: ten size_t fields, in this order.
  _fields_ = [
    (name, ctypes.c_size_t)
    for name in (
      "arena", "ordblks", "smblks", "hblks", "hblkhd",
      "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
    )
  ]  # fmt: skip


def _load_libc() -> Optional[ctypes.CDLL]:
  try:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
  except OSError:
    return None


_LIBC = _load_libc()


def _load_mallinfo2():
  fn = getattr(_LIBC, "mallinfo2", None)  # not glibc, or glibc < 2.33
  if fn is None:
    return None
  fn.restype = _Mallinfo2
  fn.argtypes = []
  return fn


_MALLINFO2 = _load_mallinfo2()


# mallopt's parameter numbers (glibc malloc.h).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def keep_large_buffers(
  mmap_threshold: int = 16 << 20,
  trim_threshold: int = 512 << 20,
  top_pad: int = 64 << 20,
) -> bool:
  """Makes glibc's malloc reuse the memory of large buffers instead of
  mapping fresh pages for each one. Returns False where it cannot (not
  glibc).

  gRPC allocates a buffer per received message (a 32-frame Atari Step is
  ~228 KB). Above the mmap threshold (128 KiB until malloc raises it), or
  after a thread's arena is trimmed back to its top, every such buffer is
  fresh pages from the kernel: a page fault and a zeroed page per 4 KiB,
  which a bare gRPC server spends about a quarter of its CPU on. With
  chunks up to `mmap_threshold` served from the arenas, and
  `trim_threshold` of free memory at an arena's top kept (plus `top_pad`
  per growth), the same pages come back message after message. The cost
  is up to `trim_threshold` of free memory kept per arena."""
  mallopt = getattr(_LIBC, "mallopt", None)
  if mallopt is None:  # not glibc
    return False
  mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
  return all(
    mallopt(param, value) == 1
    for param, value in (
      (_M_MMAP_THRESHOLD, mmap_threshold),
      (_M_TRIM_THRESHOLD, trim_threshold),
      (_M_TOP_PAD, top_pad),
    )
  )


# What keep_large_buffers sets, as the environment and glibc's tunables
# name it.
_USER_SETTINGS = (
  "MALLOC_MMAP_THRESHOLD_",
  "MALLOC_TRIM_THRESHOLD_",
  "MALLOC_TOP_PAD_",
)
_USER_TUNABLES = (
  "glibc.malloc.mmap_threshold",
  "glibc.malloc.trim_threshold",
  "glibc.malloc.top_pad",
)


def malloc_left_to_user(environ: Mapping[str, str]) -> bool:
  """Whether `environ` turns keep_large_buffers off: SEED_RL_KEEP_LARGE_
  BUFFERS=0, or one of the three settings it makes already chosen by the
  user (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_, or
  GLIBC_TUNABLES naming them), which a later mallopt would override."""
  tunables = environ.get("GLIBC_TUNABLES", "")
  return (
    environ.get("SEED_RL_KEEP_LARGE_BUFFERS", "1") == "0"
    or any(k in environ for k in _USER_SETTINGS)
    or any(t in tunables for t in _USER_TUNABLES)
  )


def malloc_mib() -> Optional[Dict[str, float]]:
  """{'in_use': MiB, 'free': MiB} of glibc's malloc; None without it."""
  if _MALLINFO2 is None:
    return None
  info = _MALLINFO2()
  return {
    "in_use": (info.uordblks + info.hblkhd) / _MIB,
    "free": info.fordblks / _MIB,
  }


def _status() -> Dict[str, int]:
  """VmRSS (KiB) and Threads from /proc/self/status; {} where unreadable."""
  out: Dict[str, int] = {}
  try:
    with open("/proc/self/status") as f:
      for line in f:
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
          out[key] = int(value.split()[0])
  except OSError:
    pass
  return out


def memory_scalars() -> Dict[str, float]:
  """The `system/*` scalars above for this process (those it can read)."""
  scalars: Dict[str, float] = {
    "system/python_blocks": float(sys.getallocatedblocks())
  }
  status = _status()
  if "VmRSS" in status:
    scalars["system/rss_mib"] = status["VmRSS"] / 1024.0
  if "Threads" in status:
    scalars["system/threads"] = float(status["Threads"])
  try:
    scalars["system/fds"] = float(len(os.listdir("/proc/self/fd")))
  except OSError:
    pass
  heap = malloc_mib()
  if heap is not None:
    scalars["system/malloc_in_use_mib"] = heap["in_use"]
    scalars["system/malloc_free_mib"] = heap["free"]
  return scalars


def freeze_long_lived() -> int:
  """One full collection, then every object alive is moved to the
  permanent generation (gc.freeze): reference counting still frees them,
  the cyclic collector no longer walks them. Returns how many were frozen.
  Call once, from the process's main thread, when start-up is over."""
  gc.collect()
  gc.freeze()
  count = gc.get_freeze_count()
  # The size of the oldest generation, against which the next full
  # collection is weighed, is only re-measured by a full collection: this
  # one walks nothing (everything is frozen) and sets it to ~0.
  gc.collect()
  return count
