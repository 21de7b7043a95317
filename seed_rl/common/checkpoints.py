"""Checkpoints: periodic, on shutdown, resumed automatically from the logdir.

Durable and never half-read:
  - TensorFlow writes a checkpoint's files under a temporary directory and
    renames them into place; we then fsync every file and the directory, and
    only after that point the `checkpoint` index at the new checkpoint (an
    atomic rename, fsynced too). A crash or power loss at any moment leaves
    the previous checkpoint as the latest.
  - On restore, a latest checkpoint that cannot be read (truncated, missing
    files) is skipped with a warning and the next older one is used.
  - A failed save (full disk, I/O error) warns, removes what it wrote and
    returns None; training goes on and the next interval tries again.
  - Temporary files left by a save that was killed are removed on start.

With `replay` (LearnerConfig.checkpoint_replay) every checkpoint also
carries the agent's replay (seed_rl.common.replay_state), written before the
index points at the checkpoint and restored with it.

Fault injection (tests/faults/test_faults.py): $SEED_RL_FAULT_CHECKPOINT_DELAY_S
makes every save pause that long after writing its files and before the
index points at them, so a test can kill the learner during a save.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import shutil
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from seed_rl.common import replay_state

_PREFIX = "ckpt"
_NUMBER = re.compile(rf"{_PREFIX}-(\d+)$")
_DELAY_ENV = "SEED_RL_FAULT_CHECKPOINT_DELAY_S"


def _fsync(path: str) -> None:
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def _write_index(directory: str, paths: Sequence[str]) -> None:
  """Points the `checkpoint` index at paths[-1], listing `paths` (oldest
  first), by an atomic rename of a fsynced file.

  The index is TensorFlow's CheckpointState in protobuf text format, which
  tf.train.get_checkpoint_state, tf.train.latest_checkpoint and TensorBoard
  read. Written here rather than by tf.compat.v1.train.update_checkpoint_state,
  which is deprecated and says so on every run.
  """
  names = [os.path.relpath(p, directory) for p in paths]
  lines = [f"model_checkpoint_path: {json.dumps(names[-1])}"]
  lines += [f"all_model_checkpoint_paths: {json.dumps(n)}" for n in names]
  index = os.path.join(directory, "checkpoint")
  temporary = index + ".tmp"
  with open(temporary, "w") as f:
    f.write("\n".join(lines) + "\n")
    f.flush()
    os.fsync(f.fileno())
  os.replace(temporary, index)


def checkpoint_paths(directory: str) -> List[str]:
  """Paths (prefixes) of the complete checkpoints in `directory`, oldest
  first; [] when it has none."""
  state = tf.train.get_checkpoint_state(directory)
  if state is None:
    return []
  paths = list(state.all_model_checkpoint_paths)
  if state.model_checkpoint_path and state.model_checkpoint_path not in paths:
    paths.append(state.model_checkpoint_path)
  return [p if os.path.isabs(p) else os.path.join(directory, p) for p in paths]


def restore_newest(
  checkpoint: tf.train.Checkpoint, paths: Sequence[str]
) -> Optional[Tuple[str, Any]]:
  """Restores into `checkpoint` the newest of `paths` (oldest first) that can
  be read, skipping unreadable ones with a warning.

  Returns:
    (its path, the restore status; the caller checks what it must match),
    or None when none can be read.
  """
  for path in reversed(paths):
    try:
      status = checkpoint.restore(path)
    except (tf.errors.OpError, ValueError, IndexError, OSError) as e:
      logging.warning(
        "checkpoint %s cannot be read (%s); trying the previous one",
        path,
        str(e).splitlines()[0],
      )
      continue
    return path, status
  return None


class Checkpointer:
  """Saves and restores `objects` plus the env-step counter.

  Args:
    directory: where checkpoints live (usually `<logdir>/checkpoints`).
    objects: name -> trackable (networks, optimizers, step variables).
    max_to_keep: older checkpoints are deleted beyond this many.
    replay: an agent that keeps a replay (`Agent.keeps_replay`) whose
      replay goes with every checkpoint; None: checkpoints without replay.
    log: where the replay's save and restore are reported.
  """

  def __init__(
    self,
    directory: str,
    objects: Dict[str, Any],
    max_to_keep: int = 3,
    replay: Optional[Any] = None,
    log: Callable[[str], None] = logging.info,
  ):
    if max_to_keep < 1:
      raise ValueError(f"max_to_keep must be >= 1, got {max_to_keep}")
    self.directory = directory
    self.max_to_keep = max_to_keep
    self._replay = replay
    self._log = log
    self.replay_written: Optional[replay_state.Written] = None
    self._env_steps = tf.Variable(0, dtype=tf.int64, trainable=False)
    self._checkpoint = tf.train.Checkpoint(env_steps=self._env_steps, **objects)
    # Created now so that write() stores it, as CheckpointManager.save did
    # (restoring checks that every existing object is matched).
    _ = self._checkpoint.save_counter
    self._remove_leftovers()

  @property
  def env_steps(self) -> int:
    return int(self._env_steps.numpy())

  # ------------------------------------------------------------- reading --
  def checkpoints(self) -> List[str]:
    """Paths (prefixes) of the complete checkpoints, oldest first."""
    return checkpoint_paths(self.directory)

  def restore(self) -> Optional[str]:
    """Restores the newest readable checkpoint; returns its path or None."""
    found = restore_newest(self._checkpoint, self.checkpoints())
    if found is None:
      return None
    path, status = found
    # Objects missing from the checkpoint would silently start from
    # scratch: refuse instead (e.g. a logdir written by another agent).
    status.assert_existing_objects_matched()
    if self._replay is not None:
      self._restore_replay(path)
    return path

  def _restore_replay(self, checkpoint: str) -> None:
    """Puts the replay saved with `checkpoint` back, if it has one."""
    assert self._replay is not None  # called only with a replay
    path = replay_state.path_for(checkpoint)
    if not os.path.exists(path):
      self._log(
        f"[learner] {checkpoint} has no saved replay: replay starts empty"
      )
      return
    start = time.monotonic()
    try:
      state = replay_state.read(path)
    except ValueError as e:
      self._log(f"[learner] {e}: replay starts empty")
      return
    try:
      self._replay.load_replay_state(state)
    except (ValueError, KeyError) as e:
      raise ValueError(
        f"{path}: the saved replay does not fit this run ({e}); to resume "
        "with an empty replay, delete that file or set "
        "LearnerConfig.checkpoint_replay = False"
      ) from e
    self._log(
      f"[learner] replay restored from {path} "
      f"({os.path.getsize(path) / 2**20:.1f} MiB in "
      f"{time.monotonic() - start:.1f} s)"
    )

  # ------------------------------------------------------------- writing --
  def save(self, env_steps: int) -> Optional[str]:
    """Writes a checkpoint durably; None (with a warning) if it failed."""
    # NumPy, not Python ints: see metrics.SummaryWriter.write.
    self._env_steps.assign(np.int64(env_steps))
    existing = self.checkpoints()
    number = 1 + max([self._number(p) for p in existing], default=0)
    prefix = os.path.join(self.directory, f"{_PREFIX}-{number}")
    try:
      os.makedirs(self.directory, exist_ok=True)
      self._checkpoint.save_counter.assign(np.int64(number))
      path = self._checkpoint.write(prefix)
      if self._replay is not None:
        self.replay_written = replay_state.write(
          replay_state.path_for(path), self._replay.replay_state
        )
      delay = float(os.environ.get(_DELAY_ENV) or 0)
      if delay > 0:
        time.sleep(delay)
      for name in glob.glob(glob.escape(path) + ".*"):
        _fsync(name)
      _fsync(self.directory)
      keep = (existing + [path])[-self.max_to_keep :]
      _write_index(self.directory, keep)
      _fsync(self.directory)
    except (OSError, tf.errors.OpError) as e:
      logging.warning(
        "checkpoint save to %s failed (%s); training goes on "
        "and the next save retries",
        prefix,
        str(e).splitlines()[0] if str(e) else type(e).__name__,
      )
      self._delete(prefix)
      self._remove_leftovers()
      return None
    for old in existing:
      if old not in keep:
        self._delete(old)
    if self._replay is not None and self.replay_written is not None:
      written = self.replay_written
      self._log(
        f"[learner] replay saved with {os.path.basename(path)}: "
        f"{written.bytes / 2**20:.1f} MiB in {written.seconds:.1f} s"
      )
    return path

  # ------------------------------------------------------------- helpers --
  @staticmethod
  def _number(path: str) -> int:
    match = _NUMBER.search(path)
    return int(match.group(1)) if match else 0

  @staticmethod
  def _delete(prefix: str) -> None:
    for name in glob.glob(glob.escape(prefix) + ".*"):
      try:
        os.remove(name)
      except OSError:
        pass

  def _remove_leftovers(self) -> None:
    """Temporary directories and files of saves that never finished."""
    if not os.path.isdir(self.directory):
      return
    for name in os.listdir(self.directory):
      path = os.path.join(self.directory, name)
      if "_temp" in name or ".tmp" in name:
        if os.path.isdir(path):
          shutil.rmtree(path, ignore_errors=True)
        else:
          try:
            os.remove(path)
          except OSError:
            pass
