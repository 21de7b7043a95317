"""Episode ends inside a time-major unroll, as the inputs of bootstrapped
targets: the per-transition discounts, bootstrap values and trace masks that
V-trace (vtrace/vtrace.py), ACER's Retrace (acer/loss.py) and GAE
(seed_rl/agents/gae.py) read.

In the Unroll layout, step t's terminated / truncated / bootstrap_value
describe the transition INTO step t, so transition t -> t+1 reads them at
t+1:

  discounts[t]   = gamma * (1 - terminated[t+1])   no bootstrap through a
                                                   termination;
  next_values[t] = bootstrap_value[t+1] if truncated[t+1] else V(x_{t+1})
                                                   a time limit bootstraps
                                                   from the value of the
                                                   ended episode's final
                                                   observation;
  trace_mask[t]  = 1 - done[t+1]                   no trace carries the next
                                                   episode's terms into this
                                                   one.
"""

from __future__ import annotations

from typing import Tuple

import tensorflow as tf


def transition_inputs(
  baseline: tf.Tensor,
  terminated: tf.Tensor,
  truncated: tf.Tensor,
  bootstrap_value: tf.Tensor,
  discount: float,
) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """Expresses episode ends for `vtrace_targets` (and ACER's Retrace).

  Args:
    baseline: [T+1, B] V(x_t) under the current parameters.
    terminated, truncated: bool [T+1, B], flags of the transition into step t.
    bootstrap_value: [T+1, B] value of the ended episode's final observation
      where truncated (ignored elsewhere).
    discount: gamma.

  Returns:
    discounts, next_values, trace_mask, each [T, B] (see the module
    docstring).
  """
  terminated_next = tf.cast(terminated[1:], tf.bool)
  truncated_next = tf.cast(truncated[1:], tf.bool)
  done_next = tf.logical_or(terminated_next, truncated_next)
  discounts = discount * (1.0 - tf.cast(terminated_next, tf.float32))
  next_values = tf.where(
    truncated_next,
    tf.cast(bootstrap_value[1:], tf.float32),
    tf.cast(baseline[1:], tf.float32),
  )
  trace_mask = 1.0 - tf.cast(done_next, tf.float32)
  return discounts, next_values, trace_mask
