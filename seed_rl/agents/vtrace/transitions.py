"""V-trace minibatches of single steps (VtraceConfig.minibatch_unit
'transition'), as PPO draws them.

With targets 'round' the V-trace recursion runs once per round, over its
whole unrolls (agent.py's round function); what each update then needs of a
step is its frame stack, action, behaviour policy and the round's v_s and
advantage, so a minibatch can hold steps of every unroll of the round
instead of a few whole unrolls. Feed-forward networks only: an LSTM's step
needs its unroll's order and core state.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import tensorflow as tf

from seed_rl.agents.vtrace import loss as loss_lib
from seed_rl.agents.vtrace.config import VtraceConfig
from seed_rl.common.specs import ArraySpec


def flatten_round(
  inputs: Sequence[tf.Tensor],
  prox: tf.Tensor,
  vs: tf.Tensor,
  advantages: tf.Tensor,
  stacks: tf.Tensor,
  proximal: bool,
  old_values: Optional[tf.Tensor] = None,
) -> Tuple[tf.Tensor, ...]:
  """The round's T*B trained steps, flat [N, ...], in `signature`'s order.

  Args:
    inputs: the agent's time-major round arrays [T+1, B, ...] (action third,
      behaviour params eighth).
    prox: the round's starting policy params [T+1, B, P].
    vs, advantages: the round's targets [T, B].
    stacks: the trained steps' observations [T, B, *obs_shape].
    proximal: append the proximal params (surrogate_anchor 'proximal').
    old_values: None, or the round's starting values [T, B], appended
      last (value_clip).

  Tensors throughout, so a training device keeps what it computed.
  """

  def flat(x):
    x = tf.convert_to_tensor(x)
    return tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], 0))

  action, behaviour = inputs[2][:-1], inputs[7][:-1]
  arrays = [stacks, action, behaviour, vs, advantages]
  arrays += [prox[:-1]] if proximal else []
  arrays += [old_values] if old_values is not None else []
  return tuple(flat(x) for x in arrays)


def signature(
  config: VtraceConfig,
  observation_spec: ArraySpec,
  action_spec: ArraySpec,
  num_params: int,
) -> List[tf.TensorSpec]:
  """One minibatch of n = T * batch_size / num_minibatches steps, each
  array with a leading axis of 1 (training devices split axis 1): stacks
  [1, n, *obs_shape], action [1, n, ...], behaviour params [1, n, P], v_s
  and advantages [1, n], then with surrogate_anchor 'proximal' the round's
  starting params [1, n, P], then with value_clip its starting values
  [1, n]."""
  n = config.unroll_length * config.batch_size // config.num_minibatches
  params = tf.TensorSpec([1, n, num_params], tf.float32)
  proximal = config.surrogate_anchor == "proximal"
  arrays = [
    tf.TensorSpec(
      (1, n) + tuple(observation_spec.shape), observation_spec.dtype
    ),
    tf.TensorSpec((1, n) + tuple(action_spec.shape), action_spec.dtype),
    params,
    tf.TensorSpec([1, n], tf.float32),
    tf.TensorSpec([1, n], tf.float32),
  ] + ([params] if proximal else [])
  value_clip = [tf.TensorSpec([1, n], tf.float32)] if config.value_clip else []
  return arrays + value_clip


def loss_and_gradients_fn(config: VtraceConfig, network, distribution):
  """(signature's arrays) -> (gradients of `loss.transition_loss` for the
  network's trainable variables, metrics)."""

  def loss_and_gradients(*arrays):
    observation, action, behaviour, vs, adv, *rest = [x[0] for x in arrays]
    old_values = rest.pop() if config.value_clip else None
    with tf.GradientTape() as tape:
      params, baseline = network.feed_forward(observation)
      total, metrics = loss_lib.transition_loss(
        distribution,
        params,
        baseline,
        action,
        behaviour,
        vs,
        adv,
        value_cost=config.value_cost,
        entropy_cost=config.entropy_cost,
        clip_rho_threshold=config.clip_rho_threshold,
        clip_pg_rho_threshold=config.clip_pg_rho_threshold,
        normalize_advantage=config.normalize_advantages,
        clip_ratio=config.clip_ratio,
        proximal_params=rest[0] if rest else None,
        old_values=old_values,
        value_clip=config.value_clip,
      )
    return tape.gradient(total, network.trainable_variables), metrics

  return loss_and_gradients
