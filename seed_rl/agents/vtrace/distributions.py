"""Action distributions parameterised by a flat tensor from the policy head.

The loss and the agent only use `num_params`, `log_prob`, `entropy`, `sample`
and `mode`, so any distribution with those functions plugs in. Parameters are
[..., P]; actions are [...] (discrete) or [..., D] (continuous).
"""

from __future__ import annotations

import math

import tensorflow as tf

from seed_rl.common.specs import ArraySpec


class Categorical:
  """Categorical over `num_actions` values; params are logits [..., A]."""

  def __init__(self, num_actions: int, action_dtype: str = "int32"):
    if num_actions < 1:
      raise ValueError(f"Categorical: num_actions must be >= 1, got "
                       f"{num_actions}")
    self.num_actions = int(num_actions)
    self.action_dtype = tf.as_dtype(action_dtype)

  @property
  def num_params(self) -> int:
    return self.num_actions

  def log_prob(self, params: tf.Tensor, action: tf.Tensor) -> tf.Tensor:
    """[..., A], [...] -> [...]."""
    log_probs = tf.nn.log_softmax(params, axis=-1)
    return tf.reduce_sum(
        log_probs * tf.one_hot(tf.cast(action, tf.int32), self.num_actions,
                               dtype=params.dtype),
        axis=-1)

  def entropy(self, params: tf.Tensor) -> tf.Tensor:
    """[..., A] -> [...]."""
    log_probs = tf.nn.log_softmax(params, axis=-1)
    return -tf.reduce_sum(tf.exp(log_probs) * log_probs, axis=-1)

  def sample(self, params: tf.Tensor) -> tf.Tensor:
    """[B, A] -> [B] in the action dtype."""
    return tf.cast(
        tf.random.categorical(params, 1, dtype=tf.int64)[:, 0],
        self.action_dtype)

  def mode(self, params: tf.Tensor) -> tf.Tensor:
    """[B, A] -> [B] in the action dtype."""
    return tf.cast(tf.argmax(params, axis=-1), self.action_dtype)

  def action_features(self, action: tf.Tensor) -> tf.Tensor:
    """[...] -> [..., A] float32 one-hot, for feeding actions to a network."""
    return tf.one_hot(tf.cast(action, tf.int32), self.num_actions,
                      dtype=tf.float32)


class DiagGaussian:
  """Diagonal Gaussian over [D] actions; params are [mean, log_std] [..., 2D].

  Samples are not squashed or clipped: the log-probabilities the learner
  recomputes must be of the exact action the behaviour policy drew, so keeping
  actions within the bounds is the environment's job.
  """

  _LOG_STD_MIN = -20.0
  _LOG_STD_MAX = 2.0

  def __init__(self, action_size: int, action_dtype: str = "float32"):
    if action_size < 1:
      raise ValueError(f"DiagGaussian: action_size must be >= 1, got "
                       f"{action_size}")
    self.action_size = int(action_size)
    self.action_dtype = tf.as_dtype(action_dtype)

  @property
  def num_params(self) -> int:
    return 2 * self.action_size

  def _split(self, params: tf.Tensor):
    mean, log_std = tf.split(params, 2, axis=-1)
    # Bounded log std keeps exp() finite when the head output drifts.
    log_std = tf.clip_by_value(log_std, self._LOG_STD_MIN, self._LOG_STD_MAX)
    return mean, log_std

  def log_prob(self, params: tf.Tensor, action: tf.Tensor) -> tf.Tensor:
    """[..., 2D], [..., D] -> [...]."""
    mean, log_std = self._split(params)
    z = (tf.cast(action, params.dtype) - mean) * tf.exp(-log_std)
    return tf.reduce_sum(
        -0.5 * tf.square(z) - log_std - 0.5 * math.log(2.0 * math.pi), axis=-1)

  def entropy(self, params: tf.Tensor) -> tf.Tensor:
    """[..., 2D] -> [...]."""
    _, log_std = self._split(params)
    return tf.reduce_sum(log_std + 0.5 * math.log(2.0 * math.pi * math.e),
                         axis=-1)

  def sample(self, params: tf.Tensor) -> tf.Tensor:
    """[B, 2D] -> [B, D]."""
    mean, log_std = self._split(params)
    noise = tf.random.normal(tf.shape(mean), dtype=mean.dtype)
    return tf.cast(mean + tf.exp(log_std) * noise, self.action_dtype)

  def mode(self, params: tf.Tensor) -> tf.Tensor:
    """[B, 2D] -> [B, D]."""
    mean, _ = self._split(params)
    return tf.cast(mean, self.action_dtype)

  def action_features(self, action: tf.Tensor) -> tf.Tensor:
    """[..., D] -> [..., D] float32."""
    return tf.cast(action, tf.float32)


def for_action_spec(action_spec: ArraySpec):
  """Picks the distribution for an action spec.

  Discrete scalar actions get a Categorical; float actions of shape [D] a
  DiagGaussian. Anything else raises ValueError naming the spec.
  """
  if action_spec.is_discrete:
    if action_spec.shape != ():
      raise ValueError(f"action spec {action_spec.name!r}: discrete actions "
                       f"must be scalars (shape ()), got shape "
                       f"{action_spec.shape}")
    if not action_spec.dtype.startswith(("int", "uint")):
      raise ValueError(f"action spec {action_spec.name!r}: discrete actions "
                       f"need an integer dtype, got {action_spec.dtype}")
    return Categorical(action_spec.num_values, action_spec.dtype)
  if len(action_spec.shape) != 1 or not action_spec.dtype.startswith("float"):
    raise ValueError(f"action spec {action_spec.name!r}: continuous actions "
                     f"must be float vectors [D], got shape "
                     f"{action_spec.shape} "
                     f"dtype {action_spec.dtype}")
  return DiagGaussian(action_spec.shape[0], action_spec.dtype)
