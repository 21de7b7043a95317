"""Convolutional torsos for stacked Atari frames [B, 84, 84, 4] uint8."""

from __future__ import annotations

import math
from typing import List, Optional, Sequence

import gin
import keras
import tensorflow as tf

_KINDS = ("impala", "nature", "nips")
_KERNEL_INITS = ("orthogonal", "glorot_uniform")
# compute dtype -> Keras dtype policy of the torso's layers.
_COMPUTE_DTYPES = {"float32": "float32", "bfloat16": "mixed_bfloat16"}
# CPU flags (Linux /proc/cpuinfo) of native bfloat16 dot products.
_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_bfloat16(cpuinfo_path: str = "/proc/cpuinfo") -> bool:
  """Whether this CPU has bfloat16 dot-product instructions (Linux only)."""
  try:
    with open(cpuinfo_path) as f:
      for line in f:
        if line.startswith("flags"):
          return any(flag in line.split() for flag in _BF16_CPU_FLAGS)
  except OSError:
    pass
  return False


def resolve_compute_dtype(compute_dtype: str) -> str:
  """'auto' -> 'bfloat16' on a CPU-only learner whose CPU computes it
  natively (AVX512-BF16 / AMX), else 'float32'; other values unchanged.

  Where bfloat16 would be emulated it is slower than float32; on GPUs we
  have not measured it, so 'auto' keeps float32 there.
  """
  if compute_dtype != "auto":
    return compute_dtype
  if tf.config.list_physical_devices("GPU") or not cpu_has_bfloat16():
    return "float32"
  return "bfloat16"


class ScaledInputConv2D(keras.layers.Conv2D):
  """Conv2D of `input_scale * x`, computed as conv(x, input_scale * kernel).

  Convolution is linear, so scaling the small kernel instead of the large
  input gives the same result with one elementwise pass over [8, 8, 4, 32]
  weights instead of over every [84, 84, 4] frame (which in bfloat16 runs
  in slow scalar Eigen code on CPUs).
  """

  def __init__(self, *args, input_scale: float = 1.0, **kwargs):
    super().__init__(*args, **kwargs)
    self.input_scale = float(input_scale)

  def convolution_op(self, inputs, kernel):
    return super().convolution_op(inputs, kernel * self.input_scale)


class ResidualBlock(keras.layers.Layer):
  """relu -> conv3x3 -> relu -> conv3x3, plus the identity (IMPALA Fig. 3)."""

  def __init__(self, channels: int, **kwargs):
    super().__init__(**kwargs)
    self.conv0 = keras.layers.Conv2D(
      channels, 3, padding="same", dtype=self.dtype_policy
    )
    self.conv1 = keras.layers.Conv2D(
      channels, 3, padding="same", dtype=self.dtype_policy
    )

  def call(self, x):
    out = self.conv0(keras.ops.relu(x))
    out = self.conv1(keras.ops.relu(out))
    return x + out


def _check_torso_args(
  kind: str, dense_size: int, compute_dtype: str, kernel_init: str
) -> None:
  if kind not in _KINDS:
    raise ValueError(
      f"atari_torso: kind {kind!r} is unknown; allowed: {', '.join(_KINDS)}"
    )
  if compute_dtype not in _COMPUTE_DTYPES:
    raise ValueError(
      f"atari_torso: compute_dtype {compute_dtype!r} is "
      f"unknown; allowed: {', '.join(_COMPUTE_DTYPES)}, "
      "auto"
    )
  if dense_size < 1:
    raise ValueError(
      f"atari_torso: dense_size must be positive, got {dense_size}"
    )
  if kernel_init not in _KERNEL_INITS:
    raise ValueError(
      f"atari_torso: kernel_init {kernel_init!r} is unknown; "
      f"allowed: {', '.join(_KERNEL_INITS)}"
    )


def _kernel_initializer(kernel_init: str):
  """A fresh initializer for one layer's kernel."""
  # Orthogonal with gain sqrt(2) (the ReLU gain), as OpenAI Baselines and
  # CleanRL initialise their Atari torsos; Keras' glorot_uniform gives
  # ReLU features about half that scale at every layer.
  if kernel_init == "orthogonal":
    return keras.initializers.Orthogonal(gain=math.sqrt(2.0))
  return "glorot_uniform"


# (filters, kernel size, stride) of the plain conv stacks: 'nature' is the
# DQN torso of Mnih et al. 2015; 'nips' the smaller one of Mnih et al. 2013
# (about a third of the multiply-adds, which matters where the learner's CPU
# bounds the updates per second).
_PLAIN_CONVS = {
  "nature": ((32, 8, 4), (64, 4, 2), (64, 3, 1)),
  "nips": ((16, 8, 4), (32, 4, 2)),
}


