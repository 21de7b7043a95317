"""R2D2's recurrent dueling Q-network: torso -> LSTM -> dueling head.

As in R2D2 (and SEED RL's DuelingLSTMDQNNet) the LSTM also sees the one-hot
previous action and the previous reward clipped to [-1, 1]. The recurrent
state is reset to zeros at steps that start a new episode, both per step at
inference and inside a sequence at training time; the reward input is zeroed
there too, since that reward belongs to the episode that just ended.
"""

from __future__ import annotations

from typing import Callable, List, Sequence, Tuple

import keras
import tensorflow as tf

from seed_rl.agents import rewards as rewards_lib
from seed_rl.common.specs import ArraySpec

State = Tuple[tf.Tensor, tf.Tensor]  # LSTM (h, c), each float32 [B, units]


class R2D2Network(keras.layers.Layer):
  """Q(s_t, .) from observations, previous actions and rewards.

  Args:
    torso_fn: factory of a Keras layer mapping observations [N, *obs] to
      features [N, F].
    num_actions: A, size of the discrete action space.
    lstm_units: LSTM size.
    head_hidden: hidden layer widths of each dueling stream (value and
      advantage), ReLU; () puts the output layers on the LSTM output.
  """

  def __init__(
    self,
    torso_fn: Callable[[], keras.layers.Layer],
    num_actions: int,
    lstm_units: int,
    head_hidden: Sequence[int],
    **kwargs,
  ):
    super().__init__(**kwargs)
    self.num_actions = int(num_actions)
    self.lstm_units = int(lstm_units)
    self.torso = torso_fn()
    self.core = keras.layers.LSTMCell(self.lstm_units)
    self._value_hidden = self._hidden_layers(head_hidden, "value_hidden")
    self.value_out = keras.layers.Dense(1)
    self._advantage_hidden = self._hidden_layers(
      head_hidden, "advantage_hidden"
    )
    self.advantage_out = keras.layers.Dense(self.num_actions)

  def _hidden_layers(
    self, widths: Sequence[int], name: str
  ) -> List[keras.layers.Layer]:
    """ReLU Dense layers, each also an attribute of its own (`name`,
    `name_1`, ...): tf.train.Checkpoint does not see layers held only in a
    Python list of a Keras 3 layer, and one hidden layer keeps the attribute
    (and checkpoint path) it had when head_hidden was a single width."""
    layers = []
    for i, units in enumerate(widths):
      layer = keras.layers.Dense(int(units), activation="relu")
      setattr(self, name if i == 0 else f"{name}_{i}", layer)
      layers.append(layer)
    return layers

  def initial_state(self, batch_size) -> State:
    zeros = tf.zeros([batch_size, self.lstm_units], tf.float32)
    return zeros, zeros

  def _embed(self, observation, prev_action, reward, done):
    """[N, *obs], [N], [N], [N] -> float32 [N, F + A + 1]."""
    features = self.torso(observation)
    one_hot = tf.one_hot(tf.cast(prev_action, tf.int32), self.num_actions)
    reward = tf.where(done, 0.0, rewards_lib.clip_rewards(reward, "abs_one"))
    return tf.concat(
      [tf.cast(features, tf.float32), one_hot, reward[:, None]], axis=-1
    )

  def _core_step(self, inputs, done, state: State):
    keep = 1.0 - tf.cast(done, tf.float32)[:, None]
    output, new_state = self.core(inputs, [state[0] * keep, state[1] * keep])
    return output, (new_state[0], new_state[1])

  def _head(self, output):
    """Dueling: V(s) + A(s, a) - mean_a A(s, a); [N, units] -> [N, A]."""
    value, advantage = output, output
    for layer in self._value_hidden:
      value = layer(value)
    for layer in self._advantage_hidden:
      advantage = layer(advantage)
    value = self.value_out(value)
    advantage = self.advantage_out(advantage)
    return value + advantage - tf.reduce_mean(advantage, -1, keepdims=True)

  def step(self, observation, prev_action, reward, done, state: State):
    """One step for a batch of envs.

    Args:
      observation: [B, *obs].
      prev_action: int [B].
      reward: float32 [B] raw reward of the transition into this step.
      done: bool [B] this step starts a new episode (state is reset).
      state: (h, c) float32 [B, units] each.

    Returns:
      q: float32 [B, A] (rescaled space), and the new state.
    """
    inputs = self._embed(observation, prev_action, reward, done)
    output, state = self._core_step(inputs, done, state)
    return self._head(output), state

  def unroll(self, observation, prev_action, reward, done, state: State):
    """`step` over a sequence; the torso and head run on all steps at once.

    Args:
      observation: [T, B, *obs] (T static).
      prev_action: int [T, B].
      reward: float32 [T, B].
      done: bool [T, B].
      state: (h, c) at the start of step 0.

    Returns:
      q: float32 [T, B, A], and the state after step T - 1.
    """
    steps = observation.shape[0]
    batch = tf.shape(observation)[1]
    # Static trailing dims keep the torso's input shape known at trace time.
    flat = lambda x: tf.reshape(x, [-1] + list(x.shape[2:]))
    inputs = self._embed(
      flat(observation), flat(prev_action), flat(reward), flat(done)
    )
    inputs = tf.reshape(inputs, [steps, batch, inputs.shape[-1]])
    outputs = []
    for t in range(steps):
      output, state = self._core_step(inputs[t], done[t], state)
      outputs.append(output)
    q = self._head(tf.reshape(tf.stack(outputs), [-1, self.lstm_units]))
    return tf.reshape(q, [steps, batch, self.num_actions]), state


def build_network(network: R2D2Network, observation_spec: ArraySpec) -> None:
  """Creates the variables with one step on a zero batch of one env."""
  observation = tf.zeros(
    (1,) + observation_spec.shape, tf.as_dtype(observation_spec.dtype)
  )
  network.step(
    observation,
    tf.zeros([1], tf.int32),
    tf.zeros([1]),
    tf.zeros([1], tf.bool),
    network.initial_state(1),
  )
