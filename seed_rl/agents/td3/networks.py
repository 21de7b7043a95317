"""TD3's networks: a deterministic tanh actor; its Q critics are the shared
ones of seed_rl/agents/continuous.py (SAC's too).

Actions inside the networks are normalised to [-1, 1]^A; the agent maps
them to the action Box (seed_rl.agents.continuous.BoxScaling).
"""

from __future__ import annotations

from typing import Callable, Sequence

import keras
import tensorflow as tf

from seed_rl.agents.continuous import dense_stack

__all__ = ["DeterministicPolicy"]


class DeterministicPolicy(keras.layers.Layer):
  """Observations [B, *obs] -> mu(s) [B, A] in [-1, 1] (a tanh output)."""

  def __init__(
    self,
    torso_fn: Callable[[], keras.layers.Layer],
    action_size: int,
    head_hidden: Sequence[int] = (),
    **kwargs,
  ):
    super().__init__(**kwargs)
    if action_size < 1:
      raise ValueError(
        f"DeterministicPolicy: action_size must be >= 1, got {action_size}"
      )
    self.action_size = int(action_size)
    self.torso = torso_fn()
    self.head = dense_stack(self, head_hidden, self.action_size, "actor")

  def call(self, observation) -> tf.Tensor:
    x = self.torso(observation)
    for layer in self.head:
      x = layer(x)
    return tf.tanh(x)
