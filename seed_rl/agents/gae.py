"""Generalized Advantage Estimation (Schulman et al. 2016, arXiv 1506.02438).

Shared by the actor-critics that train on GAE's lambda-returns: PPO, and A2C
(whose n-step returns are GAE with lambda = 1).

All tensors are time-major [T, B]: index t is the transition from x_t (where
the policy took a_t) to x_{t+1}. Episode ends inside an unroll reach this
function through three inputs built by the caller, as for V-trace and ACER
(seed_rl/agents/episode_ends.py builds the same three from [T+1] flags):

  discounts[t]   = gamma * (1 - terminated[t+1])   no bootstrap through a
                                                   termination;
  next_values[t] = bootstrap_value[t+1] if truncated[t+1] else V(x_{t+1})
                                                   at a time limit, bootstrap
                                                   from the value of the ended
                                                   episode's final observation;
  trace_mask[t]  = 1 - done[t+1]                   the lambda-trace never
                                                   carries the next episode's
                                                   residuals into this one.

Derivation. Eq. (16) of the paper, with per-step discounts and the sum cut at
the first episode end k >= t (or at the unroll end T-1):

  A_t = sum_{l=t}^{k} (prod_{i=t}^{l-1} lambda discounts_i) delta_l,
  delta_l = r_l + discounts_l next_values_l - V(x_l).

Splitting off the l = t term gives the backward recursion computed here:

  A_t = delta_t + lambda discounts_t trace_mask_t A_{t+1},   A_T = 0,

and the value targets are the lambda-returns R_t = A_t + V(x_t).
"""

from __future__ import annotations

from typing import Tuple

import tensorflow as tf

from seed_rl.common.agent_api import check_time_major


def gae(
  rewards: tf.Tensor,
  values: tf.Tensor,
  next_values: tf.Tensor,
  discounts: tf.Tensor,
  trace_mask: tf.Tensor,
  lambda_: float,
) -> Tuple[tf.Tensor, tf.Tensor]:
  """Computes GAE(lambda) advantages and lambda-return value targets.

  Args:
    rewards: [T, B] reward r_t of the transition t -> t+1 (already scaled).
    values: [T, B] V(x_t).
    next_values: [T, B] the value to bootstrap from after step t (see the
      module docstring).
    discounts: [T, B] gamma * (1 - terminated[t+1]).
    trace_mask: [T, B] 0 where an episode ended at step t+1, else 1.
    lambda_: the GAE lambda in [0, 1]; 0 gives one-step TD residuals, 1 the
      discounted Monte-Carlo return minus V(x_t) (bootstrapped at the end).

  Returns:
    advantages: [T, B] A_t.
    returns: [T, B] A_t + V(x_t).
    Both carry no gradient.
  """
  if not 0.0 <= lambda_ <= 1.0:
    raise ValueError(f"gae: lambda_ must be in [0, 1], got {lambda_}")
  values = tf.convert_to_tensor(values, tf.float32)
  inputs = {
    "rewards": rewards,
    "next_values": next_values,
    "discounts": discounts,
    "trace_mask": trace_mask,
  }
  inputs = {k: tf.convert_to_tensor(v, tf.float32) for k, v in inputs.items()}
  check_time_major("gae", "values", values, values)
  for name, tensor in inputs.items():
    check_time_major("gae", name, tensor, values)
  values = tf.stop_gradient(values)
  next_values = tf.stop_gradient(inputs["next_values"])
  deltas = inputs["rewards"] + inputs["discounts"] * next_values - values
  decay = lambda_ * inputs["discounts"] * inputs["trace_mask"]

  def step(acc, elems):
    delta, decay_t = elems
    return delta + decay_t * acc

  advantages = tf.scan(
    step, (deltas, decay), initializer=tf.zeros_like(deltas[0]), reverse=True
  )
  advantages = tf.stop_gradient(advantages)
  return advantages, advantages + values


def unroll_gae(
  values: tf.Tensor,
  rewards: tf.Tensor,
  terminated: tf.Tensor,
  truncated: tf.Tensor,
  bootstrap_value: tf.Tensor,
  gamma: float,
  lambda_: float,
) -> Tuple[tf.Tensor, tf.Tensor]:
  """GAE over a time-major unroll, building the episode-end inputs of `gae`.

  Args:
    values: [T+1, B] V(x_0) ... V(x_T) of the unroll's observations.
    rewards: [T, B] the Unroll's reward[1:] (transition t -> t+1).
    terminated: bool [T, B] the Unroll's terminated[1:].
    truncated: bool [T, B] the Unroll's truncated[1:].
    bootstrap_value: [T, B] the Unroll's bootstrap_value[1:] (the value of
      the ended episode's final observation where truncated).
    gamma: discount.
    lambda_: GAE lambda.

  Returns:
    advantages [T, B] and returns [T, B] as `gae`.
  """
  values = tf.convert_to_tensor(values, tf.float32)
  terminated = tf.convert_to_tensor(terminated, tf.bool)
  truncated = tf.convert_to_tensor(truncated, tf.bool)
  next_values = tf.where(
    truncated, tf.convert_to_tensor(bootstrap_value, tf.float32), values[1:]
  )
  discounts = gamma * (1.0 - tf.cast(terminated, tf.float32))
  trace_mask = 1.0 - tf.cast(tf.logical_or(terminated, truncated), tf.float32)
  return gae(rewards, values[:-1], next_values, discounts, trace_mask, lambda_)
