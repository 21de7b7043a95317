"""What the continuous-control agents (SAC, TD3/DDPG) share: the map
between normalised actions and the action Box, the Q critic, the dense
layer stacks of their heads, and building a network's variables.

Actions inside the networks are normalised to [-1, 1]^A (the agents map
them to the action Box as center + scale * a, `BoxScaling`): the critics
see actions of the same scale on every task, and a policy's tanh lands on
the Box.
"""

from __future__ import annotations

from typing import Callable, List, Sequence

import keras
import numpy as np
import tensorflow as tf


def dense_stack(
  owner: keras.layers.Layer, hidden: Sequence[int], outputs: int, name: str
) -> List[keras.layers.Layer]:
  """Dense layers of widths `hidden` (relu) then `outputs` (linear), each
  also an attribute of `owner` named after `name`."""
  layers = [
    keras.layers.Dense(int(units), activation="relu", name=f"{name}_hidden_{i}")
    for i, units in enumerate(hidden)
  ]
  layers.append(keras.layers.Dense(outputs, name=f"{name}_out"))
  # tf.train.Checkpoint does not see layers held only in a Python list of a
  # Keras 3 layer, so each one is also an attribute of its own.
  for i, layer in enumerate(layers):
    setattr(owner, f"_{name}_layer_{i}", layer)
  return layers


def _flat_float(observation: tf.Tensor) -> tf.Tensor:
  """[B, *obs] of any numeric dtype -> float32 [B, prod(obs)]."""
  observation = tf.cast(observation, tf.float32)
  size = 1
  for dim in observation.shape[1:]:
    size *= int(dim)
  return tf.reshape(observation, [-1, size])


class QNetwork(keras.layers.Layer):
  """(observation [B, *obs], action [B, A] in [-1, 1]) -> Q [B]."""

  def __init__(
    self,
    torso_fn: Callable[[], keras.layers.Layer],
    head_hidden: Sequence[int] = (),
    **kwargs,
  ):
    super().__init__(**kwargs)
    self.torso = torso_fn()
    self.head = dense_stack(self, head_hidden, 1, "q")

  def call(self, observation, action) -> tf.Tensor:
    x = tf.concat(
      [_flat_float(observation), tf.cast(action, tf.float32)], axis=-1
    )
    x = self.torso(x)
    for layer in self.head:
      x = layer(x)
    return tf.squeeze(x, axis=-1)


def build(network: keras.layers.Layer, observation_spec, action_size=None):
  """Creates the variables by running a batch of one zero observation (and
  one zero action for critics)."""
  observation = tf.zeros(
    (1,) + tuple(observation_spec.shape), observation_spec.dtype
  )
  if action_size is None:
    network(observation)
  else:
    network(observation, tf.zeros((1, action_size), tf.float32))


class BoxScaling:
  """The affine map between normalised actions [-1, 1]^A and the Box.

  env action = center + scale * a, center = (high + low) / 2, scale =
  (high - low) / 2 (NumPy, float32 [A]).

  Raises:
    ValueError: unless the spec is a float32 vector [A] with finite bounds.
  """

  def __init__(self, action_spec, agent: str):
    name = action_spec.name or "action"
    if (
      action_spec.is_discrete
      or len(action_spec.shape) != 1
      or action_spec.dtype != "float32"
    ):
      raise ValueError(
        f"{agent} needs a continuous action spec (float32 vector [A]), got "
        f"{name!r} shape {list(action_spec.shape)} dtype {action_spec.dtype}"
        f" num_values {action_spec.num_values}"
      )
    low, high = action_spec.minimum, action_spec.maximum
    if (
      low is None
      or high is None
      or not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)))
      or not np.all(low < high)
    ):
      raise ValueError(
        f"{agent} squashes actions into the action Box, which must be "
        f"bounded with low < high; {name!r} has minimum {low} maximum {high}"
      )
    low = np.asarray(low, np.float64)
    high = np.asarray(high, np.float64)
    self.action_size = int(action_spec.shape[0])
    self.center = ((high + low) / 2.0).astype(np.float32)
    self.scale = ((high - low) / 2.0).astype(np.float32)
    self._low = low.astype(np.float32)
    self._high = high.astype(np.float32)

  def to_env(self, action: np.ndarray) -> np.ndarray:
    """[..., A] in [-1, 1] -> float32 [..., A] inside the Box."""
    env_action = self.center + self.scale * np.asarray(action, np.float32)
    # The clip only absorbs float rounding of center + scale * (+-1).
    return np.clip(env_action, self._low, self._high).astype(np.float32)

  def to_env_tensor(self, action: tf.Tensor) -> tf.Tensor:
    """`to_env` in TensorFlow ops (exported policies)."""
    env_action = self.center + self.scale * tf.cast(action, tf.float32)
    return tf.clip_by_value(env_action, self._low, self._high)

  def from_env(self, env_action: np.ndarray) -> np.ndarray:
    """[..., A] inside the Box -> float32 [..., A] in [-1, 1]."""
    action = (np.asarray(env_action, np.float32) - self.center) / self.scale
    return np.clip(action, -1.0, 1.0).astype(np.float32)
