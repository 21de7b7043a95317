"""Checkpoints: durable saves, unreadable latest skipped, failed saves survived."""

import os

import numpy as np
import tensorflow as tf

from seed_rl.common.checkpoints import Checkpointer


def _objects(value):
  return {
    "w": tf.Variable(np.full(3, value, np.float32)),
    "step": tf.Variable(int(value), dtype=tf.int64),
  }


def test_save_restore_roundtrip_and_keeps_only_the_newest(tmp_path):
  d = str(tmp_path / "ckpt")
  objs = _objects(1.0)
  ckpt = Checkpointer(d, objs, max_to_keep=2)
  paths = []
  for i in range(4):
    objs["w"].assign(np.full(3, float(i), np.float32))
    paths.append(ckpt.save(env_steps=100 * i))
  assert ckpt.checkpoints() == paths[-2:]
  assert not [n for n in os.listdir(d) if n.startswith("ckpt-1.")]
  fresh = _objects(0.0)
  restorer = Checkpointer(d, fresh)
  assert restorer.restore() == paths[-1]
  np.testing.assert_array_equal(fresh["w"].numpy(), [3.0, 3.0, 3.0])
  assert restorer.env_steps == 300


def test_index_is_what_tensorflow_tools_read_and_no_deprecation(
  tmp_path, caplog
):
  d = str(tmp_path / "ckpt")
  ckpt = Checkpointer(d, _objects(1.0), max_to_keep=2)
  with caplog.at_level("WARNING"):
    paths = [ckpt.save(env_steps=i) for i in range(3)]
  assert "deprecated" not in caplog.text
  assert tf.train.latest_checkpoint(d) == paths[-1]
  state = tf.train.get_checkpoint_state(d)
  assert [os.path.join(d, p) for p in state.all_model_checkpoint_paths] == (
    paths[-2:]
  )
  # Relative names, as TensorFlow writes them: the directory can be moved.
  moved = str(tmp_path / "moved")
  os.rename(d, moved)
  assert tf.train.latest_checkpoint(moved) == os.path.join(
    moved, os.path.basename(paths[-1])
  )
  assert not [n for n in os.listdir(moved) if n.endswith(".tmp")]


def test_truncated_latest_is_skipped_with_a_warning(tmp_path, caplog):
  d = str(tmp_path / "ckpt")
  objs = _objects(1.0)
  ckpt = Checkpointer(d, objs)
  first = ckpt.save(env_steps=10)
  objs["w"].assign([7.0, 7.0, 7.0])
  second = ckpt.save(env_steps=20)
  data = [
    n
    for n in os.listdir(d)
    if n.startswith(os.path.basename(second)) and ".data-" in n
  ]
  with open(os.path.join(d, data[0]), "r+b") as f:  # power cut mid-file
    f.truncate(3)
  fresh = _objects(0.0)
  restorer = Checkpointer(d, fresh)
  with caplog.at_level("WARNING"):
    assert restorer.restore() == first
  assert "cannot be read" in caplog.text
  np.testing.assert_array_equal(fresh["w"].numpy(), [1.0, 1.0, 1.0])
  assert restorer.env_steps == 10


def test_failed_save_warns_leaves_no_temporaries_and_retries(tmp_path, caplog):
  d = str(tmp_path / "ckpt")
  objs = _objects(1.0)
  ckpt = Checkpointer(d, objs)
  good = ckpt.save(env_steps=1)
  real_write = ckpt._checkpoint.write

  def full_disk(prefix):
    os.makedirs(prefix + "_temp", exist_ok=True)  # what a killed save leaves
    raise tf.errors.ResourceExhaustedError(
      None, None, "No space left on device"
    )

  ckpt._checkpoint.write = full_disk
  with caplog.at_level("WARNING"):
    assert ckpt.save(env_steps=2) is None
  assert "failed" in caplog.text and "No space left" in caplog.text
  assert not [n for n in os.listdir(d) if "_temp" in n]
  assert ckpt.checkpoints() == [good]
  ckpt._checkpoint.write = real_write  # the disk has room again
  assert ckpt.save(env_steps=3) is not None
  assert len(ckpt.checkpoints()) == 2


def test_leftover_temporaries_are_removed_on_start(tmp_path):
  d = tmp_path / "ckpt"
  d.mkdir()
  (d / "ckpt-5_temp").mkdir()
  (d / "ckpt-5_temp" / "part").write_bytes(b"x")
  (d / "checkpoint.tmp123").write_text("partial")
  Checkpointer(str(d), _objects(0.0))
  assert sorted(os.listdir(d)) == []


def test_no_checkpoint_restores_nothing(tmp_path):
  assert Checkpointer(str(tmp_path / "none"), _objects(0.0)).restore() is None
