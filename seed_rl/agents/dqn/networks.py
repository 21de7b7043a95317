"""Q network: a torso, then a plain or dueling head (Dense or NoisyNet)."""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import keras
import tensorflow as tf

from seed_rl.agents import noisy as noisy_lib


class QNetwork(keras.layers.Layer):
  """Observations [B, *obs] -> Q values [B, A].

  dueling: Q = V + A - mean_a A, each stream with its own `head_hidden`
  layers (Wang et al. 2016, Eq. 9). With `noisy`, every head layer is a
  NoisyDense (the torso stays deterministic, as in Rainbow).
  """

  def __init__(
    self,
    torso_fn: Callable[[], keras.layers.Layer],
    num_actions: int,
    head_hidden: Sequence[int] = (),
    dueling: bool = False,
    noisy: Optional[str] = None,
    noisy_sigma0: Optional[float] = None,
    **kwargs,
  ):
    super().__init__(**kwargs)
    if num_actions < 1:
      raise ValueError(f"QNetwork num_actions must be >= 1, got {num_actions}")
    if noisy is not None and noisy not in noisy_lib.NOISE_TYPES:
      raise ValueError(
        f"QNetwork noisy must be None or one of "
        f"{noisy_lib.NOISE_TYPES}, got {noisy!r}"
      )
    self.num_actions = int(num_actions)
    self.dueling = bool(dueling)
    self.noisy = noisy
    self._sigma0 = noisy_sigma0
    self.torso = torso_fn()
    if self.dueling:
      self.value_stream = self._stack(head_hidden, 1, "value")
      self.advantage_stream = self._stack(
        head_hidden, self.num_actions, "advantage"
      )
    else:
      self.q_stream = self._stack(head_hidden, self.num_actions, "q")

  def _dense(self, units: int, activation, name: str):
    if self.noisy is None:
      return keras.layers.Dense(units, activation=activation, name=name)
    return noisy_lib.NoisyDense(
      units,
      noise_type=self.noisy,
      sigma0=self._sigma0,
      activation=activation,
      name=name,
    )

  def _stack(
    self, hidden: Sequence[int], outputs: int, name: str
  ) -> List[keras.layers.Layer]:
    layers = [
      self._dense(int(units), "relu", f"{name}_hidden_{i}")
      for i, units in enumerate(hidden)
    ]
    layers.append(self._dense(outputs, None, f"{name}_out"))
    # tf.train.Checkpoint does not see layers held only in a Python list of
    # a Keras 3 layer, so each one is also an attribute of its own.
    for i, layer in enumerate(layers):
      setattr(self, f"_{name}_layer_{i}", layer)
    return layers

  def _run(self, layers, x, deterministic: bool):
    for layer in layers:
      x = (
        layer(x, deterministic=deterministic)
        if self.noisy is not None
        else layer(x)
      )
    return x

  def call(self, observation, deterministic: bool = False):
    """Q values [B, A]; `deterministic` turns NoisyNet noise off."""
    features = self.torso(observation)
    if not self.dueling:
      return self._run(self.q_stream, features, deterministic)
    value = self._run(self.value_stream, features, deterministic)
    advantage = self._run(self.advantage_stream, features, deterministic)
    return value + advantage - tf.reduce_mean(advantage, axis=-1, keepdims=True)

  @property
  def noisy_layers(self) -> List[noisy_lib.NoisyDense]:
    streams = (
      (self.value_stream, self.advantage_stream)
      if self.dueling
      else (self.q_stream,)
    )
    return [
      layer
      for stream in streams
      for layer in stream
      if isinstance(layer, noisy_lib.NoisyDense)
    ]

  def reset_noise(self) -> None:
    """Resamples the noise of every NoisyDense layer (no-op without)."""
    for layer in self.noisy_layers:
      layer.reset_noise()


def build_q_network(network: QNetwork, observation_spec) -> None:
  """Creates the variables by running a batch of one zero observation."""
  network(
    tf.zeros((1,) + tuple(observation_spec.shape), observation_spec.dtype)
  )
