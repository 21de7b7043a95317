"""GAE against a NumPy reference written from the paper's definition.

The reference is the sum of discounted TD residuals (Schulman et al. 2016,
eq. 16), evaluated with explicit loops over raw unroll fields: for each step
t it walks forward, adding (gamma lambda)^(l-t) delta_l, and stops after the
transition that ends the episode or at the unroll end.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents import gae as gae_lib


def reference_gae(
  values, rewards, terminated, truncated, bootstrap_value, gamma, lam
):
  """Unroll-style inputs (values [T+1, B], the rest [T, B] for steps 1..T)."""
  num_steps, batch = rewards.shape
  advantages = np.zeros((num_steps, batch))
  for b in range(batch):
    for t in range(num_steps):
      total, weight = 0.0, 1.0
      for k in range(t, num_steps):
        if terminated[k, b]:
          next_value = 0.0  # nothing follows a terminal state
        elif truncated[k, b]:
          next_value = bootstrap_value[k, b]  # the cut-off episode goes on
        else:
          next_value = values[k + 1, b]
        delta = rewards[k, b] + gamma * next_value - values[k, b]
        total += weight * delta
        if terminated[k, b] or truncated[k, b]:
          break  # the next episode's residuals do not belong to this one
        weight *= gamma * lam
      advantages[t, b] = total
  return advantages, advantages + values[:-1]


def _random_inputs(rng, num_steps=7, batch=5):
  values = rng.normal(size=(num_steps + 1, batch)).astype(np.float32)
  rewards = rng.normal(size=(num_steps, batch)).astype(np.float32)
  terminated = rng.random((num_steps, batch)) < 0.2
  truncated = (rng.random((num_steps, batch)) < 0.2) & ~terminated
  bootstrap = np.where(
    truncated, rng.normal(size=(num_steps, batch)), 0.0
  ).astype(np.float32)
  return values, rewards, terminated, truncated, bootstrap


@pytest.mark.parametrize(
  "gamma,lam", [(0.99, 0.95), (0.9, 0.0), (0.97, 1.0), (1.0, 0.5)]
)
def test_unroll_gae_matches_reference(gamma, lam):
  rng = np.random.default_rng(0)
  inputs = _random_inputs(rng)
  adv, ret = gae_lib.unroll_gae(*inputs, gamma=gamma, lambda_=lam)
  ref_adv, ref_ret = reference_gae(*inputs, gamma, lam)
  np.testing.assert_allclose(adv.numpy(), ref_adv, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(ret.numpy(), ref_ret, rtol=1e-5, atol=1e-5)


def test_gae_low_level_inputs_match_reference():
  rng = np.random.default_rng(1)
  values, rewards, term, trunc, boot = _random_inputs(rng)
  gamma, lam = 0.98, 0.9
  next_values = np.where(trunc, boot, values[1:])
  discounts = gamma * (1.0 - term)
  trace_mask = 1.0 - (term | trunc)
  adv, _ = gae_lib.gae(
    rewards, values[:-1], next_values, discounts, trace_mask, lam
  )
  ref_adv, _ = reference_gae(values, rewards, term, trunc, boot, gamma, lam)
  np.testing.assert_allclose(adv.numpy(), ref_adv, rtol=1e-5, atol=1e-5)


def _split_trajectory(traj, num_steps):
  """Two unrolls with overlap 1 of one env's trajectory of 2T+1 steps.

  traj fields are per step s (SEED layout: reward/flags of the transition
  into s). Returns per-unroll GAE inputs as the agent builds them.
  """
  unrolls = []
  for start in (0, num_steps):
    sl = slice(start, start + num_steps + 1)
    obs_values = traj["value"][sl][:, None]
    unrolls.append(
      (
        obs_values,
        traj["reward"][sl][1:, None],
        traj["terminated"][sl][1:, None],
        traj["truncated"][sl][1:, None],
        traj["bootstrap"][sl][1:, None],
      )
    )
  return unrolls


@pytest.mark.parametrize("boundary_end", ["terminated", "truncated", "none"])
def test_episode_end_on_unroll_boundary(boundary_end):
  """An episode ends on the transition into step T, the shared step."""
  num_steps, gamma, lam = 4, 0.9, 0.8
  steps = 2 * num_steps + 1
  rng = np.random.default_rng(2)
  traj = {
    "value": rng.normal(size=steps).astype(np.float32),
    "reward": rng.normal(size=steps).astype(np.float32),
    "terminated": np.zeros(steps, bool),
    "truncated": np.zeros(steps, bool),
    "bootstrap": np.zeros(steps, np.float32),
  }
  if boundary_end != "none":
    traj[boundary_end][num_steps] = True
  if boundary_end == "truncated":
    traj["bootstrap"][num_steps] = 5.0
  # A termination inside the second unroll as well.
  traj["terminated"][num_steps + 2] = True
  first, second = _split_trajectory(traj, num_steps)

  adv1, _ = gae_lib.unroll_gae(*first, gamma=gamma, lambda_=lam)
  adv2, _ = gae_lib.unroll_gae(*second, gamma=gamma, lambda_=lam)
  ref1, _ = reference_gae(*first, gamma, lam)
  ref2, _ = reference_gae(*second, gamma, lam)
  np.testing.assert_allclose(adv1.numpy(), ref1, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(adv2.numpy(), ref2, rtol=1e-5, atol=1e-5)

  # The last advantage of the first unroll, by hand.
  v, r = traj["value"], traj["reward"]
  last = num_steps - 1
  if boundary_end == "terminated":
    expected = r[num_steps] - v[last]
  elif boundary_end == "truncated":
    expected = r[num_steps] + gamma * 5.0 - v[last]
  else:
    expected = r[num_steps] + gamma * v[num_steps] - v[last]
  np.testing.assert_allclose(adv1.numpy()[last, 0], expected, rtol=1e-5)


def test_truncation_bootstraps_and_termination_does_not():
  values = np.array([[1.0], [2.0], [3.0]], np.float32)
  rewards = np.array([[0.5], [0.25]], np.float32)
  boot = np.array([[10.0], [0.0]], np.float32)
  gamma, lam = 0.5, 1.0
  adv_trunc, _ = gae_lib.unroll_gae(
    values, rewards, [[False], [False]], [[True], [False]], boot, gamma, lam
  )
  # Step 0 bootstraps from 10 (not V(x_1) = 2) and the trace stops there.
  np.testing.assert_allclose(
    adv_trunc.numpy()[:, 0], [0.5 + 0.5 * 10.0 - 1.0, 0.25 + 0.5 * 3.0 - 2.0]
  )
  adv_term, _ = gae_lib.unroll_gae(
    values, rewards, [[True], [False]], [[False], [False]], boot, gamma, lam
  )
  np.testing.assert_allclose(
    adv_term.numpy()[:, 0], [0.5 - 1.0, 0.25 + 0.5 * 3.0 - 2.0]
  )


def test_gae_carries_no_gradient():
  values = tf.Variable(np.ones((3, 2), np.float32))
  with tf.GradientTape() as tape:
    adv, ret = gae_lib.unroll_gae(
      values,
      np.ones((2, 2), np.float32),
      np.zeros((2, 2), bool),
      np.zeros((2, 2), bool),
      np.zeros((2, 2), np.float32),
      0.9,
      0.9,
    )
    total = tf.reduce_sum(adv) + tf.reduce_sum(ret)
  assert tape.gradient(total, values) is None


def test_gae_rejects_bad_inputs():
  with pytest.raises(ValueError, match="lambda_"):
    gae_lib.gae(
      np.zeros((2, 2)),
      np.zeros((2, 2)),
      np.zeros((2, 2)),
      np.zeros((2, 2)),
      np.zeros((2, 2)),
      1.5,
    )
  with pytest.raises(ValueError, match="rewards"):
    gae_lib.gae(
      np.zeros((3, 2)),
      np.zeros((2, 2)),
      np.zeros((2, 2)),
      np.zeros((2, 2)),
      np.zeros((2, 2)),
      0.9,
    )
  with pytest.raises(ValueError, match="time-major"):
    gae_lib.gae(
      np.zeros(2),
      np.zeros((2, 2)),
      np.zeros((2, 2)),
      np.zeros((2, 2)),
      np.zeros((2, 2)),
      0.9,
    )
