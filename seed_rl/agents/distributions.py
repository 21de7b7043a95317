"""Action distributions for policy-gradient agents, behind one interface.

A distribution object here is a *family*: it holds no parameters itself and
maps a flat parameter tensor `params` [B, P] (the policy head's output) to
samples, modes, log-probabilities, entropies and KL divergences. Two kinds of
action exist for every family:

  raw action: what the density is defined on, and what the loss must
    re-evaluate (int [B] for Categorical; the unbounded Gaussian sample u
    [B, D] for Gaussians);
  env action: what the environment receives ([B] ints; [B, D] floats inside
    the Box bounds for bounded Gaussians).

For Gaussians the agent stores the raw action next to the env action, so the
learner re-evaluates exactly the density the behaviour policy sampled from:
with 'clip' the env sees clip(u) but log pi(u) is used (clipping is then part
of the environment and adds no bias to the gradient, Fujita & Maeda 2018);
with 'tanh' inverting the squash (atanh of a float32 action that rounded to
+-1) would give inf, so u is stored as well.

tensorflow_probability supplies the base densities, entropies and KLs; the
tanh change of variables is written out here in its numerically stable form.
"""

from __future__ import annotations

import abc
import math
from typing import Optional, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from seed_rl.common.specs import ArraySpec

tfd = tfp.distributions

BOUND_MODES = ("tanh", "clip", "none")


def _stateless_seed(generator: tf.random.Generator) -> tf.Tensor:
  # TFP's stateless samplers take an int32 [2] seed.
  return tf.cast(generator.make_seeds(1)[:, 0], tf.int32)


