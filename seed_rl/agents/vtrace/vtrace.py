"""V-trace off-policy targets (Espeholt et al. 2018, arXiv 1802.01561).

All tensors are time-major [T, B]: index t is the transition from x_t (where
the behaviour policy took a_t) to x_{t+1}. Episode ends inside an unroll are
expressed by the caller through three inputs:

  discounts[t]   = gamma * (1 - terminated[t+1])   no bootstrap through a
                                                   termination;
  next_values[t] = bootstrap_value[t+1] if truncated[t+1] else V(x_{t+1})
                                                   at a time limit, bootstrap
                                                   from the ended episode's
                                                   final observation;
  trace_mask[t]  = 1 - done[t+1]                   the trace correction never
                                                   flows from the next episode
                                                   back into this one.

Derivation. Eq. (1) of the paper, with per-step discounts and the sum cut at the
first episode end k >= s (or at the unroll end T-1):

  v_s = V(x_s) + sum_{t=s}^{k} (prod_{i=s}^{t-1} discounts_i c_i) delta_t,
  delta_t = rho_t (r_t + discounts_t next_values_t - V(x_t)),

with rho_t = min(rho_bar, pi/mu) and c_i = lambda min(c_bar, pi/mu). Eq. (1)
has lambda = 1; lambda < 1 (SEED RL's lambda_, as in Retrace(lambda), TD(lambda)
and GAE) trades the trace's variance for bias. Splitting off the
t = s term gives the backward recursion used below, with acc_s = v_s - V(x_s):

  acc_s = delta_s + discounts_s trace_mask_s c_s acc_{s+1},   acc_T = 0.

Inside an episode next_values_s = V(x_{s+1}), so acc_{s+1} = v_{s+1} -
next_values_s, which is the paper's remark v_s - V(x_s) = delta_s +
gamma c_s (v_{s+1} - V(x_{s+1})). The policy-gradient target uses
v'_{s+1} = next_values_s + trace_mask_s acc_{s+1}: v_{s+1} inside the episode,
the bootstrap value across a boundary and at the unroll end.
"""

from __future__ import annotations

from typing import Tuple

import tensorflow as tf

from seed_rl.common.agent_api import check_time_major

# Policy-gradient advantages: 'vtrace', the paper's r_t + gamma v_{t+1} -
# V(x_t); 'lambda', v_t - V(x_t), which on-policy is GAE(lambda)'s
# (r_t + gamma v_{t+1} - V(x_t) adds gamma (1 - lambda) times the next
# step's GAE to it), for PPO's clipped surrogate.
ADVANTAGES = ("vtrace", "lambda")


