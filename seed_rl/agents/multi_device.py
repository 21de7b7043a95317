"""The training step on every LearnerConfig.training_devices device.

Data parallel under a tf.distribute.MirroredStrategy (seed_rl/common/
devices.py builds it): the time-major [T+1, B, ...] batch (and the [B, ...]
start core states) is split along B into equal shards, one per device
(B % devices == 0 is checked when the agent is built); each device runs
`loss_and_gradients` on its shard with its copy of the weights
(strategy.run). The losses are means over each shard, so the MEAN
all-reduce of the shard gradients (batch_reduce_to, NCCL on GPUs) is exactly
the gradient of the mean loss over the whole batch, up to float32 summation
order. The fused optimizer is then applied once, in cross-replica context,
updating every device's copy through `strategy.extended.update`
(Optimizer.apply_gradients). Metrics are the mean over shards: equal to the
single-device values for means (losses, entropy, value and advantage means),
and advantage/std is merged from the shards' first and second moments; a
metric that is not a mean (value/explained_variance) is the average of the
shards' values. grad/* norms are those of the all-reduced gradient.

A loss that uses a statistic of the whole batch (advantage normalisation in
A2C and PPO) takes it from `moments`, which all-reduces the shards' moments
inside the step, so every shard is normalised exactly as the unsplit batch.

Used by V-trace, A2C and ACER through `compile_train_fn` (ACER's average
policy network moves in `after_update`), and by PPO's minibatch steps
through `run_sharded` (its minibatches are flat transitions, split along
their one batch axis). An agent whose training step is `loss_and_gradients`
followed by `learning.apply_update` can use `compile_train_fn` as is.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional, Sequence, Tuple

import tensorflow as tf

from seed_rl.agents import learning
from seed_rl.common import optimizers

_STD, _MEAN = "advantage/std", "advantage/mean"


def replica_mean(value: tf.Tensor) -> tf.Tensor:
  """The mean of `value` over the replicas of the running training step
  (inside strategy.run: an all-reduce); `value` itself on one device or in
  cross-replica context, where it already covers the whole batch."""
  context = tf.distribute.get_replica_context()
  if context is None or context.num_replicas_in_sync == 1:
    return value
  return context.all_reduce(tf.distribute.ReduceOp.MEAN, value)


def moments(x: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """Mean and population variance over all elements of `x` and of the other
  replicas' shards: those of the unsplit batch, since shards are equal in
  size (the mean of the shards' means is the batch mean, then the mean of
  the shards' mean squared deviations from it the batch variance; the two
  passes of tf.nn.moments, not E[x^2] - mean^2, which cancels badly)."""
  mean = replica_mean(tf.reduce_mean(x))
  variance = replica_mean(tf.reduce_mean(tf.square(x - tf.stop_gradient(mean))))
  return mean, variance


def compile_train_fn(
  strategy: tf.distribute.Strategy,
  signature: Sequence[Any],
  loss_and_gradients: learning.LossAndGradients,
  network: Any,
  optimizer: optimizers.Optimizer,
  step_counter: tf.Variable,
  after_update: Optional[Callable[[], None]] = None,
) -> Callable[..., learning.Metrics]:
  """`learning.compile_train_fn` split over the devices of `strategy`
  (by `run_sharded`).

  The compiled function takes the arrays of `signature`, each [T(+1), B,
  ...] (split along axis 1), and optionally, last, one tuple of start core
  states, each [B, ...] (split along axis 0; () without recurrent state).
  Network, optimizer and step counter must have been built under
  `strategy.scope()`. `after_update` runs once, in cross-replica context,
  after the optimizer step (mirrored variables it assigns update every
  copy).
  """

  def replica_step(*shard_args):
    gradients, metrics = loss_and_gradients(*shard_args)
    if _STD in metrics:
      # The shard's second moment: the MEAN reduce then merges exactly.
      metrics[_STD] = tf.square(metrics[_STD]) + tf.square(metrics[_MEAN])
    return gradients, metrics, ()

  @tf.function(input_signature=signature)
  def train_fn(*args):
    axes = [0 if isinstance(x, (tuple, list)) else 1 for x in args]
    with strategy.scope():
      variables = network.trainable_variables
      gradients, first, metrics, _ = run_sharded(
        strategy, replica_step, args, variables, axes
      )
      if _STD in metrics:
        metrics[_STD] = tf.sqrt(
          tf.maximum(metrics[_STD] - tf.square(metrics[_MEAN]), 0.0)
        )
      metrics = learning.apply_update(
        optimizer, gradients, variables, metrics, norm_gradients=first
      )
      if after_update is not None:
        after_update()
      return learning.finish_update(metrics, step_counter, [optimizer])

  return train_fn


# ---- replay agents: per-item outputs, several updates per step --------------
# DQN, R2D2, SAC and TD3 (seed_rl/agents/off_policy.py) do not fit
# `compile_train_fn`: their batch is a replay sample whose per-item results
# (DQN's and R2D2's new priorities) go back to the replay in the sampled
# order, and SAC and TD3 make several updates in one learner step (critics;
# then actor and temperature reading the critics just updated; then the
# target networks). So each update calls `run_sharded` in cross-replica
# context and applies its optimizer there (Optimizer.apply_gradients writes
# every device's copy). The same code runs on one device (strategy None: no
# split), so the two differ only in where the loss runs. Random numbers (SAC
# and TD3 action noise, NoisyNet noise) are drawn for the whole batch in
# cross-replica context and split with it, so every item gets the noise it
# gets on one device; target networks are assigned in cross-replica context,
# which writes the same value to every copy.


def training_scope(strategy: tf.distribute.Strategy | None) -> Any:
  """`strategy.scope()`: variables built inside are mirrored on every
  training device (weights, optimizer slots); none without a strategy."""
  return strategy.scope() if strategy is not None else contextlib.nullcontext()


def device_scope(device: str | None) -> Any:
  """`tf.device(device)` (acting on LearnerConfig.inference_device reads
  that device's copy of mirrored weights), or none."""
  return tf.device(device) if device else contextlib.nullcontext()


def run_sharded(
  strategy: tf.distribute.Strategy | None,
  loss_and_gradients: Callable[
    ..., tuple[Sequence[Any], learning.Metrics, Any]
  ],
  args: Sequence[Any],
  variables: Sequence[Any],
  batch_axes: int | Sequence[int] = 0,
) -> tuple[list[Any], list[tf.Tensor], learning.Metrics, Any]:
  """`loss_and_gradients(*args)` over the whole batch, on one device or
  split over the replicas of `strategy`.

  loss_and_gradients returns the gradients of `variables` of a loss that is
  a mean over its batch's items, metrics that are such means too, and a nest
  of per-item outputs [B, ...] (() if none). An importance-weighted loss
  must be mean_b(w_b l_b) with w normalised over the whole sample (as the
  replays do): then, the shards being equal in size, the mean of the shards'
  losses (and gradients) is the full batch's; a normalisation inside the
  loss (sum_b w_b l_b / sum_b w_b) would not merge.

  With a strategy every arg (a tensor or a nest of them) is split along its
  batch axis (`batch_axes`: one for all args, or one per arg) into equal
  contiguous shards, shard i on replica i; the gradients and metrics are
  MEAN all-reduced and the per-item outputs concatenated in replica order,
  i.e. the batch's order. Call in cross-replica context under
  `strategy.scope()`, with variables built there.

  Returns:
    The gradients to apply (Mirrored under a strategy: one identical copy
    per device, for Optimizer.apply_gradients), one device's copy of them
    (for grad/* norms), the metrics and the per-item outputs [B, ...].
  """
  if strategy is None:
    gradients, metrics, per_item = loss_and_gradients(*args)
    return list(gradients), list(gradients), metrics, per_item
  n = strategy.num_replicas_in_sync
  axes = (
    [batch_axes] * len(args)
    if isinstance(batch_axes, int)
    else list(batch_axes)
  )

  def shard(context):
    i = context.replica_id_in_sync_group
    return tuple(
      tf.nest.map_structure(
        lambda x, axis=axis: tf.split(x, n, axis=axis)[i], arg
      )
      for arg, axis in zip(args, axes, strict=True)
    )

  mean = tf.distribute.ReduceOp.MEAN
  shards = strategy.experimental_distribute_values_from_function(shard)
  gradients, metrics, per_item = strategy.run(loss_and_gradients, args=shards)
  mirrored = [optimizers.tf_variable(v) for v in variables]
  gradients = strategy.extended.batch_reduce_to(
    mean, list(zip(gradients, mirrored, strict=True))
  )
  metrics = {
    name: strategy.reduce(mean, value, axis=None)
    for name, value in metrics.items()
  }
  per_item = tf.nest.map_structure(
    lambda x: strategy.gather(x, axis=0), per_item
  )
  first = [strategy.experimental_local_results(g)[0] for g in gradients]
  return gradients, first, metrics, per_item
