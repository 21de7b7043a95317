"""Running statistics vs NumPy over the concatenated data, and checkpoints."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents import normalizers


def test_running_mean_std_matches_numpy_over_concatenated_batches():
  rng = np.random.default_rng(0)
  rms = normalizers.RunningMeanStd((3,), clip=None)
  batches = [
    rng.normal(loc=[1.0, -5.0, 100.0], scale=[0.1, 2.0, 30.0], size=(n, 3))
    for n in (1, 7, 0, 250, 2, 33)
  ]
  for batch in batches:
    rms.update(batch.astype(np.float32))
  data = np.concatenate(batches).astype(np.float32).astype(np.float64)
  np.testing.assert_allclose(rms.count.numpy(), len(data))
  np.testing.assert_allclose(rms.mean.numpy(), data.mean(0), rtol=1e-10)
  np.testing.assert_allclose(rms.var.numpy(), data.var(0), rtol=1e-9)
  x = rng.normal(size=(4, 3)).astype(np.float32)
  np.testing.assert_allclose(
    rms.normalize(x).numpy(),
    (x - data.mean(0)) / np.sqrt(data.var(0) + 1e-8),
    rtol=1e-4,
    atol=1e-5,
  )


def test_normalize_is_identity_before_updates_and_clips():
  rms = normalizers.RunningMeanStd((2,), clip=3.0)
  x = np.array([[0.5, -2.0]], np.float32)
  np.testing.assert_allclose(rms.normalize(x).numpy(), x, rtol=1e-6)
  rms.update(np.array([[0.0, 0.0], [2.0, 2.0]]))  # mean 1, std 1
  out = rms.normalize(np.array([[100.0, -100.0], [1.5, 0.0]])).numpy()
  np.testing.assert_allclose(out, [[3.0, -3.0], [0.5, -1.0]], rtol=1e-5)


def test_running_mean_std_rejects_bad_input():
  rms = normalizers.RunningMeanStd((3,))
  with pytest.raises(ValueError, match=r"must be \[N, \*\[3\]\]"):
    rms.update(np.zeros((4, 2)))
  with pytest.raises(ValueError, match="epsilon"):
    normalizers.RunningMeanStd((3,), epsilon=0.0)


def reference_discounted_returns(rewards, dones, env_ids, gamma, num_envs):
  """Baselines' VecNormalize, one env step at a time, column by column."""
  acc = np.zeros(num_envs)
  seen = []
  for col in range(rewards.shape[1]):  # columns in order = time order per env
    env = env_ids[col]
    for t in range(rewards.shape[0]):
      acc[env] = acc[env] * gamma + rewards[t, col]
      seen.append(acc[env])
      if dones[t, col]:
        acc[env] = 0.0
  return acc, np.array(seen)


def test_reward_scaler_matches_per_env_reference():
  rng = np.random.default_rng(1)
  num_envs, gamma = 4, 0.9
  scaler = normalizers.RewardScaler(num_envs, gamma, clip=None)
  all_rewards, all_dones, all_ids = [], [], []
  # Two batches; the second has env 2 twice (consecutive unrolls).
  for env_ids in (np.array([0, 1, 2, 3]), np.array([2, 0, 2])):
    rewards = rng.normal(size=(5, len(env_ids))) + 1.0
    dones = rng.random((5, len(env_ids))) < 0.25
    scaler.update(rewards, dones, env_ids)
    all_rewards.append(rewards)
    all_dones.append(dones)
    all_ids.append(env_ids)
  acc, seen = reference_discounted_returns(
    np.concatenate(all_rewards, 1),
    np.concatenate(all_dones, 1),
    np.concatenate(all_ids),
    gamma,
    num_envs,
  )
  np.testing.assert_allclose(scaler.returns.numpy(), acc, rtol=1e-10)
  stats = scaler.return_stats
  np.testing.assert_allclose(stats.count.numpy(), len(seen))
  np.testing.assert_allclose(stats.var.numpy(), seen.var(), rtol=1e-9)
  r = np.array([[1.0, -2.0]], np.float32)
  np.testing.assert_allclose(
    scaler.scale(r).numpy(), r / np.sqrt(seen.var() + 1e-8), rtol=1e-5
  )


def test_reward_scaler_clips_and_validates():
  scaler = normalizers.RewardScaler(2, 0.99, clip=1.0)
  scaler.update(
    np.array([[0.01, -0.01], [0.02, 0.0]]),
    np.zeros((2, 2), bool),
    np.array([0, 1]),
  )
  np.testing.assert_allclose(scaler.scale([100.0, -100.0]).numpy(), [1.0, -1.0])
  with pytest.raises(ValueError, match=r"env ids must be in \[0, 2\)"):
    scaler.update(np.zeros((1, 1)), np.zeros((1, 1), bool), np.array([2]))
  with pytest.raises(ValueError, match=r"rewards \[T, B\]"):
    scaler.update(np.zeros(3), np.zeros(3, bool), np.array([0, 1, 0]))


def test_checkpoint_round_trip(tmp_path):
  rng = np.random.default_rng(2)
  rms = normalizers.RunningMeanStd((2,))
  scaler = normalizers.RewardScaler(3, 0.99)
  rms.update(rng.normal(size=(10, 2)) * 5 + 2)
  scaler.update(rng.normal(size=(4, 3)), np.zeros((4, 3), bool), np.arange(3))
  path = tf.train.Checkpoint(obs=rms, rew=scaler).save(str(tmp_path / "ckpt"))

  rms2 = normalizers.RunningMeanStd((2,))
  scaler2 = normalizers.RewardScaler(3, 0.99)
  status = tf.train.Checkpoint(obs=rms2, rew=scaler2).restore(path)
  status.assert_existing_objects_matched()
  for a, b in (
    (rms.mean, rms2.mean),
    (rms.var, rms2.var),
    (rms.count, rms2.count),
    (scaler.returns, scaler2.returns),
    (scaler.return_stats.var, scaler2.return_stats.var),
  ):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  x = rng.normal(size=(3, 2))
  np.testing.assert_array_equal(
    rms.normalize(x).numpy(), rms2.normalize(x).numpy()
  )