def _conv_layers(
  kind: str, impala_channels: Sequence[int], policy: str, kernel_init: str
) -> List[keras.layers.Layer]:
  """The torso's layers before the dense one, in order: the plain convs
  of 'nature' / 'nips', or per entry of `impala_channels` a conv, a max-pool and two
  residual blocks ('impala')."""
  layers: List[keras.layers.Layer] = []
  # Frames arrive as uint8 0..255; the first conv sees them scaled to
  # [0, 1] (see ScaledInputConv2D), later ones see features.
  conv = lambda *a, **kw: (
    keras.layers.Conv2D(
      *a,
      dtype=policy,
      kernel_initializer=_kernel_initializer(kernel_init),
      **kw,
    )
    if layers
    else ScaledInputConv2D(
      *a,
      dtype=policy,
      input_scale=1 / 255,
      kernel_initializer=_kernel_initializer(kernel_init),
      **kw,
    )
  )
  if kind in _PLAIN_CONVS:
    for filters, size, stride in _PLAIN_CONVS[kind]:
      layers.append(conv(filters, size, strides=stride, activation="relu"))
    return layers
  channels = tuple(int(c) for c in impala_channels)
  if not channels or any(c < 1 for c in channels):
    raise ValueError(
      f"atari_torso: impala_channels must be positive "
      f"channel counts, got {impala_channels}"
    )
  for c in channels:
    layers.append(conv(c, 3, padding="same"))
    layers.append(
      keras.layers.MaxPooling2D(3, strides=2, padding="same", dtype=policy)
    )
    layers.append(ResidualBlock(c, dtype=policy))
    layers.append(ResidualBlock(c, dtype=policy))
  return layers


class AtariTorso(keras.layers.Layer):
  """[B, H, W, C] uint8 frames -> [B, dense_size] features.

  kind='nature': the DQN torso of Mnih et al. 2015 (conv 32x8/4, 64x4/2,
  64x3/1, dense). kind='nips': the torso of Mnih et al. 2013 (conv 16x8/4,
  32x4/2, dense). kind='impala': the residual torso of Espeholt et al. 2018
  (three sections of conv + max-pool + 2 residual blocks, dense).

  compute_dtype='bfloat16' runs the convolutions and the dense layer in
  bfloat16 with float32 weights (Keras' mixed_bfloat16 policy), as SEED RL's
  TPU learners did; the features come out float32, so heads and losses stay
  float32. Checkpoints are the same in either dtype.
  """

  def __init__(
    self,
    kind: str = "impala",
    impala_channels: Sequence[int] = (16, 32, 32),
    dense_size: int = 256,
    compute_dtype: str = "float32",
    kernel_init: str = "orthogonal",
    **kwargs,
  ):
    super().__init__(**kwargs)
    _check_torso_args(kind, dense_size, compute_dtype, kernel_init)
    self.kind = kind
    self.feature_dtype = compute_dtype
    policy = _COMPUTE_DTYPES[compute_dtype]
    # A Sequential, not a Python list: tf.train.Checkpoint does not follow
    # lists held by Keras 3 layers, so a network no optimizer references
    # (a target network) would restore without its conv weights.
    self.conv_stack = keras.Sequential(
      _conv_layers(kind, impala_channels, policy, kernel_init),
      name="conv_stack",
    )
    self.dense = keras.layers.Dense(
      dense_size,
      activation="relu",
      dtype=policy,
      kernel_initializer=_kernel_initializer(kernel_init),
    )

  @property
  def conv_layers(self):
    """The convolutional layers, in order (dense layer excluded)."""
    return self.conv_stack.layers

  def call(self, frames):
    # Frames stay uint8 on the wire and in unrolls (4x smaller); the first
    # conv scales them. (0..255 are exact in bfloat16: 8 significand bits.)
    x = self.conv_stack(keras.ops.cast(frames, self.feature_dtype))
    if self.kind == "impala":
      x = keras.ops.relu(x)
    x = keras.ops.reshape(x, (-1, math.prod(x.shape[1:])))
    return keras.ops.cast(self.dense(x), "float32")


@gin.configurable
def atari_torso(
  kind: str = "impala",
  dense_size: Optional[int] = None,
  impala_channels: Sequence[int] = (16, 32, 32),
  compute_dtype: str = "float32",
  kernel_init: str = "orthogonal",
) -> keras.layers.Layer:
  """Builds an Atari torso.

  dense_size defaults to 512 for 'nature' and 256 for 'nips' and 'impala'.
  compute_dtype: 'float32', 'bfloat16' (see AtariTorso) or 'auto' (see
  resolve_compute_dtype).
  kernel_init: 'orthogonal' (gain sqrt 2, Baselines/CleanRL) or
  'glorot_uniform' (Keras' default; this project's default before 2026-11).
  """
  if dense_size is None:
    dense_size = 512 if kind == "nature" else 256
  return AtariTorso(
    kind=kind,
    impala_channels=impala_channels,
    dense_size=dense_size,
    compute_dtype=resolve_compute_dtype(compute_dtype),
    kernel_init=kernel_init,
    name=f"atari_torso_{kind}",
  )
