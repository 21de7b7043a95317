"""Convolutional torsos for stacked Atari frames [B, 84, 84, 4] uint8."""

from __future__ import annotations

import math
from typing import Optional, Sequence

import gin
import keras

_KINDS = ("impala", "nature")


class ResidualBlock(keras.layers.Layer):
  """relu -> conv3x3 -> relu -> conv3x3, plus the identity (IMPALA Fig. 3)."""

  def __init__(self, channels: int, **kwargs):
    super().__init__(**kwargs)
    self.conv0 = keras.layers.Conv2D(channels, 3, padding="same")
    self.conv1 = keras.layers.Conv2D(channels, 3, padding="same")

  def call(self, x):
    out = self.conv0(keras.ops.relu(x))
    out = self.conv1(keras.ops.relu(out))
    return x + out


class AtariTorso(keras.layers.Layer):
  """[B, H, W, C] uint8 frames -> [B, dense_size] features.

  kind='nature': the DQN torso of Mnih et al. 2015 (conv 32x8/4, 64x4/2,
  64x3/1, dense). kind='impala': the residual torso of Espeholt et al. 2018
  (three sections of conv + max-pool + 2 residual blocks, dense).
  """

  def __init__(self, kind: str = "impala",
               impala_channels: Sequence[int] = (16, 32, 32),
               dense_size: int = 256, **kwargs):
    super().__init__(**kwargs)
    if kind not in _KINDS:
      raise ValueError(f"atari_torso: kind {kind!r} is unknown; allowed: "
                       f"{', '.join(_KINDS)}")
    if dense_size < 1:
      raise ValueError(f"atari_torso: dense_size must be positive, got "
                       f"{dense_size}")
    self.kind = kind
    layers = []
    if kind == "nature":
      for filters, size, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
        layers.append(keras.layers.Conv2D(filters, size, strides=stride,
                                          activation="relu"))
    else:
      channels = tuple(int(c) for c in impala_channels)
      if not channels or any(c < 1 for c in channels):
        raise ValueError(f"atari_torso: impala_channels must be positive "
                         f"channel counts, got {impala_channels}")
      for c in channels:
        layers.append(keras.layers.Conv2D(c, 3, padding="same"))
        layers.append(keras.layers.MaxPooling2D(3, strides=2, padding="same"))
        layers.append(ResidualBlock(c))
        layers.append(ResidualBlock(c))
    # A Sequential, not a Python list: tf.train.Checkpoint does not follow
    # lists held by Keras 3 layers, so a network no optimizer references
    # (a target network) would restore without its conv weights.
    self.conv_stack = keras.Sequential(layers, name="conv_stack")
    self.dense = keras.layers.Dense(dense_size, activation="relu")

  @property
  def conv_layers(self):
    """The convolutional layers, in order (dense layer excluded)."""
    return self.conv_stack.layers

  def call(self, frames):
    # Frames stay uint8 on the wire and in unrolls (4x smaller); scale here.
    x = keras.ops.cast(frames, "float32") / 255.0
    x = self.conv_stack(x)
    if self.kind == "impala":
      x = keras.ops.relu(x)
    x = keras.ops.reshape(x, (-1, math.prod(x.shape[1:])))
    return self.dense(x)


@gin.configurable
def atari_torso(kind: str = "impala",
                dense_size: Optional[int] = None,
                impala_channels: Sequence[int] = (16, 32, 32)
               ) -> keras.layers.Layer:
  """Builds an Atari torso.

  dense_size defaults to 256 for 'impala' and 512 for 'nature'.
  """
  if dense_size is None:
    dense_size = 512 if kind == "nature" else 256
  return AtariTorso(kind=kind, impala_channels=impala_channels,
                    dense_size=dense_size, name=f"atari_torso_{kind}")
