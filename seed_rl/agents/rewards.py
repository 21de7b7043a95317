"""Reward clipping, the one implementation behind every agent's
`reward_clipping` field.

Modes: 'none'; 'abs_one' clips each raw reward to [-1, 1] (DQN, IMPALA and
PPO on Atari; also the reward R2D2's and V-trace's LSTM cores see as an
input); 'soft_asymmetric' squashes with 5 tanh(r / 5) and scales negative
rewards by 0.3, as in IMPALA's DMLab setup (V-trace only). Which modes a
config accepts is the config's check (config_checks.REWARD_CLIPPING, plus
V-trace's 'soft_asymmetric').

Takes TensorFlow tensors (inside compiled training steps and networks) and
NumPy arrays (agents that prepare batches on the host) alike and returns
float32 of the same kind: a clip is exact either way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

MODES = ("none", "abs_one", "soft_asymmetric")


def clip_rewards(rewards: Any, mode: str) -> Any:
  """Rewards (tf.Tensor or NumPy array, any shape) clipped by `mode`.

  Raises:
    ValueError: for a mode outside MODES.
  """
  if tf.is_tensor(rewards):
    rewards = tf.cast(rewards, tf.float32)
    clip, tanh, where = tf.clip_by_value, tf.tanh, tf.where
  else:
    rewards = np.asarray(rewards, np.float32)
    clip, tanh, where = np.clip, np.tanh, np.where
  if mode == "none":
    return rewards
  if mode == "abs_one":
    return clip(rewards, -1.0, 1.0)
  if mode == "soft_asymmetric":
    squeezed = tanh(rewards / 5.0)
    return where(rewards < 0, 0.3 * squeezed, squeezed) * 5.0
  allowed = ", ".join(repr(m) for m in MODES)
  raise ValueError(f"reward_clipping {mode!r} is unknown; allowed: {allowed}")
