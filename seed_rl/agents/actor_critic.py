"""The actor-critic network of PPO and A2C: torso(s) -> policy parameters
[B, P] of a Categorical or DiagGaussian (agents/distributions.py) and the
value V(x) [B]. One implementation of the heads, their initialisation
(near-uniform policy at the start) and the Gaussian log-std options.
Feed-forward; V-trace's network (vtrace/networks.py) adds an LSTM option.

Separate policy and value torsos are the default for continuous control
(CleanRL, SEED's MuJoCo PPO, and Andrychowicz et al. 2021 find sharing hurts
there); Atari PPO shares one convolutional torso.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from seed_rl.networks import atari_torso
from seed_rl.networks import mlp_torso
from seed_rl.agents import distributions
from seed_rl.common.specs import ArraySpec


def default_torso(
  observation_spec: ArraySpec,
) -> Callable[[], keras.layers.Layer]:
  """atari_torso for [H, W, C] uint8 frames, mlp_torso for everything else."""
  if observation_spec.dtype == "uint8" and len(observation_spec.shape) == 3:
    return atari_torso
  return mlp_torso


class FeedForwardActorCritic(keras.layers.Layer):
  """Maps (already normalised) observations to policy params and values.

  Args:
    torso_fn: factory of a fresh torso layer [B, *obs] -> [B, F].
    distribution: the action distribution whose parameters the head emits.
    log_std: 'state_independent' (a learned [D] vector shared by all states)
      or 'state_dependent' (half of the head's output). Gaussians only.
    init_log_std: initial log std of Gaussian policies.
    shared_torso: one torso for both heads.
  """

  def __init__(
    self,
    torso_fn: Callable[[], keras.layers.Layer],
    distribution: distributions.ActionDistribution,
    log_std: str = "state_independent",
    init_log_std: float = 0.0,
    shared_torso: bool = False,
    **kwargs,
  ):
    super().__init__(**kwargs)
    self._gaussian = isinstance(distribution, distributions.DiagGaussian)
    if log_std not in ("state_independent", "state_dependent"):
      raise ValueError(
        f"FeedForwardActorCritic: log_std {log_std!r} is unknown; allowed: "
        f"state_independent, state_dependent"
      )
    self.log_std_mode = log_std
    self.policy_torso = torso_fn()
    self.value_torso = None if shared_torso else torso_fn()
    # Small policy outputs start near a uniform / unit-std policy with the mean
    # at 0, so the first updates see well-behaved ratios (Andrychowicz et al.
    # 2021 recommend a 100x smaller last policy layer).
    policy_init = keras.initializers.Orthogonal(gain=0.01)
    self._log_std_var = None
    if not self._gaussian:
      self.policy_head = keras.layers.Dense(
        distribution.num_params, kernel_initializer=policy_init, name="logits"
      )
    elif log_std == "state_independent":
      size = distribution.num_params // 2
      self.policy_head = keras.layers.Dense(
        size, kernel_initializer=policy_init, name="mean"
      )
      self._log_std_var = self.add_weight(
        shape=(size,),
        name="log_std",
        initializer=keras.initializers.Constant(init_log_std),
      )
    else:
      size = distribution.num_params // 2
      bias = np.concatenate([np.zeros(size), np.full(size, init_log_std)])
      self.policy_head = keras.layers.Dense(
        2 * size,
        kernel_initializer=policy_init,
        bias_initializer=keras.initializers.Constant(bias.astype(np.float32)),
        name="mean_and_log_std",
      )
    self.value_head = keras.layers.Dense(
      1,
      kernel_initializer=keras.initializers.Orthogonal(gain=1.0),
      name="value",
    )

  def call(self, observation) -> Tuple[tf.Tensor, tf.Tensor]:
    """[B, *obs] -> policy params [B, P], value [B]."""
    features = self.policy_torso(observation)
    params = self.policy_head(features)
    if self._log_std_var is not None:
      log_std = tf.broadcast_to(
        tf.convert_to_tensor(self._log_std_var), tf.shape(params)
      )
      params = tf.concat([params, log_std], axis=-1)
    value_features = (
      features if self.value_torso is None else self.value_torso(observation)
    )
    value = tf.squeeze(self.value_head(value_features), axis=-1)
    return params, value


def build_network(
  network: FeedForwardActorCritic,
  observation_spec: ArraySpec,
  dtype: Optional[str] = None,
) -> None:
  """Creates the variables by running a batch of one zero observation."""
  network(
    tf.zeros(
      (1,) + tuple(observation_spec.shape), dtype or observation_spec.dtype
    )
  )


def make_network(
  config: Any,
  distribution: distributions.ActionDistribution,
  observation_spec: ArraySpec,
  name: str,
  dtype: Optional[str] = None,
) -> FeedForwardActorCritic:
  """A built FeedForwardActorCritic as a config describes it (its `torso`, None
  for `default_torso`, `log_std`, `init_log_std` and `shared_torso`), its
  variables created for observations of `dtype` (default: the spec's)."""
  network = FeedForwardActorCritic(
    config.torso or default_torso(observation_spec),
    distribution,
    log_std=config.log_std,
    init_log_std=config.init_log_std,
    shared_torso=config.shared_torso,
    name=name,
  )
  build_network(network, observation_spec, dtype)
  return network