class ActionDistribution(abc.ABC):
  """A parametric family of action distributions.

  Attributes:
    num_params: P, the size of the parameter vector per batch row.
  """

  num_params: int

  @abc.abstractmethod
  def sample(
    self, params: tf.Tensor, generator: tf.random.Generator
  ) -> Tuple[tf.Tensor, tf.Tensor]:
    """[B, P] -> (env action, raw action), each [B, ...]."""

  @abc.abstractmethod
  def mode(self, params: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """The deterministic (evaluation) action: (env action, raw action)."""

  @abc.abstractmethod
  def log_prob(self, params: tf.Tensor, raw_action: tf.Tensor) -> tf.Tensor:
    """[B, P], raw action [B, ...] -> log-density of the env action [B]."""

  @abc.abstractmethod
  def entropy(self, params: tf.Tensor) -> tf.Tensor:
    """[B, P] -> [B]."""

  @abc.abstractmethod
  def kl(self, params_p: tf.Tensor, params_q: tf.Tensor) -> tf.Tensor:
    """KL(p || q) between the distributions at [B, P] and [B, P] -> [B]."""


class Categorical(ActionDistribution):
  """Categorical over `num_actions` values; params are logits [B, A]."""

  def __init__(self, num_actions: int, action_dtype: str = "int32"):
    if num_actions < 1:
      raise ValueError(
        f"Categorical: num_actions must be >= 1, got {num_actions}"
      )
    self.num_actions = int(num_actions)
    self.num_params = self.num_actions
    self.action_dtype = tf.as_dtype(action_dtype)

  def _dist(self, logits):
    return tfd.Categorical(logits=logits)

  def sample(self, params, generator):
    action = self._dist(params).sample(seed=_stateless_seed(generator))
    action = tf.cast(action, self.action_dtype)
    return action, action

  def mode(self, params):
    action = tf.cast(tf.argmax(params, axis=-1), self.action_dtype)
    return action, action

  def log_prob(self, params, raw_action):
    return self._dist(params).log_prob(tf.cast(raw_action, tf.int32))

  def entropy(self, params):
    return self._dist(params).entropy()

  def kl(self, params_p, params_q):
    return tfd.kl_divergence(self._dist(params_p), self._dist(params_q))


class DiagGaussian(ActionDistribution):
  """Diagonal Gaussian over [D] actions; params are [mean, log_std] [B, 2D].

  Whether log_std is a free variable or a function of the state is the
  network's business; here it is just the second half of `params`.

  Args:
    action_size: D.
    bounds: 'tanh' (squash u into [low, high] with a tanh; the density
      includes the change of variables), 'clip' (the env gets clip(u, low,
      high), densities are of u), or 'none' (unbounded actions).
    low, high: [D] Box bounds; required unless bounds == 'none'.
    min_log_std, max_log_std: clamp on log_std so exp() stays finite and the
      density never collapses to a spike when a state-dependent head drifts.
  """

  def __init__(
    self,
    action_size: int,
    bounds: str = "clip",
    low: Optional[np.ndarray] = None,
    high: Optional[np.ndarray] = None,
    min_log_std: float = -20.0,
    max_log_std: float = 2.0,
  ):
    if action_size < 1:
      raise ValueError(
        f"DiagGaussian: action_size must be >= 1, got {action_size}"
      )
    if bounds not in BOUND_MODES:
      raise ValueError(
        f"DiagGaussian: bounds {bounds!r} is unknown; allowed: "
        f"{', '.join(BOUND_MODES)}"
      )
    if not min_log_std < max_log_std:
      raise ValueError(
        f"DiagGaussian: min_log_std ({min_log_std}) must be < "
        f"max_log_std ({max_log_std})"
      )
    self.action_size = int(action_size)
    self.num_params = 2 * self.action_size
    self.bounds = bounds
    self.min_log_std = float(min_log_std)
    self.max_log_std = float(max_log_std)
    if bounds != "none":
      if low is None or high is None:
        raise ValueError(
          f"DiagGaussian: bounds={bounds!r} needs low and high "
          f"(the Box bounds); use bounds='none' for unbounded "
          f"actions"
        )
      low = np.broadcast_to(np.asarray(low, np.float64), (action_size,))
      high = np.broadcast_to(np.asarray(high, np.float64), (action_size,))
      if bounds == "tanh" and not (
        np.all(np.isfinite(low)) and np.all(np.isfinite(high))
      ):
        raise ValueError(
          f"DiagGaussian: bounds='tanh' needs finite Box "
          f"bounds, got low={low} high={high}; use 'clip'"
        )
      if not np.all(low < high):
        raise ValueError(
          f"DiagGaussian: need low < high elementwise, got "
          f"low={low} high={high}"
        )
      self._low = tf.constant(low, tf.float32)
      self._high = tf.constant(high, tf.float32)
    if bounds == "tanh":
      # Not None: bounds != "none" checked them above.
      assert low is not None and high is not None
      # Affine map [-1, 1] -> [low, high]: a = center + scale * tanh(u).
      self._center = tf.constant((high + low) / 2.0, tf.float32)
      self._scale = tf.constant((high - low) / 2.0, tf.float32)
      self._log_scale_sum = float(np.sum(np.log((high - low) / 2.0)))

  def split(self, params: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """[B, 2D] -> mean [B, D], clamped log_std [B, D]."""
    mean, log_std = tf.split(params, 2, axis=-1)
    return mean, tf.clip_by_value(log_std, self.min_log_std, self.max_log_std)

  def _base(self, params):
    mean, log_std = self.split(params)
    return tfd.Independent(
      tfd.Normal(mean, tf.exp(log_std)), reinterpreted_batch_ndims=1
    )

  def to_env_action(self, raw_action: tf.Tensor) -> tf.Tensor:
    """Unbounded u [B, D] -> the action the environment receives [B, D]."""
    if self.bounds == "tanh":
      # The clip only absorbs float rounding of center + scale * (+-1).
      return tf.clip_by_value(
        self._center + self._scale * tf.tanh(raw_action), self._low, self._high
      )
    if self.bounds == "clip":
      return tf.clip_by_value(raw_action, self._low, self._high)
    return raw_action

  def sample(self, params, generator):
    raw = self._base(params).sample(seed=_stateless_seed(generator))
    return self.to_env_action(raw), raw

  def mode(self, params):
    mean, _ = self.split(params)
    return self.to_env_action(mean), mean

  def log_prob(self, params, raw_action):
    raw_action = tf.cast(raw_action, params.dtype)
    log_prob = self._base(params).log_prob(raw_action)
    if self.bounds == "tanh":
      # a = c + s * tanh(u): log p(a) = log p(u) - sum log|da/du|, with
      # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), finite even where
      # tanh(u) rounds to +-1.
      log_det = 2.0 * (
        math.log(2.0) - raw_action - tf.nn.softplus(-2.0 * raw_action)
      )
      log_prob -= tf.reduce_sum(log_det, axis=-1) + self._log_scale_sum
    return log_prob

  def entropy(self, params):
    # For 'tanh' the squashed entropy has no closed form; the base Gaussian's
    # is what the bonus regularises (the usual choice, e.g. BatchPPO).
    return self._base(params).entropy()

  def kl(self, params_p, params_q):
    # KL is invariant under the same bijection applied to both sides, so the
    # base Gaussians' KL is exact for 'tanh' too. For 'clip' it is the KL of
    # the densities the loss uses.
    return tfd.kl_divergence(self._base(params_p), self._base(params_q))


def for_action_spec(
  action_spec: ArraySpec,
  bounds: str = "clip",
  min_log_std: float = -20.0,
  max_log_std: float = 2.0,
) -> ActionDistribution:
  """Picks the distribution for an action spec.

  Discrete scalar specs get a Categorical. Float vector specs get a
  DiagGaussian with `bounds` handling when the spec has minimum and maximum,
  or unbounded when it has neither.

  Raises:
    ValueError: naming the spec field that does not fit.
  """
  name = action_spec.name or "action"
  if action_spec.is_discrete:
    if action_spec.shape != ():
      raise ValueError(
        f"action spec {name!r}: discrete actions must be "
        f"scalars (shape ()), got shape {action_spec.shape}"
      )
    if not action_spec.dtype.startswith(("int", "uint")):
      raise ValueError(
        f"action spec {name!r}: discrete actions need an "
        f"integer dtype, got {action_spec.dtype}"
      )
    assert action_spec.num_values is not None  # is_discrete
    return Categorical(action_spec.num_values, action_spec.dtype)
  if len(action_spec.shape) != 1 or action_spec.dtype != "float32":
    raise ValueError(
      f"action spec {name!r}: continuous actions must be "
      f"float32 vectors [D], got shape {action_spec.shape} "
      f"dtype {action_spec.dtype}"
    )
  has_min = action_spec.minimum is not None
  has_max = action_spec.maximum is not None
  if has_min != has_max:
    raise ValueError(
      f"action spec {name!r}: give both minimum and maximum "
      f"(a Box) or neither (unbounded)"
    )
  minimum, maximum = action_spec.minimum, action_spec.maximum
  # has_min == has_max here, so the `is None` tests mean `not has_min`.
  if (
    minimum is None
    or maximum is None
    or not (np.any(np.isfinite(minimum)) or np.any(np.isfinite(maximum)))
  ):
    bounds = "none"
  elif bounds == "none":
    raise ValueError(
      f"action spec {name!r} is bounded; bounds must be "
      f"'tanh' or 'clip' so actions stay inside the Box"
    )
  return DiagGaussian(
    action_spec.shape[0],
    bounds,
    action_spec.minimum,
    action_spec.maximum,
    min_log_std,
    max_log_std,
  )
