"""ACER for discrete actions (Wang et al. 2017, arXiv 1611.01224, Algorithm 2).

Inputs are time-major over a whole unroll of T+1 steps ([T+1, B]), in the
Unroll layout: step t's reward / terminated / truncated / bootstrap_value
describe the transition INTO step t. Steps 0..T-1 are trained on; step T
only bootstraps. Index t of a [T, B] tensor is the transition
x_t -a_t-> x_{t+1} with reward r_t (= the Unroll's reward[t+1]).

Notation: f(.|x) = pi(.|x) the current policy (softmax of the logits), mu the
behaviour policy that acted (its logits are stored in the unroll), Q(x, .)
the current Q head, V(x) = sum_a pi(a|x) Q(x, a), and the importance weights

  rho_t(a) = pi(a|x_t) / mu(a|x_t),    rho_t = rho_t(a_t).

1. Retrace targets (eq. 5 and Algorithm 2; Munos et al. 2016), backwards
   from the unroll end:

     Q_ret_t = r_t + gamma G_{t+1},
     G_{t+1} = c_{t+1} (Q_ret_{t+1} - Q(x_{t+1}, a_{t+1})) + V(x_{t+1}),
     c_t     = lambda min(1, rho_t)   (the paper: lambda = 1).

   Episode ends and the unroll end replace G_{t+1}:
     termination at x_{t+1}:  gamma G = 0          (Q_ret_t = r_t);
     truncation at x_{t+1}:   G = the behaviour value of the ended
                              episode's final observation (bootstrap_value);
     t = T-1:                 G = V(x_T)           (Algorithm 2's Q_ret = V).
   Written with the same per-transition encoding as V-trace and GAE
   (agents/episode_ends.transition_inputs): discounts_t = gamma (1 -
   terminated), next_values_t = bootstrap_value or V(x_{t+1}), trace_mask_t
   = 1 - done:

     Q_ret_t = r_t + discounts_t (next_values_t + trace_mask_t acc_{t+1}),
     acc_t   = c_t (Q_ret_t - Q(x_t, a_t)),    acc_T = 0.

2. Policy gradient with truncated importance weights and bias correction
   (eq. 9 with the Q_ret estimate, Algorithm 2):

     g_t = min(c_bar, rho_t) grad log pi(a_t|x_t) (Q_ret_t - V(x_t))
         + sum_a [1 - c_bar / rho_t(a)]_+ pi(a|x_t) grad log pi(a|x_t)
                                              (Q(x_t, a) - V(x_t)),

   c_bar = truncation_threshold (10 in the paper). The second term is an
   expectation under the current policy of the part the truncation cut off;
   it is zero for every action with rho_t(a) <= c_bar. As a loss:
   L_pi = -mean_t,b [first term's weight * log pi(a_t|x_t)
                     + sum_a (weight_a) log pi(a|x_t)], all weights constants.

3. Value loss: L_Q = value_cost * 0.5 * mean_t,b (Q_ret_t - Q(x_t, a_t))^2
   (the paper's (Q_ret - Q)^2 gradient, halved like every agent's value
   loss here; Baselines' ACER uses q_coef 0.5 on the same halved square).

4. Entropy bonus: L_H = -entropy_cost * mean_t,b H[pi(.|x_t)].

5. Efficient trust region (section 3.3, optional): with phi_t = pi(.|x_t)
   (the probability vector, as in Baselines' ACER), the per-step gradient
   g_t = -d(L_pi + L_H)/d phi_t * (T B) of the objective is replaced by

     z_t = g_t - max(0, (k_t . g_t - delta) / |k_t|^2) k_t,
     k_t = d KL(pi_avg(.|x_t) || phi_t) / d phi_t = -pi_avg(.|x_t) / phi_t,

   the solution of min 1/2 |z - g|^2 s.t. k . z <= delta (eq. 12-13), and
   back-propagated into the network from phi; pi_avg is a Polyak average of
   the policy network (the agent keeps it).

Everything in the targets and weights (Q_ret, V, rho, c) carries no
gradient; only log pi, H and Q(x_t, a_t) are differentiated.
"""

from __future__ import annotations

from typing import Dict, Tuple

import tensorflow as tf

from seed_rl.agents.episode_ends import transition_inputs
from seed_rl.agents import diagnostics
from seed_rl.common.agent_api import check_time_major

# Floors of probabilities under a log or a division: a softmax output can
# underflow to 0 for logits ~100 apart.
_TINY = 1e-30


