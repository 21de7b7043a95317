"""SAC's networks: a Gaussian policy (pre-tanh); its Q critics are the
shared ones of seed_rl/agents/continuous.py (TD3's too).

Actions inside the networks are normalised to [-1, 1]^A (the agent maps
them to the action Box as center + scale * a): the critics see actions of
the same scale on every task, and the policy's tanh lands on the Box.
"""

from __future__ import annotations

from typing import Callable, Sequence, Tuple

import keras
import tensorflow as tf

from seed_rl.agents.continuous import dense_stack

__all__ = ["GaussianPolicy"]


class GaussianPolicy(keras.layers.Layer):
  """Observations [B, *obs] -> mean [B, A], log_std [B, A] of u = atanh(a).

  log_std = min + (max - min) * (tanh(x) + 1) / 2 of the head output x: a
  soft bound (CleanRL, after Spinning Up) whose gradient never vanishes at
  the edge the way a hard clip's does.
  """

  def __init__(
    self,
    torso_fn: Callable[[], keras.layers.Layer],
    action_size: int,
    head_hidden: Sequence[int] = (),
    min_log_std: float = -5.0,
    max_log_std: float = 2.0,
    **kwargs,
  ):
    super().__init__(**kwargs)
    if action_size < 1:
      raise ValueError(
        f"GaussianPolicy: action_size must be >= 1, got {action_size}"
      )
    self.action_size = int(action_size)
    self.min_log_std, self.max_log_std = float(min_log_std), float(max_log_std)
    self.torso = torso_fn()
    self.head = dense_stack(self, head_hidden, 2 * self.action_size, "policy")

  def call(self, observation) -> Tuple[tf.Tensor, tf.Tensor]:
    x = self.torso(observation)
    for layer in self.head:
      x = layer(x)
    mean, raw_log_std = tf.split(x, 2, axis=-1)
    log_std = self.min_log_std + 0.5 * (self.max_log_std - self.min_log_std) * (
      tf.tanh(raw_log_std) + 1.0
    )
    return mean, log_std
