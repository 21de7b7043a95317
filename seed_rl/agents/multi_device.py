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

Used by V-trace (SUPPORTS_TRAINING_DEVICES); an agent whose training step is
`loss_and_gradients` followed by `learning.apply_update` can use it as is.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import tensorflow as tf

from seed_rl.agents import learning
from seed_rl.common import optimizers

_STD, _MEAN = "advantage/std", "advantage/mean"


def compile_train_fn(
  strategy: tf.distribute.Strategy,
  signature: Sequence[Any],
  loss_and_gradients: learning.LossAndGradients,
  network: Any,
  optimizer: optimizers.Optimizer,
  step_counter: tf.Variable,
) -> Callable[..., learning.Metrics]:
  """`learning.compile_train_fn` split over the devices of `strategy`.

  The compiled function takes the arrays of `signature`, each [T+1, B, ...]
  (split along axis 1), then one tuple of start core states, each [B, ...]
  (split along axis 0; () without recurrent state). Network, optimizer and
  step counter must have been built under `strategy.scope()`.
  """
  n = strategy.num_replicas_in_sync
  mean = tf.distribute.ReduceOp.MEAN

  def replica_step(*shard_args):
    gradients, metrics = loss_and_gradients(*shard_args)
    if _STD in metrics:
      # The shard's second moment: the MEAN reduce then merges exactly.
      metrics[_STD] = tf.square(metrics[_STD]) + tf.square(metrics[_MEAN])
    return gradients, metrics

  @tf.function(input_signature=signature)
  def train_fn(*args):
    *arrays, core_state = args

    def shard(context):
      i = context.replica_id_in_sync_group
      return tuple(tf.split(x, n, axis=1)[i] for x in arrays) + (
        tuple(tf.split(s, n, axis=0)[i] for s in core_state),
      )

    with strategy.scope():
      shards = strategy.experimental_distribute_values_from_function(shard)
      gradients, replica_metrics = strategy.run(replica_step, args=shards)
      variables = network.trainable_variables
      mirrored = [optimizers.tf_variable(v) for v in variables]
      gradients = strategy.extended.batch_reduce_to(
        mean, list(zip(gradients, mirrored))
      )
      metrics = {
        name: strategy.reduce(mean, value, axis=None)
        for name, value in replica_metrics.items()
      }
      if _STD in metrics:
        metrics[_STD] = tf.sqrt(
          tf.maximum(metrics[_STD] - tf.square(metrics[_MEAN]), 0.0)
        )
      first = [strategy.experimental_local_results(g)[0] for g in gradients]
      return learning.apply_update(
        optimizer, gradients, variables, metrics, step_counter, first
      )

  return train_fn
