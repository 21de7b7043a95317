"""Torsos for Football observations.

SMM frames arrive as uint8 [B, 72, 96, 4, S]: the env's 4 planes (left
team, right team, ball, active player), stacked S deep by the learner
(LearnerConfig.frame_stack). SEED RL stacked them inside the env as 16
channels; `football_torso` merges the last two axes into those 16 channels
and runs one of the Atari conv stacks over them (`seed_rl/networks/conv.py`:
'impala' is the residual torso SEED RL's Football agent used, 'nips' the
small 2013 DQN torso, several times cheaper on a CPU learner).
"""

from __future__ import annotations

from typing import Optional, Sequence

import gin
import keras

from seed_rl.networks import conv


class MergePlanes(keras.layers.Layer):
  """[B, H, W, C, S] -> [B, H, W, C * S] (a 4-D input passes unchanged)."""

  def call(self, frames):
    if len(frames.shape) != 5:
      return frames
    h, w, c, s = frames.shape[1:]
    return keras.ops.reshape(frames, (-1, h, w, c * s))


@gin.configurable
def football_torso(
  kind: str = "nips",
  dense_size: Optional[int] = None,
  impala_channels: Sequence[int] = (16, 32, 32),
  compute_dtype: str = "float32",
  kernel_init: str = "orthogonal",
) -> keras.layers.Layer:
  """SMM planes [B, 72, 96, 4, S] uint8 -> features [B, dense_size].

  The arguments are atari_torso's (seed_rl/networks/conv.py); dense_size
  defaults to 512 for 'nature' and 256 otherwise.
  """
  return keras.Sequential(
    [
      MergePlanes(),
      conv.atari_torso(
        kind=kind,
        dense_size=dense_size,
        impala_channels=impala_channels,
        compute_dtype=compute_dtype,
        kernel_init=kernel_init,
      ),
    ],
    name=f"football_torso_{kind}",
  )
