"""ACER's network: torso(s) -> policy logits [N, A] and Q(x, .) [N, A].

Wang et al. 2017 (arXiv 1611.01224, section 3) give the discrete agent one
network with two heads: the policy f(.|x) and Q(x, .) for every action; the
value is not a head but V(x) = sum_a f(a|x) Q(x, a). A separate policy and
Q torso is the default here, as for the other actor-critics on vector
observations (large Q errors then do not reshape the policy's features).
"""

from __future__ import annotations

from typing import Callable, List, Sequence, Tuple

import keras
import tensorflow as tf

from seed_rl.common.specs import ArraySpec


def _head(
  owner: keras.layers.Layer,
  hidden: Sequence[int],
  outputs: int,
  name: str,
  output_gain: float,
) -> List[keras.layers.Layer]:
  layers = [
    keras.layers.Dense(int(units), activation="relu", name=f"{name}_hidden_{i}")
    for i, units in enumerate(hidden)
  ]
  layers.append(
    keras.layers.Dense(
      outputs,
      kernel_initializer=keras.initializers.Orthogonal(gain=output_gain),
      name=f"{name}_out",
    )
  )
  # tf.train.Checkpoint does not see layers held only in a Python list of a
  # Keras 3 layer, so each one is also an attribute of its own.
  for i, layer in enumerate(layers):
    setattr(owner, f"_{name}_layer_{i}", layer)
  return layers


class ACERNetwork(keras.layers.Layer):
  """Observations [N, *obs] -> (policy logits [N, A], Q(x, .) [N, A]).

  Args:
    torso_fn: factory of a fresh torso layer [N, *obs] -> [N, F].
    num_actions: A.
    head_hidden: hidden ReLU layer widths between a torso and each output.
    shared_torso: one torso for both heads (the paper's Atari network).
  """

  def __init__(
    self,
    torso_fn: Callable[[], keras.layers.Layer],
    num_actions: int,
    head_hidden: Sequence[int] = (),
    shared_torso: bool = False,
    **kwargs,
  ):
    super().__init__(**kwargs)
    if num_actions < 1:
      raise ValueError(
        f"ACERNetwork: num_actions must be >= 1, got {num_actions}"
      )
    self.num_actions = int(num_actions)
    self.policy_torso = torso_fn()
    self.q_torso = None if shared_torso else torso_fn()
    # A 100x smaller last policy layer starts near the uniform policy, so the
    # first importance weights pi / mu stay near 1.
    self.policy_head = _head(self, head_hidden, num_actions, "policy", 0.01)
    self.q_head = _head(self, head_hidden, num_actions, "q", 1.0)

  def call(self, observation) -> Tuple[tf.Tensor, tf.Tensor]:
    features = self.policy_torso(observation)
    q_features = features if self.q_torso is None else self.q_torso(observation)
    logits, q = features, q_features
    for layer in self.policy_head:
      logits = layer(logits)
    for layer in self.q_head:
      q = layer(q)
    return logits, q


def build_network(network: ACERNetwork, observation_spec: ArraySpec) -> None:
  """Creates the variables by running a batch of one zero observation."""
  network(
    tf.zeros((1,) + tuple(observation_spec.shape), observation_spec.dtype)
  )


def unroll(network: ACERNetwork, observation: tf.Tensor):
  """Runs the network over a time-major batch.

  observation [T1, B, *obs] -> (logits [T1, B, A], Q [T1, B, A]).
  """
  shape = tf.shape(observation)
  flat = tf.reshape(observation, tf.concat([[-1], shape[2:]], 0))
  logits, q = network(flat)
  out_shape = tf.concat([shape[:2], [network.num_actions]], 0)
  return tf.reshape(logits, out_shape), tf.reshape(q, out_shape)
