"""R2D2's n-step double-Q targets with value rescaling, and its priorities.

All tensors are time-major. Step t of a sequence follows SEED's EnvOutput
layout: `reward[t]`, `terminated[t]`, `truncated[t]` describe the transition
INTO step t, so the action taken at step t earns `reward[t + 1]` and its
episode ends inside the n-step window at the first j in (t, t + n] with
`terminated[j]` or `truncated[j]`.

Q-values live in the rescaled space of h(x) = sign(x)(sqrt(|x| + 1) - 1) +
eps x (Pohlen et al. 2018), as the network outputs them. For a step t:

  y_t = h( sum_{k<m} gamma^k r_{t+k+1} + gamma^m B_t )

where m = n unless the episode ends first (then m is the number of steps up
to the end), and
  B_t = h^-1(Q_target(s_{t+n}, argmax_a Q_online(s_{t+n}, a)))  no end,
  B_t = 0                                                       termination,
  B_t = h^-1(bootstrap_value[j])                                truncation at j,
where bootstrap_value[j] is the behaviour network's max_a Q (rescaled) of the
ended episode's final observation, the only value of it the runtime keeps.
"""

from __future__ import annotations

import tensorflow as tf

from seed_rl.agents import value_rescaling


def n_step_targets(
  reward: tf.Tensor,
  terminated: tf.Tensor,
  truncated: tf.Tensor,
  bootstrap_value: tf.Tensor,
  next_value: tf.Tensor,
  discount: float,
  n_step: int,
  rescaling_epsilon: float,
) -> tf.Tensor:
  """Rescaled n-step targets for steps 0 .. T - n - 1 of a sequence.

  The same episode-end rules as DQN's n-step returns
  (seed_rl.common.transitions.nstep_transitions), in another form on
  purpose: DQN sums the rewards once, in NumPy (float64) when it cuts
  unrolls into independent transitions for replay, and bootstraps at
  training time from Q at a stored next observation; R2D2 replays whole
  sequences through the LSTM, so the bootstrap Q of every window comes out
  of the training step's own unroll, and the sums here run in the graph in
  the rescaled space of h (h^-1 of each bootstrap value, h of the target)
  and also give the insert-time priorities from behaviour values. The
  double-Q bootstrap itself is shared (seed_rl.agents.q_learning).

  Args:
    reward: float [T, B] raw reward of the transition into step t (float32,
      or float64 for exact comparisons; the value inputs match its dtype).
    terminated: bool [T, B] the transition into step t terminated an episode.
    truncated: bool [T, B] it truncated one (termination wins if both).
    bootstrap_value: float32 [T, B] rescaled value of the ended episode's
      final observation where truncated[t] (ignored elsewhere).
    next_value: float32 [T, B] rescaled value to bootstrap from at step t when
      step t is the n-th step of a window (Q_target at the double-Q action,
      or the behaviour max-Q for initial priorities).
    discount: gamma.
    n_step: n >= 1.
    rescaling_epsilon: eps of h.

  Returns:
    [T - n, B] targets y_t in rescaled space, in reward's dtype.
  """
  if n_step < 1:
    raise ValueError(f"n_step must be >= 1, got {n_step}")
  length = tf.shape(reward)[0] - n_step
  h_inv = lambda x: value_rescaling.h_inv(x, rescaling_epsilon)

  def window(x, k):  # x[t + k] for t in [0, T - n)
    return x[k : k + length]

  returns = tf.zeros_like(window(reward, 0))
  bootstrap = tf.zeros_like(returns)
  alive = tf.ones_like(returns)  # 1 while the episode has not ended yet
  dtype = reward.dtype
  for k in range(1, n_step + 1):
    term = tf.cast(window(terminated, k), dtype)
    trunc = tf.cast(window(truncated, k), dtype) * (1.0 - term)
    returns += alive * discount ** (k - 1) * window(reward, k)
    bootstrap += alive * trunc * discount**k * h_inv(window(bootstrap_value, k))
    alive *= (1.0 - term) * (1.0 - trunc)
  bootstrap += alive * discount**n_step * h_inv(window(next_value, n_step))
  return value_rescaling.h(returns + bootstrap, rescaling_epsilon)


def sequence_priorities(abs_td: tf.Tensor, eta: float) -> tf.Tensor:
  """eta * max_t |delta_t| + (1 - eta) * mean_t |delta_t|: [T, B] -> [B]."""
  return eta * tf.reduce_max(abs_td, axis=0) + (1.0 - eta) * tf.reduce_mean(
    abs_td, axis=0
  )
