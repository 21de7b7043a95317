"""Checkpoints: periodic, on shutdown, resumed automatically from the logdir.

tf.train.CheckpointManager writes each checkpoint's files under temporary
names and renames them, then rewrites the `checkpoint` index atomically, so a
crash mid-save leaves the previous checkpoint as the latest: a checkpoint is
never half-written from the reader's point of view.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

import tensorflow as tf


class Checkpointer:
  """Saves and restores `objects` plus the env-step counter.

  Args:
    directory: where checkpoints live (usually `<logdir>/checkpoints`).
    objects: name -> trackable (networks, optimizers, step variables).
    max_to_keep: older checkpoints are deleted beyond this many.
  """

  def __init__(self, directory: str, objects: Dict[str, Any],
               max_to_keep: int = 3):
    self.directory = directory
    self._env_steps = tf.Variable(0, dtype=tf.int64, trainable=False)
    self._checkpoint = tf.train.Checkpoint(env_steps=self._env_steps,
                                           **objects)
    self._manager = tf.train.CheckpointManager(self._checkpoint, directory,
                                               max_to_keep=max_to_keep)

  @property
  def env_steps(self) -> int:
    return int(self._env_steps.numpy())

  def restore(self) -> Optional[str]:
    """Restores the latest checkpoint if any; returns its path or None."""
    path = self._manager.latest_checkpoint
    if path is None:
      return None
    status = self._checkpoint.restore(path)
    # Objects missing from the checkpoint would silently start from scratch:
    # refuse instead (e.g. a logdir written by a different agent).
    status.assert_existing_objects_matched()
    return path

  def save(self, env_steps: int) -> str:
    self._env_steps.assign(env_steps)
    os.makedirs(self.directory, exist_ok=True)
    return self._manager.save()
