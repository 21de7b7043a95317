"""The toy domain's own torso, as README's recipe says: a `networks`
module in the domain package, imported by the learner (never by actors)
before it parses the domain's gin files."""

import gin
import keras


@gin.configurable
def corridor_torso(width: int = 32) -> keras.layers.Layer:
  """One-hot positions [B, L] -> features [B, width]."""
  return keras.Sequential(
    [keras.layers.Dense(width, activation="tanh")], name="corridor_torso"
  )
