"""Tests for the R2D2 agent: targets, burn-in, priorities, exploration,
network, frame storage and the agent on hand-built unrolls."""

from __future__ import annotations

from tests.support import ROOT
import dataclasses
import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gin
import keras
import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents import exploration
from seed_rl.common import frames as frames_lib
from seed_rl.agents import q_learning
from seed_rl.agents.r2d2 import loss as loss_lib
from seed_rl.agents.r2d2 import networks
from seed_rl.agents.r2d2 import targets
from seed_rl.agents.r2d2.agent import Q_ACTION, R2D2Agent
from seed_rl.agents.r2d2.config import R2D2Config
from seed_rl.common.agent_api import ActInputs, Unroll
from seed_rl.common.specs import ArraySpec

EPS = 1e-3

# ---- independent NumPy references (R2D2 Sec. 2.3; Pohlen et al. 2018) ----


def h_ref(x, eps=EPS):
  """h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x, scalar."""
  return math.copysign(math.sqrt(abs(x) + 1.0) - 1.0, x) + eps * x


def h_inv_ref(y, eps=EPS):
  """Pohlen et al. 2018, Prop. A.2, scalar."""
  root = math.sqrt(1.0 + 4.0 * eps * (abs(y) + 1.0 + eps))
  return math.copysign(((root - 1.0) / (2.0 * eps)) ** 2 - 1.0, y)


def targets_ref(
  reward, terminated, truncated, bootstrap_value, q_online, q_target, gamma, n
):
  """y_t for t in [0, T - n), time-major [T, B] inputs, plain loops.

  The action at step t earns reward[t+1]; an episode end at j in (t, t+n]
  stops the sum; termination bootstraps nothing, truncation bootstraps the
  final observation's value; otherwise double-Q at step t+n.
  """
  steps, batch = reward.shape
  out = np.zeros((steps - n, batch))
  for b in range(batch):
    for t in range(steps - n):
      total = 0.0
      boot = None
      for k in range(1, n + 1):
        j = t + k
        total += gamma ** (k - 1) * reward[j, b]
        if terminated[j, b]:
          boot = 0.0
          break
        if truncated[j, b]:
          boot = gamma**k * h_inv_ref(bootstrap_value[j, b])
          break
      if boot is None:
        best = int(np.argmax(q_online[t + n, b]))
        boot = gamma**n * h_inv_ref(q_target[t + n, b, best])
      out[t, b] = h_ref(total + boot)
  return out


def priorities_ref(abs_td, eta):
  out = []
  for b in range(abs_td.shape[1]):
    column = [abs_td[t, b] for t in range(abs_td.shape[0])]
    out.append(eta * max(column) + (1 - eta) * sum(column) / len(column))
  return np.array(out)


def _random_episode_data(rng, steps, batch, actions, p_end=0.15):
  reward = rng.normal(size=(steps, batch)).astype(np.float32) * 3
  terminated = rng.random((steps, batch)) < p_end
  truncated = rng.random((steps, batch)) < p_end
  bootstrap_value = np.where(
    truncated, rng.normal(size=(steps, batch)) * 2, 0
  ).astype(np.float32)
  q_online = rng.normal(size=(steps, batch, actions)).astype(np.float32)
  q_target = rng.normal(size=(steps, batch, actions)).astype(np.float32) * 2
  return reward, terminated, truncated, bootstrap_value, q_online, q_target


def _tf_targets(
  reward, terminated, truncated, bootstrap_value, q_online, q_target, gamma, n
):
  next_value = q_learning.double_q_values(
    tf.constant(q_online), tf.constant(q_target)
  )
  return targets.n_step_targets(
    tf.constant(reward),
    tf.constant(terminated),
    tf.constant(truncated),
    tf.constant(bootstrap_value),
    next_value,
    gamma,
    n,
    EPS,
  ).numpy()