def retrace_targets(
  rewards: tf.Tensor,
  discounts: tf.Tensor,
  next_values: tf.Tensor,
  trace_mask: tf.Tensor,
  q_taken: tf.Tensor,
  traces: tf.Tensor,
) -> tf.Tensor:
  """Q_ret [T, B] by the backward recursion of the module docstring.

  Args:
    rewards: [T, B] r_t (already clipped).
    discounts: [T, B] gamma * (1 - terminated at x_{t+1}).
    next_values: [T, B] bootstrap_value where truncated at x_{t+1}, else
      V(x_{t+1}).
    trace_mask: [T, B] 0 where the episode ended at x_{t+1}, else 1.
    q_taken: [T, B] Q(x_t, a_t).
    traces: [T, B] c_t = lambda min(1, rho_t).

  Returns:
    Q_ret [T, B], without gradient.
  """
  tensors = {
    "rewards": rewards,
    "discounts": discounts,
    "next_values": next_values,
    "trace_mask": trace_mask,
    "q_taken": q_taken,
    "traces": traces,
  }
  tensors = {
    k: tf.stop_gradient(tf.convert_to_tensor(v, tf.float32))
    for k, v in tensors.items()
  }
  for name, tensor in tensors.items():
    check_time_major("retrace_targets", name, tensor, tensors["q_taken"])

  def backward(carry, elems):
    acc_next, _ = carry
    reward, discount, next_value, mask, q, c = elems
    q_ret = reward + discount * (next_value + mask * acc_next)
    return c * (q_ret - q), q_ret

  zeros = tf.zeros_like(tensors["q_taken"][0])
  _, q_ret = tf.scan(
    backward,
    tuple(
      tensors[k]
      for k in (
        "rewards",
        "discounts",
        "next_values",
        "trace_mask",
        "q_taken",
        "traces",
      )
    ),
    initializer=(zeros, zeros),
    reverse=True,
  )
  return tf.stop_gradient(q_ret)


def acer_loss(  # noqa: PLR0913 (tensors and weights by keyword, as the equations)
  probs: tf.Tensor,
  q: tf.Tensor,
  behaviour_logits: tf.Tensor,
  action: tf.Tensor,
  reward: tf.Tensor,
  terminated: tf.Tensor,
  truncated: tf.Tensor,
  bootstrap_value: tf.Tensor,
  discount: float,
  retrace_lambda: float = 1.0,
  truncation_threshold: float = 10.0,
  entropy_cost: float = 0.01,
  value_cost: float = 0.5,
) -> Tuple[Dict[str, tf.Tensor], Dict[str, tf.Tensor]]:
  """ACER's loss terms over a time-major unroll (module docstring, 1-4).

  Kept in one piece: the four terms share the importance weights and
  Retrace targets and read top to bottom as in the paper's Algorithm 2.

  Args:
    probs: [T+1, B, A] pi(.|x_t) of the current network (differentiable;
      the trust region differentiates the loss with respect to it).
    q: [T+1, B, A] Q(x_t, .) of the current network.
    behaviour_logits: [T+1, B, A] logits of mu that acted.
    action: [T+1, B] int a_t taken at step t.
    reward: [T+1, B] (already clipped) reward of the transition into step t.
    terminated, truncated: bool [T+1, B] the transition into step t ended
      the previous episode by termination / time limit.
    bootstrap_value: [T+1, B] where truncated, the behaviour value of the
      ended episode's final observation.
    discount: gamma.
    retrace_lambda: lambda of the traces c = lambda min(1, rho).
    truncation_threshold: c_bar of the truncated importance weights.
    entropy_cost, value_cost: weights.

  Returns:
    terms: 'policy' (truncated IS term + bias correction), 'value',
      'entropy' (weighted, scalars; their sum is the loss).
    metrics: 'loss/{total,policy,value,entropy}', 'policy/entropy',
      'q/mean', 'q/target_mean', 'value/mean', 'value/explained_variance',
      'advantage/mean', 'advantage/std', 'acer/importance_weight_mean',
      'acer/truncated_fraction', 'acer/bias_correction_loss'.
  """
  probs = tf.convert_to_tensor(probs, tf.float32)
  q = tf.convert_to_tensor(q, tf.float32)
  num_actions = probs.shape[-1]
  pi = probs[:-1]
  pi_const = tf.stop_gradient(pi)
  log_pi = tf.math.log(tf.maximum(pi, _TINY))
  mu = tf.nn.softmax(tf.cast(behaviour_logits[:-1], tf.float32))
  # rho_t(a) for every action [T, B, A], and rho_t at the taken action.
  rho_all = pi_const / tf.maximum(mu, _TINY)
  taken = tf.one_hot(tf.cast(action[:-1], tf.int32), num_actions)
  rho = tf.reduce_sum(rho_all * taken, axis=-1)

  q_const = tf.stop_gradient(q)
  values_all = tf.reduce_sum(tf.stop_gradient(probs) * q_const, axis=-1)
  values = values_all[:-1]
  q_taken = tf.reduce_sum(q[:-1] * taken, axis=-1)

  # 1. Retrace.
  discounts, next_values, trace_mask = transition_inputs(
    values_all, terminated, truncated, bootstrap_value, discount
  )
  q_ret = retrace_targets(
    tf.cast(reward[1:], tf.float32),
    discounts,
    next_values,
    trace_mask,
    q_taken,
    retrace_lambda * tf.minimum(1.0, rho),
  )

  # 2. Truncated importance-weighted policy gradient + bias correction.
  advantages = q_ret - values
  log_pi_taken = tf.reduce_sum(log_pi * taken, axis=-1)
  truncated_term = tf.minimum(truncation_threshold, rho) * advantages
  correction_weight = (
    tf.nn.relu(1.0 - truncation_threshold / tf.maximum(rho_all, _TINY))
    * pi_const
    * (q_const[:-1] - values[..., None])
  )
  truncated_loss = -tf.reduce_mean(
    tf.stop_gradient(truncated_term) * log_pi_taken
  )
  bias_correction_loss = -tf.reduce_mean(
    tf.reduce_sum(tf.stop_gradient(correction_weight) * log_pi, axis=-1)
  )
  policy_loss = truncated_loss + bias_correction_loss

  # 3. Value (Q) regression to Q_ret.
  value_loss = value_cost * 0.5 * tf.reduce_mean(tf.square(q_ret - q_taken))

  # 4. Entropy bonus.
  entropy = tf.reduce_mean(-tf.reduce_sum(pi * log_pi, axis=-1))
  entropy_loss = -entropy_cost * entropy

  total = policy_loss + value_loss + entropy_loss
  terms = {"policy": policy_loss, "value": value_loss, "entropy": entropy_loss}
  metrics = {
    "loss/total": total,
    "loss/policy": policy_loss,
    "loss/value": value_loss,
    "loss/entropy": entropy_loss,
    "policy/entropy": entropy,
    "q/mean": tf.reduce_mean(q_taken),
    "q/target_mean": tf.reduce_mean(q_ret),
    "value/mean": tf.reduce_mean(values),
    "value/explained_variance": diagnostics.explained_variance(
      tf.stop_gradient(q_taken), q_ret
    ),
    "acer/importance_weight_mean": tf.reduce_mean(rho),
    "acer/truncated_fraction": tf.reduce_mean(
      tf.cast(rho > truncation_threshold, tf.float32)
    ),
    "acer/bias_correction_loss": bias_correction_loss,
    **diagnostics.advantage_stats(advantages),
  }
  return terms, metrics


