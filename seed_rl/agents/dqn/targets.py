"""DQN's double-Q targets for n-step transitions.

The n-step returns themselves (termination vs truncation, the bootstrap
index and discount) are cut when filling replay, by
`seed_rl.common.transitions.nstep_transitions`; here a batch of transitions
becomes targets with the double-Q bootstrap shared with R2D2
(`seed_rl.agents.q_learning.double_q_values`).

With value rescaling (Pohlen et al. 2018) the networks predict h(Q), so
target = h(R + gamma^n h^-1(Q_target(s', argmax_a Q_online(s', a)))).
"""

from __future__ import annotations

import tensorflow as tf

from seed_rl.agents import q_learning
from seed_rl.agents import value_rescaling


def transition_targets(
  returns: tf.Tensor,
  bootstrap_discount: tf.Tensor,
  online_q_next: tf.Tensor,
  target_q_next: tf.Tensor,
  double_q: bool = True,
  rescale: bool = False,
  eps: float = value_rescaling.DEFAULT_EPSILON,
) -> tf.Tensor:
  """Targets [...] for transitions [...] with next-state Q values [..., A].

  Q values are in the network's space (h(Q) when `rescale`); returns are raw.
  """
  bootstrap = q_learning.double_q_values(online_q_next, target_q_next, double_q)
  if rescale:
    bootstrap = value_rescaling.h_inv(bootstrap, eps)
  target = returns + bootstrap_discount * bootstrap
  if rescale:
    target = value_rescaling.h(target, eps)
  return tf.stop_gradient(target)
