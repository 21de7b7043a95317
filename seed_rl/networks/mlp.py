"""Torsos for low-dimensional (classic control, MuJoCo) observations."""

from __future__ import annotations

import math
from typing import Sequence

import gin
import keras

_ACTIVATIONS = ("tanh", "relu", "elu", "gelu", "silu", "sigmoid")


class FlattenFloat(keras.layers.Layer):
  """[B, *obs] of any numeric dtype -> float32 [B, prod(obs)]."""

  def call(self, observation):
    observation = keras.ops.cast(observation, "float32")
    # The static feature size lets the next Dense layer build its kernel.
    features = math.prod(observation.shape[1:])
    return keras.ops.reshape(observation, (-1, features))


@gin.configurable
def mlp_torso(
  hidden_sizes: Sequence[int] = (64, 64), activation: str = "tanh"
) -> keras.layers.Layer:
  """An MLP mapping observations [B, *obs] to features [B, hidden_sizes[-1]].

  Observations are flattened and cast to float32 first, so any numeric
  observation shape works.
  """
  hidden_sizes = tuple(int(size) for size in hidden_sizes)
  if not hidden_sizes or any(size < 1 for size in hidden_sizes):
    raise ValueError(
      f"mlp_torso: hidden_sizes must be a non-empty list of "
      f"positive layer widths, got {hidden_sizes}"
    )
  if activation not in _ACTIVATIONS:
    raise ValueError(
      f"mlp_torso: activation {activation!r} is unknown; "
      f"allowed: {', '.join(_ACTIVATIONS)}"
    )
  layers = [FlattenFloat()]
  for size in hidden_sizes:
    layers.append(
      keras.layers.Dense(
        size,
        activation=activation,
        kernel_initializer=keras.initializers.Orthogonal(gain=2**0.5),
      )
    )
  return keras.Sequential(layers, name="mlp_torso")
