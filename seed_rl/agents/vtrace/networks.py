"""Actor-critic network: torso -> optional LSTM core -> policy and value heads.

The same weights run per step at inference ([B] batch, core state in and out)
and over whole unrolls at training ([T+1, B], from the stored start state,
resetting the core where an episode starts), and both paths give the same
outputs for the same inputs.
"""

from __future__ import annotations

from typing import Callable, Tuple

import keras
import tensorflow as tf

from seed_rl.agents import rewards as rewards_lib
from seed_rl.agents import distributions

CoreState = Tuple[tf.Tensor, ...]


def action_features(
  distribution: distributions.ActionDistribution,
) -> Callable[[tf.Tensor], tf.Tensor]:
  """The LSTM's previous-action input for actions of `distribution`.

  Categorical actions [N] -> one-hot float32 [N, A]; Gaussian actions
  [N, D] -> float32 [N, D].
  """
  if isinstance(distribution, distributions.Categorical):
    num_actions = distribution.num_actions
    return lambda action: tf.one_hot(
      tf.cast(action, tf.int32), num_actions, dtype=tf.float32
    )
  return lambda action: tf.cast(action, tf.float32)


class ActorCriticNetwork(keras.layers.Layer):
  """Policy parameters [.., P] and a baseline [..] from observations.

  With `use_lstm`, the core input is [torso features, previous action
  features, reward clipped to [-1, 1]] as in SEED RL; previous action and
  reward are zeroed where `done` so nothing leaks across episodes. Without an
  LSTM the network is feed-forward in the observation alone.
  """

  def __init__(
    self,
    torso_fn: Callable[[], keras.layers.Layer],
    num_policy_params: int,
    action_features: Callable[[tf.Tensor], tf.Tensor],
    use_lstm: bool = False,
    lstm_units: int = 256,
    separate_value_torso: bool = False,
    **kwargs,
  ):
    """Builds the layers.

    Args:
      torso_fn: factory returning a fresh torso layer [B, *obs] -> [B, F].
      num_policy_params: P, size of the distribution parameters.
      action_features: maps actions [N, *action_shape] to float [N, K]
        (one-hot for discrete actions), the LSTM's previous-action input.
      use_lstm: put an LSTM core between the torso and the heads.
      lstm_units: LSTM units.
      separate_value_torso: give the baseline its own torso (feed-forward
        only), so large value errors do not reshape the policy's features.
    """
    super().__init__(**kwargs)
    if num_policy_params < 1:
      raise ValueError(
        f"num_policy_params must be >= 1, got {num_policy_params}"
      )
    if use_lstm and lstm_units < 1:
      raise ValueError(
        f"lstm_units must be >= 1 with use_lstm, got {lstm_units}"
      )
    if use_lstm and separate_value_torso:
      raise ValueError(
        "separate_value_torso needs a feed-forward network; "
        "with use_lstm the value head shares the LSTM core"
      )
    self.use_lstm = bool(use_lstm)
    self.lstm_units = int(lstm_units)
    self._action_features = action_features
    self.torso = torso_fn()
    self.value_torso = torso_fn() if separate_value_torso else None
    self.core = keras.layers.LSTMCell(lstm_units) if use_lstm else None
    # A near-zero policy init starts from an almost uniform policy, so early
    # importance weights and entropy are well behaved.
    self.policy_head = keras.layers.Dense(
      num_policy_params,
      kernel_initializer=keras.initializers.Orthogonal(gain=0.01),
    )
    self.baseline_head = keras.layers.Dense(
      1, kernel_initializer=keras.initializers.Orthogonal(gain=1.0)
    )

  def initial_state(self, batch_size: int) -> CoreState:
    """Zero core state: (h [B, H], c [B, H]) with an LSTM, else ()."""
    if not self.use_lstm:
      return ()
    zeros = tf.zeros([batch_size, self.lstm_units], tf.float32)
    return (zeros, zeros)

  def _core_inputs(self, observation, prev_action, reward, done):
    """[N, ...] inputs -> (policy features [N, F], value features or None)."""
    features = self.torso(observation)
    value_features = (
      self.value_torso(observation) if self.value_torso is not None else None
    )
    if self.use_lstm:
      not_done = 1.0 - tf.cast(done, tf.float32)[:, None]
      action_features = self._action_features(prev_action)
      action_features = tf.reshape(
        action_features, [tf.shape(action_features)[0], -1]
      )
      clipped_reward = rewards_lib.clip_rewards(reward, "abs_one")[:, None]
      features = tf.concat(
        [features, action_features * not_done, clipped_reward * not_done],
        axis=-1,
      )
    return features, value_features

  def _heads(self, features, value_features):
    policy_params = self.policy_head(features)
    baseline = self.baseline_head(
      value_features if value_features is not None else features
    )
    return policy_params, tf.squeeze(baseline, -1)

  def _core_step(self, x, done, state):
    not_done = 1.0 - tf.cast(done, tf.float32)[:, None]
    state = [s * not_done for s in state]
    output, new_state = self.core(x, state)
    return output, tuple(new_state)

  def step(
    self, observation, prev_action, reward, done, core_state: CoreState
  ) -> Tuple[tf.Tensor, tf.Tensor, CoreState]:
    """One inference step.

    Args:
      observation: [B, *obs_shape].
      prev_action: [B, *action_shape].
      reward: [B] raw reward of the transition into this step.
      done: bool [B] this observation starts an episode (core is reset).
      core_state: tuple of [B, H] (empty when feed-forward).

    Returns:
      policy params [B, P], baseline [B], new core state.
    """
    features, value_features = self._core_inputs(
      observation, prev_action, reward, done
    )
    if self.use_lstm:
      features, core_state = self._core_step(features, done, core_state)
    policy_params, baseline = self._heads(features, value_features)
    return policy_params, baseline, core_state

  def feed_forward(self, observation) -> Tuple[tf.Tensor, tf.Tensor]:
    """Without an LSTM, steps taken singly: observation [N, *obs_shape] ->
    policy params [N, P], baseline [N] (what `unroll` gives those steps)."""
    if self.use_lstm:
      raise ValueError(
        "feed_forward: this network has an LSTM, whose steps need their "
        "unroll's order and core state (use unroll)"
      )
    features, value_features = self._core_inputs(observation, None, None, None)
    return self._heads(features, value_features)

  def unroll(
    self, observation, prev_action, reward, done, core_state: CoreState
  ) -> Tuple[tf.Tensor, tf.Tensor]:
    """Runs over a time-major unroll.

    Args:
      observation: [T1, B, *obs_shape] (T1 = T+1 steps).
      prev_action: [T1, B, *action_shape].
      reward: [T1, B].
      done: bool [T1, B] step t starts an episode (core reset before it).
      core_state: tuple of [B, H], the state before step 0.

    Returns:
      policy params [T1, B, P] and baseline [T1, B].
    """
    done = tf.convert_to_tensor(done)
    time_batch = tf.shape(done)[:2]

    def merge(x):
      return tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], 0))

    def split(x):
      """[T1 * B, ...] -> [T1, B, ...], keeping static dims for later layers."""
      y = tf.reshape(x, tf.concat([time_batch, tf.shape(x)[1:]], 0))
      y.set_shape(done.shape[:2].concatenate(x.shape[1:]))
      return y

    features, value_features = self._core_inputs(
      merge(observation), merge(prev_action), merge(reward), merge(done)
    )
    if self.use_lstm:
      features = split(features)
      # A Python loop over the static length unrolls into one graph; T is
      # fixed per agent, so this traces once.
      num_steps = done.shape[0]
      if num_steps is None:
        raise ValueError(
          "unroll with use_lstm needs a static number of time "
          "steps (done.shape[0] is None)"
        )
      outputs = []
      state = core_state
      for t in range(num_steps):
        output, state = self._core_step(features[t], done[t], state)
        outputs.append(output)
      features = merge(tf.stack(outputs))
    policy_params, baseline = self._heads(features, value_features)
    return split(policy_params), split(baseline)


def build_network(
  network: ActorCriticNetwork, observation_spec, action_spec
) -> None:
  """Creates the variables by running one step on a batch of zeros."""
  batch = 1
  observation = tf.zeros(
    (batch,) + tuple(observation_spec.shape), observation_spec.dtype
  )
  prev_action = tf.zeros((batch,) + tuple(action_spec.shape), action_spec.dtype)
  network.step(
    observation,
    prev_action,
    tf.zeros([batch]),
    tf.zeros([batch], tf.bool),
    network.initial_state(batch),
  )