def trust_region_gradient(
  loss_gradient: tf.Tensor,
  probs: tf.Tensor,
  average_probs: tf.Tensor,
  delta: float,
) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
  """Projects the policy gradient onto ACER's linearised trust region.

  Args:
    loss_gradient: [T, B, A] d(L_pi + L_H)/d phi, the gradient of the mean
      policy and entropy loss with respect to the probabilities phi.
    probs: [T, B, A] phi = pi(.|x_t) of the current network.
    average_probs: [T, B, A] pi_avg(.|x_t) of the average policy network.
    delta: the constraint on k . z per step.

  Returns:
    The adjusted gradient [T, B, A] of the loss with respect to phi (to
    back-propagate into the network), and metrics
    'acer/trust_region_active' (fraction of steps whose gradient was
    projected) and 'acer/average_policy_kl' (mean KL(pi_avg || pi)).
  """
  loss_gradient = tf.convert_to_tensor(loss_gradient, tf.float32)
  probs = tf.stop_gradient(tf.convert_to_tensor(probs, tf.float32))
  average_probs = tf.stop_gradient(
    tf.convert_to_tensor(average_probs, tf.float32)
  )
  # The mean over N = T*B steps scaled each step's gradient by 1 / N; the
  # constraint is per step, so undo that first.
  num_steps = tf.cast(tf.reduce_prod(tf.shape(loss_gradient)[:-1]), tf.float32)
  g = -num_steps * loss_gradient
  k = -average_probs / tf.maximum(probs, _TINY)
  excess = tf.reduce_sum(k * g, axis=-1) - delta
  scale = tf.nn.relu(excess) / tf.maximum(
    tf.reduce_sum(tf.square(k), axis=-1), _TINY
  )
  z = g - scale[..., None] * k
  kl = tf.reduce_sum(
    average_probs
    * (
      tf.math.log(tf.maximum(average_probs, _TINY))
      - tf.math.log(tf.maximum(probs, _TINY))
    ),
    axis=-1,
  )
  metrics = {
    "acer/trust_region_active": tf.reduce_mean(tf.cast(excess > 0, tf.float32)),
    "acer/average_policy_kl": tf.reduce_mean(kl),
  }
  return -z / num_steps, metrics