# ---- targets -------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 5])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_n_step_targets_match_reference(n, dtype):
  rng = np.random.default_rng(n)
  data = list(_random_episode_data(rng, steps=12, batch=6, actions=3))
  # Also both flags at once (termination wins) and ends at the last step.
  data[1][-1, 0] = data[2][-1, 0] = True
  data[2][-1, 1], data[1][-1, 1] = True, False
  data[3][-1, 1] = 4.0
  for i in (0, 3, 4, 5):
    data[i] = data[i].astype(dtype)
  got = _tf_targets(*data, 0.97, n)
  want = targets_ref(*data, 0.97, n)
  # float32: h^-1 amplifies rounding by up to ~1/(2 eps) at large |y|.
  tol = 1e-10 if dtype == np.float64 else 1e-4
  np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_n_step_targets_hand_computed_cases():
  g = 0.5
  steps, n = 4, 2
  reward = np.array(
    [[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [9, 9, 9, 9]], np.float32
  )
  terminated = np.zeros((steps, 4), bool)
  truncated = np.zeros((steps, 4), bool)
  bootstrap_value = np.zeros((steps, 4), np.float32)
  q_online = np.zeros((steps, 4, 2), np.float32)
  q_online[..., 1] = 1.0  # online picks action 1 ...
  q_target = np.zeros((steps, 4, 2), np.float32)
  q_target[..., 0] = 100.0  # ... so the target's larger action 0 is unused
  q_target[..., 1] = 3.0
  terminated[1, 1] = True  # column 1: the first transition terminates
  truncated[2, 2] = True  # column 2: the second transition truncates
  bootstrap_value[2, 2] = 5.0
  terminated[2, 3] = truncated[2, 3] = True  # column 3: both (termination)
  y = _tf_targets(
    reward, terminated, truncated, bootstrap_value, q_online, q_target, g, n
  )[0]
  np.testing.assert_allclose(
    y[0], h_ref(1 + g * 2 + g**2 * h_inv_ref(3.0)), rtol=1e-6
  )
  np.testing.assert_allclose(y[1], h_ref(1.0), rtol=1e-6)
  np.testing.assert_allclose(
    y[2], h_ref(1 + g * 2 + g**2 * h_inv_ref(5.0)), rtol=1e-6
  )
  np.testing.assert_allclose(y[3], h_ref(1 + g * 2), rtol=1e-6)


def test_sequence_priorities_formula():
  abs_td = np.abs(np.random.default_rng(0).normal(size=(7, 5)))
  got = targets.sequence_priorities(tf.constant(abs_td), 0.9).numpy()
  np.testing.assert_allclose(got, priorities_ref(abs_td, 0.9), rtol=1e-6)


# ---- exploration ---------------------------------------------------------


def test_per_env_epsilons_formula():
  n = 6
  got = exploration.per_env_epsilons(n)
  want = [0.4 ** (1 + 7 * i / (n - 1)) for i in range(n)]
  np.testing.assert_allclose(got, want, rtol=1e-12)
  assert got[0] == pytest.approx(0.4) and got[-1] == pytest.approx(0.4**8)
  np.testing.assert_allclose(exploration.per_env_epsilons(1), [0.4])
  table = exploration.per_env_epsilons(4, base=0.1, alpha=3.0)
  eps = exploration.env_epsilons(
    table, np.array([3, 0, 7]), np.array([False, False, True]), 1e-3
  )
  np.testing.assert_allclose(eps, [0.1**4, 0.1, 1e-3])
  with pytest.raises(ValueError, match=r"training env ids \[4\]"):
    exploration.env_epsilons(table, np.array([4]), np.array([False]), 1e-3)


def test_epsilon_warm_up_from_one_to_the_ape_x_values():
  table = exploration.per_env_epsilons(4)
  # Written from eps_i(t) = e_i + (1 - e_i) * max(0, 1 - t / W), W = 100.
  for step, left in [(0, 1.0), (25, 0.75), (50, 0.5), (100, 0.0), (500, 0.0)]:
    want = [e + (1 - e) * left for e in table]
    got = exploration.warmed_up(table, step, 100)
    np.testing.assert_allclose(got, want, rtol=1e-12)
  np.testing.assert_array_equal(exploration.warmed_up(table, 0, 0), table)


def test_agent_explores_uniformly_at_first_with_a_warm_up():
  agent = R2D2Agent(OBS, ACTIONS, 5, _config(epsilon_warmup_steps=1000))
  n = 4000
  rng = np.random.default_rng(3)
  env_ids = np.full(n, 4, np.int32)  # the greediest env: 0.4 ** 8
  inputs = ActInputs(
    env_ids=env_ids,
    observation=np.repeat(rng.normal(size=(1, 4)), n, 0).astype(np.float32),
    prev_action=np.zeros(n, np.int64),
    reward=np.zeros(n, np.float32),
    done=np.ones(n, bool),
    core_state=agent.initial_core_state(n),
    eval_mask=np.zeros(n, bool),
  )
  out = agent.act(inputs)
  # Learner step 0: epsilon 1, each of the 3 actions ~1/3 of the time,
  # where the Ape-X epsilon alone would give the greedy one ~always.
  counts = np.bincount(out.action, minlength=3) / n
  np.testing.assert_allclose(counts, 1 / 3, atol=0.03)
  evals = agent.act(dataclasses.replace(inputs, eval_mask=np.ones(n, bool)))
  assert np.bincount(evals.action, minlength=3).max() / n > 0.99
  with pytest.raises(ValueError, match="epsilon_warmup_steps"):
    _config(epsilon_warmup_steps=-1)


def test_epsilon_greedy_rates():
  rng = np.random.default_rng(0)
  greedy = np.zeros(20000, np.int64)
  assert np.all(
    exploration.epsilon_greedy(greedy, 4, np.zeros(20000), rng) == 0
  )
  # epsilon 0.4: a non-greedy action with probability 0.4 * 3/4 = 0.3.
  acts = exploration.epsilon_greedy(greedy, 4, np.full(20000, 0.4), rng)
  assert abs(np.mean(acts != 0) - 0.3) < 0.015  # ~5 standard deviations


# ---- network and burn-in ----------------------------------------------------


def _tiny_torso():
  return keras.Sequential([keras.layers.Dense(8, activation="tanh")])


def _network(seed=0, num_actions=3):
  keras.utils.set_random_seed(seed)
  net = networks.R2D2Network(_tiny_torso, num_actions, 6, (5,))
  networks.build_network(net, ArraySpec((4,), "float32"))
  return net


def _sequence_inputs(rng, steps, batch, num_actions=3):
  obs = tf.constant(rng.normal(size=(steps, batch, 4)).astype(np.float32))
  prev_action = tf.constant(rng.integers(0, num_actions, (steps, batch)))
  reward = tf.constant(rng.normal(size=(steps, batch)).astype(np.float32))
  done = tf.constant(rng.random((steps, batch)) < 0.2)
  state = tuple(
    tf.constant(rng.normal(size=(batch, 6)).astype(np.float32))
    for _ in range(2)
  )
  return obs, prev_action, reward, done, state


def test_network_step_equals_unroll_and_resets_at_done():
  net = _network()
  rng = np.random.default_rng(1)
  obs, prev_action, reward, done, state = _sequence_inputs(rng, 7, 3)
  done = tf.constant(
    np.array(
      [
        [0, 0, 0],
        [0, 1, 0],
        [0, 0, 0],
        [0, 0, 0],
        [1, 0, 0],
        [0, 0, 0],
        [0, 0, 1],
      ],
      bool,
    )
  )
  q_unroll, final = net.unroll(obs, prev_action, reward, done, state)
  s = state
  for t in range(7):
    q_t, s = net.step(obs[t], prev_action[t], reward[t], done[t], s)
    np.testing.assert_allclose(q_t.numpy(), q_unroll[t].numpy(), atol=1e-5)
  np.testing.assert_allclose(final[0].numpy(), s[0].numpy(), atol=1e-5)
  # From a done step on, the past (state and the ended episode's reward) is
  # forgotten: the same as starting there from zeros.
  other_state = tuple(tf.ones_like(x) * 3 for x in state)
  other_reward = tf.tensor_scatter_nd_update(reward, [[4, 0]], [50.0])
  q_other, _ = net.unroll(obs, prev_action, other_reward, done, other_state)
  np.testing.assert_allclose(
    q_other[4:, 0].numpy(), q_unroll[4:, 0].numpy(), atol=1e-5
  )
  assert not np.allclose(q_other[:4, 0].numpy(), q_unroll[:4, 0].numpy())


def _loss_kwargs(burn_in, n_step=2):
  return dict(
    burn_in=burn_in, n_step=n_step, discount=0.9, eta=0.9, rescaling_epsilon=EPS
  )


def _sequences(rng, steps, batch, num_actions=3):
  obs, prev_action, reward, done, state = _sequence_inputs(
    rng, steps, batch, num_actions
  )
  del done
  terminated = tf.constant(rng.random((steps, batch)) < 0.15)
  truncated = tf.constant(rng.random((steps, batch)) < 0.15)
  return loss_lib.Sequences(
    obs,
    prev_action,
    tf.constant(rng.integers(0, num_actions, (steps, batch))),
    reward,
    terminated,
    truncated,
    tf.constant(rng.normal(size=(steps, batch)).astype(np.float32)),
    state,
  )


def test_burn_in_produces_no_gradients():
  online, target = _network(0), _network(1)
  seq = _sequences(np.random.default_rng(2), steps=9, batch=4)
  burn_in = 4
  weights = tf.ones([4])
  with tf.GradientTape(persistent=True) as tape:
    tape.watch([seq.observation, seq.reward, seq.core_state])
    loss, _, _ = loss_lib.r2d2_loss(
      online, target, seq, weights, **_loss_kwargs(burn_in)
    )
  grad_obs = tape.gradient(loss, seq.observation)
  grad_reward = tape.gradient(loss, seq.reward)
  grad_state = tape.gradient(loss, seq.core_state)
  grads = tape.gradient(loss, online.trainable_variables)
  assert np.all(grad_obs[:burn_in].numpy() == 0)
  assert np.any(grad_obs[burn_in:].numpy() != 0)
  assert np.all(grad_reward[:burn_in].numpy() == 0)
  for g in grad_state:
    assert g is None or np.all(g.numpy() == 0)
  # The parameter gradient equals that of a loss started, without burn-in,
  # from the burned-in state given as a constant.
  done = tf.logical_or(seq.terminated, seq.truncated)
  _, warm_online = online.unroll(
    seq.observation[:burn_in],
    seq.prev_action[:burn_in],
    seq.reward[:burn_in],
    done[:burn_in],
    seq.core_state,
  )
  _, warm_target = target.unroll(
    seq.observation[:burn_in],
    seq.prev_action[:burn_in],
    seq.reward[:burn_in],
    done[:burn_in],
    seq.core_state,
  )
  rest = [x[burn_in:] for x in seq[:-1]]
  obs, prev_action, action, reward, terminated, truncated, boot = rest
  with tf.GradientTape() as tape2:
    q_online, _ = online.unroll(
      obs, prev_action, reward, done[burn_in:], warm_online
    )
    q_target, _ = target.unroll(
      obs, prev_action, reward, done[burn_in:], warm_target
    )
    y = targets.n_step_targets(
      reward,
      terminated,
      truncated,
      boot,
      q_learning.double_q_values(tf.stop_gradient(q_online), q_target),
      0.9,
      2,
      EPS,
    )
    q_taken = tf.gather(
      q_online[:-2], tf.cast(action[:-2], tf.int32), axis=-1, batch_dims=2
    )
    loss2 = tf.reduce_mean(
      0.5 * tf.reduce_sum(tf.square(tf.stop_gradient(y) - q_taken), 0)
    )
  np.testing.assert_allclose(loss.numpy(), loss2.numpy(), rtol=1e-6)
  for g1, g2 in zip(grads, tape2.gradient(loss2, online.trainable_variables)):
    np.testing.assert_allclose(g1.numpy(), g2.numpy(), rtol=1e-5, atol=1e-7)


def test_loss_and_priorities_match_reference():
  online, target = _network(0), _network(1)
  rng = np.random.default_rng(3)
  seq = _sequences(rng, steps=10, batch=5)
  burn_in, n = 3, 2
  weights = tf.constant(rng.random(5).astype(np.float32))
  loss, priorities, metrics = loss_lib.r2d2_loss(
    online, target, seq, weights, **_loss_kwargs(burn_in, n)
  )
  done = tf.logical_or(seq.terminated, seq.truncated)
  q_on, _ = online.unroll(
    seq.observation, seq.prev_action, seq.reward, done, seq.core_state
  )
  q_tg, _ = target.unroll(
    seq.observation, seq.prev_action, seq.reward, done, seq.core_state
  )
  # Unrolling straight through equals burn-in + rest in the forward pass.
  sl = lambda x: np.asarray(x)[burn_in:]
  y = targets_ref(
    sl(seq.reward),
    sl(seq.terminated),
    sl(seq.truncated),
    sl(seq.bootstrap_value),
    sl(q_on),
    sl(q_tg),
    0.9,
    n,
  )
  actions = sl(seq.action)
  q_on_rest = sl(q_on)
  td = np.zeros_like(y)
  for t in range(y.shape[0]):
    for b in range(y.shape[1]):
      td[t, b] = y[t, b] - q_on_rest[t, b, actions[t, b]]
  want_loss = np.mean(weights.numpy() * 0.5 * (td**2).sum(0))
  np.testing.assert_allclose(loss.numpy(), want_loss, rtol=1e-4)
  np.testing.assert_allclose(
    priorities.numpy(), priorities_ref(np.abs(td), 0.9), rtol=1e-4
  )
  assert metrics["q/td_error"].numpy() == pytest.approx(
    np.abs(td).mean(), rel=1e-4
  )


# ---- frame storage ---------------------------------------------------------


def _stacked_frames(rng, batch, steps, depth, done, first_stack=None):
  """Stacks like the runtime: newest last, zeros before an episode start."""
  raw = rng.integers(1, 255, (batch, steps, 3, 3)).astype(np.uint8)
  obs = np.zeros((batch, steps, 3, 3, depth), np.uint8)
  for b in range(batch):
    stack = (
      np.zeros((3, 3, depth), np.uint8)
      if first_stack is None
      else first_stack[b].copy()
    )
    for t in range(steps):
      if done[b, t]:
        stack[:] = 0
      stack = np.concatenate([stack[..., 1:], raw[b, t][..., None]], -1)
      obs[b, t] = stack
  return obs


def test_frames_stored_once_roundtrip():
  rng = np.random.default_rng(4)
  done = rng.random((5, 9)) < 0.25
  done[0, 0] = True
  history = rng.integers(1, 255, (5, 3, 3, 4)).astype(np.uint8)
  obs = _stacked_frames(rng, 5, 9, 4, done, first_stack=history)
  frames, first = frames_lib.compress(obs)
  assert frames.nbytes * 4 == obs.nbytes
  np.testing.assert_array_equal(frames_lib.decompress(frames, first, done), obs)
  assert frames_lib.roundtrip_ok(obs, done).all()
  broken = obs.copy()
  broken[2, 5, 0, 0, 0] ^= 1  # an older slot that disagrees with its frame
  assert frames_lib.roundtrip_ok(broken, done).tolist() == [
    True,
    True,
    False,
    True,
    True,
  ]


# ---- the agent on hand-built unrolls -----------------------------------------

OBS = ArraySpec((4,), "float32", name="observation")
ACTIONS = ArraySpec((), "int64", name="action", num_values=3)


def _config(**overrides):
  kwargs = dict(
    unroll_length=8,
    burn_in=2,
    n_step=2,
    batch_size=4,
    replay_capacity=64,
    min_replay_size=4,
    samples_per_insert=1.0,
    # Single-threaded tests: neither insert nor sample may wait.
    rate_limiter_error_buffer=1000.0,
    lstm_units=6,
    head_hidden=(5,),
    target_update_period=3,
    torso=_tiny_torso,
    total_learner_steps=10,
    seed=0,
  )
  kwargs.update(overrides)
  return R2D2Config(**kwargs)


def _unrolls(rng, agent, batch, observation=None):
  t1 = agent.unroll_length + 1
  if observation is None:
    observation = rng.normal(size=(batch, t1, 4)).astype(np.float32)
  return Unroll(
    env_ids=np.arange(batch, dtype=np.int32),
    observation=observation,
    reward=rng.normal(size=(batch, t1)).astype(np.float32),
    terminated=rng.random((batch, t1)) < 0.1,
    truncated=rng.random((batch, t1)) < 0.1,
    bootstrap_value=rng.normal(size=(batch, t1)).astype(np.float32),
    prev_action=rng.integers(0, 3, (batch, t1)),
    action=rng.integers(0, 3, (batch, t1)),
    value=rng.normal(size=(batch, t1)).astype(np.float32),
    extras={Q_ACTION: rng.normal(size=(batch, t1)).astype(np.float32)},
    core_state=tuple(
      rng.normal(size=(batch, 6)).astype(np.float32) for _ in range(2)
    ),
    policy_version=np.zeros((batch, t1), np.int64),
  )


def _weights(net):
  return [w.numpy().copy() for w in net.weights]


def test_agent_act_shapes_and_epsilons():
  agent = R2D2Agent(OBS, ACTIONS, 5, _config())
  assert agent.unroll_overlap == 4  # burn_in + n_step
  np.testing.assert_allclose(agent.epsilons, exploration.per_env_epsilons(5))
  rng = np.random.default_rng(5)
  inputs = ActInputs(
    env_ids=np.array([0, 4, 9], np.int32),
    observation=rng.normal(size=(3, 4)).astype(np.float32),
    prev_action=np.array([0, 2, 1]),
    reward=np.zeros(3, np.float32),
    done=np.array([True, False, False]),
    core_state=agent.initial_core_state(3),
    eval_mask=np.array([False, False, True]),
  )
  out = agent.act(inputs)
  assert out.action.shape == (3,) and out.action.dtype == np.int64
  assert out.value.dtype == np.float32 and out.core_state[0].shape == (3, 6)
  assert np.all(out.extras[Q_ACTION] <= out.value + 1e-6)


def test_agent_initial_priorities_from_behaviour_values():
  agent = R2D2Agent(OBS, ACTIONS, 4, _config())
  u = _unrolls(np.random.default_rng(6), agent, 3)
  tm = lambda x: np.swapaxes(x, 0, 1)[2:]  # time-major, after burn-in
  value = tm(u.value)
  # The behaviour max-Q as double-Q bootstrap: a one-action "network".
  y = targets_ref(
    tm(u.reward),
    tm(u.terminated),
    tm(u.truncated),
    tm(u.bootstrap_value),
    value[..., None],
    value[..., None],
    agent.config.discount,
    2,
  )
  td = np.abs(y - tm(u.extras[Q_ACTION])[: y.shape[0]])
  np.testing.assert_allclose(
    agent.initial_priorities(u), priorities_ref(td, 0.9), rtol=1e-4
  )


def test_agent_trains_updates_priorities_and_syncs_target(tmp_path):
  agent = R2D2Agent(OBS, ACTIONS, 4, _config())
  rng = np.random.default_rng(7)
  agent.add_unrolls(_unrolls(rng, agent, 8))
  assert len(agent.replay) == 8
  updates = []
  original_update = agent.replay.update_priorities

  def record(indices, priorities):
    updates.append((np.array(indices), np.array(priorities)))
    original_update(indices, priorities)

  agent.replay.update_priorities = record
  online, target = agent.online_network, agent.target_network
  assert all(
    np.array_equal(a, b) for a, b in zip(_weights(online), _weights(target))
  )
  metrics = agent.train_step()
  for name in (
    "loss/td",
    "replay/size",
    "replay/mean_priority",
    "q/mean",
    "perf/policy_lag",
  ):
    assert np.isfinite(metrics[name]), name
  assert len(updates) == 1 and updates[0][1].shape == (4,)
  assert np.all(np.isfinite(updates[0][1])) and np.all(updates[0][1] > 0)
  assert not all(
    np.array_equal(a, b) for a, b in zip(_weights(online), _weights(target))
  )
  agent.train_step()
  assert not all(
    np.array_equal(a, b) for a, b in zip(_weights(online), _weights(target))
  )
  agent.train_step()  # step 3 = target_update_period
  assert int(agent.step_counter.numpy()) == 3
  assert all(
    np.array_equal(a, b) for a, b in zip(_weights(online), _weights(target))
  )

  # Checkpoint round trip into a fresh agent.
  path = tf.train.Checkpoint(**agent.checkpoint_objects()).save(
    str(tmp_path / "ckpt")
  )
  fresh = R2D2Agent(OBS, ACTIONS, 4, _config(seed=1))
  tf.train.Checkpoint(**fresh.checkpoint_objects()).restore(
    path
  ).assert_consumed()
  assert int(fresh.step_counter.numpy()) == 3
  for a, b in zip(_weights(online), _weights(fresh.online_network)):
    np.testing.assert_array_equal(a, b)
  for a, b in zip(_weights(target), _weights(fresh.target_network)):
    np.testing.assert_array_equal(a, b)
  for a, b in zip(agent.optimizer.variables, fresh.optimizer.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_agent_stores_stacked_frames_once():
  def flat_torso():
    return keras.Sequential(
      [keras.layers.Flatten(), keras.layers.Dense(8, activation="relu")]
    )

  spec = ArraySpec((3, 3, 4), "uint8", name="frames")
  agent = R2D2Agent(spec, ACTIONS, 4, _config(torso=flat_torso))
  rng = np.random.default_rng(8)
  u = _unrolls(rng, agent, 3, observation=np.zeros((3, 9, 3, 3, 4), np.uint8))
  done = u.terminated | u.truncated
  good = _stacked_frames(rng, 3, 9, 4, done)
  bad = good.copy()
  bad[1, 3, 0, 0, 0] ^= 1
  agent.add_unrolls(dataclasses.replace(u, observation=bad))
  assert len(agent.replay) == 2  # the inconsistent sequence was dropped
  _, items, _ = agent.replay.sample(16)
  assert "observation" not in items  # one [3, 3] frame per step instead
  assert items["frames"].shape == (16, 9, 3, 3)
  rebuilt = frames_lib.decompress(
    items["frames"],
    items["first_stack"],
    items["terminated"] | items["truncated"],
  )
  for b in range(16):
    row = [i for i in (0, 2) if np.array_equal(items["reward"][b], u.reward[i])]
    assert len(row) == 1
    np.testing.assert_array_equal(rebuilt[b], good[row[0]])
  agent.add_unrolls(dataclasses.replace(u, observation=good))
  assert np.isfinite(agent.train_step()["loss/td"])


def test_stop_unblocks_train_step():
  agent = R2D2Agent(OBS, ACTIONS, 4, _config())
  agent.stop()
  assert agent.train_step() == {}


# ---- configuration -----------------------------------------------------------


def test_config_validation_messages():
  with pytest.raises(ValueError, match="burn_in .* n_step .* unroll_length"):
    R2D2Config(unroll_length=10, burn_in=6, n_step=4)
  with pytest.raises(ValueError, match="min_replay_size"):
    R2D2Config(replay_capacity=10, min_replay_size=20)
  with pytest.raises(ValueError, match="discount"):
    R2D2Config(discount=-0.1)
  with pytest.raises(ValueError, match="scalar discrete"):
    R2D2Agent(OBS, ArraySpec((2,), "float32"), 4, _config())
  cfg = R2D2Config(
    importance_sampling_exponent=0.6,
    importance_sampling_exponent_final=1.0,
    total_learner_steps=100,
  )
  assert cfg.importance_sampling_exponent_at(50) == pytest.approx(0.8)
  assert cfg.importance_sampling_exponent_at(500) == pytest.approx(1.0)


@pytest.mark.parametrize("domain", ["classic", "atari"])
def test_gin_files_parse(domain):
  import importlib

  for module in (
    "seed_rl.common.learner",
    "seed_rl.networks.mlp",
    "seed_rl.networks.conv",
    f"seed_rl.{domain}.env",
  ):
    importlib.import_module(module)
  gin.clear_config()
  try:
    gin.parse_config_file(
      os.path.join(ROOT, "seed_rl", domain, "gin", "r2d2.gin")
    )
    cfg = R2D2Config()
    assert cfg.burn_in + cfg.n_step < cfg.unroll_length
  finally:
    gin.clear_config()


def test_a_checkpoint_with_replay_resumes_training_where_it_was(tmp_path):
  """LearnerConfig.checkpoint_replay: a fresh agent restored from the
  checkpoint trains at once (no new warm-up) on the same samples, to the
  same loss, as the agent that was saved."""
  from seed_rl.common.checkpoints import Checkpointer

  config = _config(min_replay_size=16, rate_limiter_error_buffer=8.0)
  agent = R2D2Agent(OBS, ACTIONS, 4, config)
  rng = np.random.default_rng(3)
  for _ in range(3):
    agent.add_unrolls(_unrolls(rng, agent, 8))
  agent.train_step()
  directory = str(tmp_path / "checkpoints")
  Checkpointer(directory, agent.checkpoint_objects(), replay=agent).save(24)

  fresh = R2D2Agent(OBS, ACTIONS, 4, dataclasses.replace(config, seed=9))
  assert len(fresh.replay) == 0
  Checkpointer(directory, fresh.checkpoint_objects(), replay=fresh).restore()
  assert len(fresh.replay) == len(agent.replay) == 24
  expected = agent.train_step()
  resumed = fresh.train_step()  # would wait for 16 new sequences if empty
  for name in ("loss/td", "replay/mean_priority", "q/mean"):
    assert resumed[name] == expected[name], name
  for a, b in zip(
    _weights(agent.online_network), _weights(fresh.online_network)
  ):
    np.testing.assert_array_equal(a, b)