def vtrace_targets(  # noqa: PLR0913 (the paper's inputs and clips, by name)
  log_rhos: tf.Tensor,
  discounts: tf.Tensor,
  rewards: tf.Tensor,
  values: tf.Tensor,
  next_values: tf.Tensor,
  trace_mask: tf.Tensor,
  clip_rho_threshold: float = 1.0,
  clip_c_threshold: float = 1.0,
  clip_pg_rho_threshold: float = 1.0,
  weight_pg_advantages: bool = True,
  trace_lambda: float = 1.0,
  advantage: str = "vtrace",
) -> Tuple[tf.Tensor, tf.Tensor]:
  """Computes V-trace value targets and policy-gradient advantages.

  Args:
    log_rhos: [T, B] log pi(a_t|x_t) - log mu(a_t|x_t).
    discounts: [T, B] gamma * (1 - terminated[t+1]).
    rewards: [T, B] (already clipped) reward r_t of the transition t -> t+1.
    values: [T, B] V(x_t) under the current parameters.
    next_values: [T, B] the value to bootstrap from after step t (see module
      docstring).
    trace_mask: [T, B] 0 where an episode ended at step t+1, else 1.
    clip_rho_threshold: rho_bar, clips the importance weight of delta_t.
    clip_c_threshold: c_bar, clips the trace coefficients.
    clip_pg_rho_threshold: clips the importance weight of the pg advantage.
    weight_pg_advantages: False leaves the importance weight off the pg
      advantage (r_t + discounts_t v'_{t+1} - V(x_t)), for an objective
      that carries the ratio pi/mu itself (PPO's clipped surrogate).
    trace_lambda: lambda in [0, 1] of c_i = lambda min(c_bar, pi/mu); 1 is
      the paper's V-trace, 0 the one-step target V + rho_s delta_s.
    advantage: 'vtrace' (the paper's r_t + discounts_t v'_{t+1} - V(x_t)) or
      'lambda' (v_t - V(x_t); on-policy GAE(lambda), Schulman et al. 2016,
      as PPO's; with weight_pg_advantages False only).

  Returns:
    vs: [T, B] V-trace value targets v_t.
    pg_advantages: [T, B] clipped_pg_rho_t (r_t + discounts_t v'_{t+1}
      - V(x_t)), or with advantage 'lambda' v_t - V(x_t).
    Both carry no gradient.
  """
  _check_thresholds(clip_rho_threshold, clip_c_threshold, clip_pg_rho_threshold)
  if advantage not in ADVANTAGES or (
    advantage == "lambda" and weight_pg_advantages
  ):
    raise ValueError(
      f"vtrace_targets: advantage {advantage!r} is not allowed here; "
      f"allowed: 'vtrace', or 'lambda' with weight_pg_advantages False "
      f"(has {weight_pg_advantages})"
    )
  if not 0.0 <= trace_lambda <= 1.0:
    raise ValueError(
      f"vtrace_targets: trace_lambda must be in [0, 1], got {trace_lambda}"
    )
  values = tf.convert_to_tensor(values, tf.float32)
  log_rhos, discounts, rewards, next_values, trace_mask = (
    _time_major_float32(name, tensor, values)
    for name, tensor in (
      ("log_rhos", log_rhos),
      ("discounts", discounts),
      ("rewards", rewards),
      ("next_values", next_values),
      ("trace_mask", trace_mask),
    )
  )
  check_time_major("vtrace_targets", "values", values, values)

  rhos = tf.exp(log_rhos)
  clipped_rhos = tf.minimum(clip_rho_threshold, rhos)
  cs = trace_lambda * tf.minimum(clip_c_threshold, rhos)
  deltas = clipped_rhos * (rewards + discounts * next_values - values)
  trace_coefficients = discounts * trace_mask * cs

  def backward(acc_next, step_inputs):
    delta, coefficient = step_inputs
    return delta + coefficient * acc_next

  # acc[t] = vs[t] - values[t]; scanned from t = T-1 down to 0 with acc_T = 0.
  acc = tf.scan(
    backward,
    (deltas, trace_coefficients),
    initializer=tf.zeros_like(values[0]),
    reverse=True,
  )
  vs = values + acc
  if advantage == "lambda":
    return tf.stop_gradient(vs), tf.stop_gradient(acc)

  acc_tp1 = tf.concat([acc[1:], tf.zeros_like(acc[:1])], axis=0)
  vs_tp1 = next_values + trace_mask * acc_tp1
  pg_advantages = rewards + discounts * vs_tp1 - values
  if weight_pg_advantages:
    pg_advantages *= tf.minimum(clip_pg_rho_threshold, rhos)
  return tf.stop_gradient(vs), tf.stop_gradient(pg_advantages)


def _check_thresholds(*thresholds: float) -> None:
  """Raises ValueError unless rho_bar, c_bar and the pg rho_bar are > 0."""
  names = ("clip_rho_threshold", "clip_c_threshold", "clip_pg_rho_threshold")
  for name, threshold in zip(names, thresholds):
    if not threshold > 0:
      raise ValueError(
        f"vtrace_targets: {name} must be > 0 (a "
        f"non-positive clip zeroes every update), got "
        f"{threshold}"
      )


def _time_major_float32(name: str, tensor, values: tf.Tensor) -> tf.Tensor:
  """`tensor` as float32, checked to be [T, B] like `values`."""
  tensor = tf.convert_to_tensor(tensor, tf.float32)
  check_time_major("vtrace_targets", name, tensor, values)
  return tensor
