"""Reward clipping (seed_rl/agents/rewards.py), every agent's one
implementation, on NumPy arrays and TensorFlow tensors alike."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents import rewards as rewards_lib
from seed_rl.agents import config_checks as checks

REWARDS = np.array(
  [-20.0, -1.5, -1.0, -0.3, 0.0, 0.4, 1.0, 2.0, 30.0], np.float32
)


def _expected(mode):
  if mode == "none":
    return REWARDS
  if mode == "abs_one":
    return np.clip(REWARDS, -1, 1)
  squeezed = np.tanh(REWARDS / 5.0)
  return np.where(REWARDS < 0, 0.3 * squeezed, squeezed) * 5.0


@pytest.mark.parametrize("mode", rewards_lib.MODES)
def test_numpy_in_numpy_out(mode):
  clipped = rewards_lib.clip_rewards(REWARDS, mode)
  assert isinstance(clipped, np.ndarray) and clipped.dtype == np.float32
  np.testing.assert_allclose(clipped, _expected(mode), rtol=1e-6)


@pytest.mark.parametrize("mode", rewards_lib.MODES)
def test_tensor_in_tensor_out_and_same_values(mode):
  clipped = rewards_lib.clip_rewards(tf.constant(REWARDS), mode)
  assert tf.is_tensor(clipped) and clipped.dtype == tf.float32
  np.testing.assert_allclose(clipped.numpy(), _expected(mode), rtol=1e-6)
  if mode != "soft_asymmetric":  # a clip is exact on either side
    np.testing.assert_array_equal(
      clipped.numpy(), rewards_lib.clip_rewards(REWARDS, mode)
    )


def test_compiled_and_other_dtypes():
  fn = tf.function(lambda r: rewards_lib.clip_rewards(r, "abs_one"))
  np.testing.assert_array_equal(
    fn(tf.constant(REWARDS)).numpy(), np.clip(REWARDS, -1, 1)
  )
  assert rewards_lib.clip_rewards(REWARDS.astype(np.float64), "none").dtype == (
    np.float32
  )
  assert rewards_lib.clip_rewards(
    tf.constant([3], tf.int32), "abs_one"
  ).dtype == (tf.float32)


def test_unknown_mode_names_the_allowed_ones():
  with pytest.raises(
    ValueError,
    match="reward_clipping 'sign' is unknown; allowed: 'none', 'abs_one', "
    "'soft_asymmetric'",
  ):
    rewards_lib.clip_rewards(REWARDS, "sign")


def test_every_mode_a_config_accepts_is_implemented():
  assert set(checks.REWARD_CLIPPING) <= set(rewards_lib.MODES)
