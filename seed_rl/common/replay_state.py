"""A replay's contents beside a checkpoint: `<checkpoint>.replay.npz`.

With LearnerConfig.checkpoint_replay, every checkpoint of an agent that
keeps a replay (R2D2, DQN, SAC, TD3, ACER: `Agent.keeps_replay`) also
writes the replay's arrays (`Agent.replay_state`) to one uncompressed
NumPy archive named after the checkpoint, and a resumed run puts them back
(`Agent.load_replay_state`), so that a preempted R2D2 or DQN run goes on
training at once instead of refilling its replay first.

- Durable as the checkpoint is: the archive is written under a `.tmp`
  name, fsynced and renamed before the checkpoint index points at the
  checkpoint (seed_rl.common.checkpoints), and deleted with it.
- No pickle: arrays of numbers, bools and strings only, read with
  `allow_pickle=False`.
- An archive that cannot be read (truncated, not a zip) is reported and
  the run resumes with an empty replay: the networks are intact and the
  replay refills. Settings that differ from the saved replay's (capacity,
  priority exponent, unroll length...) stop the resume with an error that
  names them, since silently dropping a full replay would be a surprise.
- Cost: one copy of the replay in memory while it is written (taken under
  the replay's lock, so acting pauses for the copy), and the archive's
  size on disk; `benchmarks/replay_checkpoint.py` measures both.
"""

from __future__ import annotations

import os
import time
import zipfile
from typing import Any, Callable, Dict, NamedTuple

import numpy as np

SUFFIX = ".replay.npz"


class Written(NamedTuple):
  path: str
  bytes: int
  seconds: float  # copying the replay out and writing it, fsync included


def path_for(checkpoint: str) -> str:
  """The replay archive of checkpoint prefix `checkpoint`."""
  return checkpoint + SUFFIX


def write(path: str, state_fn: Callable[[], Dict[str, np.ndarray]]) -> Written:
  """Writes `state_fn()` (name -> array) to `path` durably; OSError if the
  disk refuses (the caller drops the whole checkpoint then)."""
  start = time.monotonic()
  state = state_fn()
  for name, value in state.items():
    if np.asarray(value).dtype == object:
      raise ValueError(f"replay state {name!r} holds Python objects")
  temporary = path + ".tmp"
  with open(temporary, "wb") as f:
    savez: Any = np.savez  # its stubs type **arrays as options
    savez(f, **state)
    f.flush()
    os.fsync(f.fileno())
  os.replace(temporary, path)
  return Written(path, os.path.getsize(path), time.monotonic() - start)


def read(path: str) -> Dict[str, np.ndarray]:
  """All arrays of the archive at `path`, read into memory; ValueError
  naming the file if it cannot be read."""
  try:
    with np.load(path, allow_pickle=False) as archive:
      return {name: archive[name] for name in archive.files}
  except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as e:
    raise ValueError(f"replay archive {path} cannot be read ({e})") from e
