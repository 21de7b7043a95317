"""Tests for the DQN family: targets, networks, config and agent."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents.dqn import agent as agent_lib
from seed_rl.agents.dqn import networks
from seed_rl.agents.dqn import targets
from seed_rl.agents.dqn.config import DQNConfig
from seed_rl.networks import mlp_torso
from seed_rl.common import transitions
from seed_rl.common.agent_api import Unroll
from seed_rl.common.specs import ArraySpec

from tests.support.helpers import (
  act_inputs,
  checkpoint_round_trip,
  gin_file_parsed,
)

EPS = 1e-3


# ------------------------------------------------ NumPy reference targets ---


def _h(x):
  """Pohlen et al. 2018, Eq. (1)."""
  x = np.asarray(x, np.float64)
  return np.sign(x) * (np.sqrt(np.abs(x) + 1.0) - 1.0) + EPS * x


def _h_inv(y):
  """Pohlen et al. 2018, Prop. A.2."""
  y = np.asarray(y, np.float64)
  root = np.sqrt(1.0 + 4.0 * EPS * (np.abs(y) + 1.0 + EPS))
  return np.sign(y) * (((root - 1.0) / (2.0 * EPS)) ** 2 - 1.0)


def reference_targets(
  reward,
  terminated,
  truncated,
  bootstrap_value,
  online_q,
  target_q,
  gamma,
  n,
  double_q=True,
  rescale=False,
):
  """n-step (double) Q-learning targets with plain loops, time-major [T+1, B].

  For start t: G = sum_{k=1..m} gamma^(k-1) r[t+k] where m is n or the first
  k with an episode end at t+k; termination adds nothing, truncation adds
  gamma^k * bootstrap_value[t+k]; otherwise add gamma^n Q_target(o[t+n], a*)
  with a* = argmax Q_online(o[t+n]) (double) or max Q_target (not double).
  """
  steps, batch = reward.shape
  out = np.zeros((steps - n, batch))
  for b in range(batch):
    for t in range(steps - n):
      g, ended = 0.0, False
      for k in range(1, n + 1):
        g += gamma ** (k - 1) * float(reward[t + k, b])
        if terminated[t + k, b]:
          ended = True
          break
        if truncated[t + k, b]:
          g += gamma**k * float(bootstrap_value[t + k, b])
          ended = True
          break
      if not ended:
        if double_q:
          a_star = int(np.argmax(online_q[t + n, b]))
          q_next = float(target_q[t + n, b, a_star])
        else:
          q_next = float(np.max(target_q[t + n, b]))
        if rescale:
          q_next = _h_inv(q_next)
        g += gamma**n * q_next
      out[t, b] = _h(g) if rescale else g
  return out


def _random_case(seed, steps=12, batch=5, actions=3, p_end=0.15):
  rng = np.random.default_rng(seed)
  terminated = rng.random((steps, batch)) < p_end
  truncated = (rng.random((steps, batch)) < p_end) & ~terminated
  bootstrap = np.where(truncated, rng.normal(size=(steps, batch)) * 5, 0.0)
  return dict(
    reward=rng.normal(size=(steps, batch)).astype(np.float32),
    terminated=terminated,
    truncated=truncated,
    bootstrap_value=bootstrap.astype(np.float32),
    online_q=rng.normal(size=(steps, batch, actions)).astype(np.float32),
    target_q=rng.normal(size=(steps, batch, actions)).astype(np.float32) * 3,
  )


def _targets_via_transitions(case, gamma, n, double_q, rescale):
  returns, discount, index = transitions.nstep_transitions(
    case["reward"],
    case["terminated"],
    case["truncated"],
    case["bootstrap_value"],
    gamma,
    n,
  )
  cols = np.arange(returns.shape[1])[None, :]
  return targets.transition_targets(
    tf.constant(returns),
    tf.constant(discount),
    tf.constant(case["online_q"][index, cols]),
    tf.constant(case["target_q"][index, cols]),
    double_q=double_q,
    rescale=rescale,
    eps=EPS,
  ).numpy()


@pytest.mark.parametrize("n", [1, 3, 5])
@pytest.mark.parametrize("rescale", [False, True])
@pytest.mark.parametrize("double_q", [True, False])
def test_targets_match_numpy_reference(n, rescale, double_q):
  case = _random_case(seed=n * 7 + rescale)
  want = reference_targets(
    **case, gamma=0.9, n=n, double_q=double_q, rescale=rescale
  )
  got = _targets_via_transitions(case, 0.9, n, double_q, rescale)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_targets_end_inside_the_window_by_hand():
  """One env, n = 3, gamma = 0.5; an end at every offset of the window."""
  r = np.array([0, 1, 2, 4, 8, 16, 32], np.float32)[:, None]
  term = np.zeros((7, 1), bool)
  trunc = np.zeros((7, 1), bool)
  term[2, 0] = True  # transition into step 2 terminated
  trunc[5, 0] = True  # transition into step 5 truncated, final obs worth 10
  bootstrap = np.zeros((7, 1), np.float32)
  bootstrap[5, 0] = 10.0
  q = np.zeros((7, 1, 2), np.float32)
  q[:, 0, 1] = 100.0  # any bootstrap from an observation adds 12.5
  case = dict(
    reward=r,
    terminated=term,
    truncated=trunc,
    bootstrap_value=bootstrap,
    online_q=q,
    target_q=q,
  )
  got = _targets_via_transitions(case, 0.5, 3, True, False)[:, 0]
  want = [
    1 + 0.5 * 2,  # t=0: ends by termination at 2
    2,  # t=1: ends at 2
    4 + 0.5 * 8 + 0.25 * 16 + 0.25 * 0.5 * 10,  # t=2: truncation at 5 (k=3)
    8 + 0.5 * 16 + 0.25 * 10,  # t=3: truncation at 5 (k=2)
  ]
  np.testing.assert_allclose(got, want, rtol=1e-6)
  # No end: bootstraps gamma^3 * 100 from step t+3.
  case.update(terminated=np.zeros_like(term), truncated=np.zeros_like(trunc))
  clean = _targets_via_transitions(case, 0.5, 3, True, False)[:, 0]
  np.testing.assert_allclose(clean[0], 1 + 1 + 1 + 12.5)


def test_targets_reject_bad_shapes():
  with pytest.raises(ValueError, match="unroll_length must be >= n_step"):
    transitions.nstep_transitions(
      np.zeros((3, 1)),
      np.zeros((3, 1), bool),
      np.zeros((3, 1), bool),
      np.zeros((3, 1)),
      0.9,
      3,
    )
  with pytest.raises(ValueError, match="terminated"):
    transitions.nstep_transitions(
      np.zeros((5, 2)),
      np.zeros((5, 1), bool),
      np.zeros((5, 2), bool),
      np.zeros((5, 2)),
      0.9,
      2,
    )


# --------------------------------------------------------------- networks ---


@pytest.mark.parametrize("noisy", [None, "ig", "fg"])
def test_q_network_shapes_dueling_and_noise(noisy):
  obs_spec = ArraySpec((4,), "float32")
  net = networks.QNetwork(
    lambda: mlp_torso((8,)), 3, head_hidden=(6,), dueling=True, noisy=noisy
  )
  networks.build_q_network(net, obs_spec)
  x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
  q = net(x).numpy()
  assert q.shape == (5, 3)
  # Dueling identity: mean_a Q = V.
  features = net.torso(x)
  value = features
  for layer in net.value_stream:
    value = layer(value)
  np.testing.assert_allclose(
    q.mean(-1), value.numpy()[:, 0], rtol=1e-4, atol=1e-5
  )
  assert len(net.noisy_layers) == (0 if noisy is None else 4)
  if noisy:
    before = net(x).numpy()
    net.reset_noise()
    assert not np.allclose(before, net(x).numpy())
    np.testing.assert_array_equal(
      net(x, deterministic=True).numpy(), net(x, deterministic=True).numpy()
    )


# ------------------------------------------------------------------ config ---


@pytest.mark.parametrize(
  "kwargs, match",
  [
    (dict(unroll_length=2, n_step=3), "unroll_length"),
    (dict(noisy="fg"), "epsilon_start = epsilon_end = 0"),
    (dict(noisy="xg", epsilon_start=0.0, epsilon_end=0.0), "noisy must be"),
    (dict(min_replay_size=10, batch_size=32), "min_replay_size"),
    (dict(min_replay_size=100, replay_capacity=50), "never start"),
    (
      dict(rate_limiter_error_buffer=4.0, batch_size=32, min_replay_size=32),
      "deadlock",
    ),
    (dict(discount=-0.5), "discount"),
    (dict(samples_per_insert=0.0), "samples_per_insert"),
    (dict(n_step=0), "n_step"),
  ],
)
def test_config_validation(kwargs, match):
  with pytest.raises(ValueError, match=match):
    DQNConfig(**kwargs)


def test_config_overlap_is_n_step():
  assert DQNConfig(n_step=5, unroll_length=8).unroll_overlap == 5


# ------------------------------------------------------------------- agent ---

OBS = ArraySpec((4,), "float32", name="observation")
ACT = ArraySpec((), "int32", name="action", num_values=2)


def _config(**kwargs):
  base = dict(
    torso=lambda: mlp_torso((16,)),
    head_hidden=(),
    n_step=2,
    discount=0.5,
    unroll_length=5,
    min_replay_size=8,
    batch_size=8,
    samples_per_insert=1000.0,
    rate_limiter_error_buffer=1e9,
    replay_capacity=1000,
    seed=0,
    learning_rate=1e-3,
  )
  base.update(kwargs)
  return DQNConfig(**base)


def _unroll(
  observation, reward, terminated, truncated, bootstrap, action, version=None
):
  b, t1 = reward.shape
  return Unroll(
    env_ids=np.arange(b, dtype=np.int32),
    observation=observation.astype(np.float32),
    reward=reward.astype(np.float32),
    terminated=terminated,
    truncated=truncated,
    bootstrap_value=bootstrap.astype(np.float32),
    prev_action=np.zeros((b, t1), np.int32),
    action=action.astype(np.int32),
    value=np.zeros((b, t1), np.float32),
    extras={},
    core_state=(),
    policy_version=(
      np.zeros((b, t1), np.int64) if version is None else version
    ),
  )


def _hand_unroll():
  """Two envs, 6 steps; observation[b, t] = [b, t, 0, 0]."""
  b, t1 = 2, 6
  obs = np.zeros((b, t1, 4))
  obs[:, :, 0] = np.arange(b)[:, None]
  obs[:, :, 1] = np.arange(t1)[None, :]
  reward = np.stack([np.arange(t1) + 1.0, np.ones(t1)])
  terminated = np.zeros((b, t1), bool)
  truncated = np.zeros((b, t1), bool)
  bootstrap = np.zeros((b, t1))
  terminated[0, 3] = True
  truncated[1, 2] = True
  bootstrap[1, 2] = 10.0
  action = np.tile(np.array([0, 1, 0, 1, 0, 1]), (b, 1))
  return _unroll(obs, reward, terminated, truncated, bootstrap, action)


def test_transitions_extracted_by_hand():
  agent = agent_lib.DQNAgent(OBS, ACT, 2, _config())
  items = agent.unrolls_to_transitions(_hand_unroll())
  # (env, start, action, return, discount, next step) with n=2, gamma=0.5.
  expected = [
    (0, 0, 0, 2 + 0.5 * 3, 0.25, 2),
    (0, 1, 1, 3 + 0.5 * 4, 0.0, 3),  # terminated at 3
    (0, 2, 0, 4, 0.0, 3),  # terminated at 3
    (0, 3, 1, 5 + 0.5 * 6, 0.25, 5),  # new episode from step 3
    (1, 0, 0, 1 + 0.5 * 1 + 0.25 * 10, 0.0, 2),  # truncated at 2, bv 10
    (1, 1, 1, 1 + 0.5 * 10, 0.0, 2),
    (1, 2, 0, 1 + 0.5, 0.25, 4),
    (1, 3, 1, 1 + 0.5, 0.25, 5),
  ]
  assert items["action"].shape == (8,)
  for i, (env, start, action, ret, disc, nxt) in enumerate(expected):
    np.testing.assert_array_equal(items["observation"][i], [env, start, 0, 0])
    assert items["action"][i] == action
    assert items["return"][i] == pytest.approx(ret)
    assert items["discount"][i] == pytest.approx(disc)
    if disc:
      np.testing.assert_array_equal(
        items["next_observation"][i], [env, nxt, 0, 0]
      )


def _chain_trajectory(rng, num_envs, length, chain=3):
  """SEED-semantics steps of a chain MDP under a random policy.

  States 0..chain-1, one-hot observations. Action 1 moves right; stepping
  off the end pays 1 and terminates. Action 0 pays 0 and terminates with
  probability 1/2, else is truncated (bootstrap value 0.25). Q*(s, 1) =
  gamma^(chain-1-s) for gamma > 0.5.
  """
  obs = np.zeros((num_envs, length, 4), np.float32)
  reward = np.zeros((num_envs, length), np.float32)
  terminated = np.zeros((num_envs, length), bool)
  truncated = np.zeros((num_envs, length), bool)
  bootstrap = np.zeros((num_envs, length), np.float32)
  action = rng.integers(0, 2, (num_envs, length))
  for b in range(num_envs):
    state = 0
    for t in range(length):
      obs[b, t, state] = 1.0
      if t + 1 == length:
        break
      if action[b, t] == 1:
        state += 1
        if state == chain:
          reward[b, t + 1], terminated[b, t + 1], state = 1.0, True, 0
      elif rng.random() < 0.5:
        terminated[b, t + 1], state = True, 0
      else:
        truncated[b, t + 1], bootstrap[b, t + 1], state = True, 0.25, 0
  return obs, reward, terminated, truncated, bootstrap, action


def _cut(trajectory, unroll_length, overlap):
  """Unrolls of T+1 steps, consecutive ones sharing `overlap` steps."""
  length = trajectory[0].shape[1]
  stride = unroll_length + 1 - overlap
  for start in range(0, length - unroll_length, stride):
    window = slice(start, start + unroll_length + 1)
    yield _unroll(*(x[:, window] for x in trajectory))


def test_overlap_extracts_every_transition_exactly_once():
  cfg = _config(n_step=3, unroll_length=6)
  agent = agent_lib.DQNAgent(OBS, ACT, 2, cfg)
  trajectory = _chain_trajectory(np.random.default_rng(1), 2, 5 * 4 + 3)
  whole = agent_lib.DQNAgent(OBS, ACT, 2, _config(n_step=3, unroll_length=22))
  want = whole.unrolls_to_transitions(_unroll(*trajectory))
  parts = [
    agent.unrolls_to_transitions(u)
    for u in _cut(trajectory, cfg.unroll_length, agent.unroll_overlap)
  ]
  assert len(parts) == 5
  for key in want:
    got = np.concatenate(
      [p[key].reshape((2, 4) + p[key].shape[1:]) for p in parts], axis=1
    )
    np.testing.assert_allclose(got.reshape(want[key].shape), want[key])


def _fill(agent, num_unrolls=3, seed=0):
  stride = agent.unroll_length + 1 - agent.unroll_overlap
  trajectory = _chain_trajectory(
    np.random.default_rng(seed), 2, stride * num_unrolls + agent.unroll_overlap
  )
  for unroll in _cut(trajectory, agent.unroll_length, agent.unroll_overlap):
    agent.add_unrolls(unroll)


@pytest.mark.parametrize(
  "extra",
  [
    dict(),
    dict(noisy="ig", epsilon_start=0.0, epsilon_end=0.0),
    dict(
      value_rescaling=True, prioritized=False, dueling=False, huber_loss=False
    ),
  ],
)
def test_train_step_finite_and_updates_priorities(extra):
  agent = agent_lib.DQNAgent(OBS, ACT, 2, _config(**extra))
  _fill(agent)
  assert len(agent.replay) == 2 * 4 * 3
  metrics = agent.train_step()
  for name in (
    "loss/td",
    "replay/size",
    "replay/importance_sampling_exponent",
    "policy/epsilon",
    "perf/policy_lag",
    "grad/norm",
  ):
    assert np.isfinite(metrics[name]), name
  assert metrics["replay/size"] == 24
  assert int(agent.step_counter.numpy()) == 1
  if agent.config.prioritized:
    # Inserted at priority 1 (^alpha = 1); sampled ones now hold |td| + eps.
    tree = agent.replay._tree
    assert np.sum(tree.get(np.arange(24)) != 1.0) >= 1


def test_priorities_equal_abs_td_error():
  agent = agent_lib.DQNAgent(OBS, ACT, 2, _config(priority_exponent=1.0))
  _fill(agent)
  recorded = {}
  update = agent.replay.update_priorities

  def spy(keys, priorities):
    recorded["keys"], recorded["priorities"] = keys, priorities
    update(keys, priorities)

  agent.replay.update_priorities = spy
  agent.train_step()
  tree = agent.replay._tree
  slots = recorded["keys"] % agent.replay.capacity
  np.testing.assert_allclose(tree.get(slots), recorded["priorities"])
  assert np.all(recorded["priorities"] > 0)


def test_target_sync_period():
  agent = agent_lib.DQNAgent(OBS, ACT, 2, _config(target_update_period=2))
  _fill(agent)

  def same():
    return all(
      np.array_equal(t.numpy(), o.numpy())
      for t, o in zip(
        agent.target_network.trainable_variables,
        agent.online_network.trainable_variables,
      )
    )

  assert same()  # synced at construction
  agent.train_step()
  assert not same()
  agent.train_step()
  assert same()


def test_act_epsilon_greedy_eval_and_value():
  agent = agent_lib.DQNAgent(OBS, ACT, 64, _config(value_rescaling=True))
  rng = np.random.default_rng(0)
  obs = rng.normal(size=(64, 4)).astype(np.float32)
  eval_mask = np.arange(64) % 2 == 0
  inputs = act_inputs(obs, ACT, eval_mask=eval_mask)
  out = agent.act(inputs)
  q = agent.online_network(obs).numpy()
  assert out.action.dtype == np.int32 and out.extras == {}
  np.testing.assert_array_equal(out.action[eval_mask], q.argmax(-1)[eval_mask])
  # Epsilon is 1 at step 0: training rows are uniform over both actions.
  explore = np.concatenate(
    [agent.act(inputs).action[~eval_mask] for _ in range(20)]
  )
  assert 0.4 < explore.mean() < 0.6
  assert agent.epsilon(0) == 1.0
  assert agent.epsilon(10**9) == pytest.approx(agent.config.epsilon_end)
  total = agent.config.total_learner_steps
  assert agent.importance_sampling_exponent(0) == pytest.approx(0.4)
  assert agent.importance_sampling_exponent(total // 2) == pytest.approx(0.7)
  assert agent.importance_sampling_exponent(2 * total) == 1.0
  np.testing.assert_allclose(out.value, _h_inv(q.max(-1)), rtol=1e-4, atol=1e-5)


def test_checkpoint_round_trip(tmp_path):
  cfg = _config(noisy="fg", epsilon_start=0.0, epsilon_end=0.0)
  agent = agent_lib.DQNAgent(OBS, ACT, 2, cfg)
  _fill(agent)
  for _ in range(3):
    agent.train_step()
  restored = checkpoint_round_trip(
    agent, lambda: agent_lib.DQNAgent(OBS, ACT, 2, cfg), tmp_path
  )
  assert int(restored.step_counter.numpy()) == 3
  assert int(restored.checkpoint_objects()["optimizer"].iterations) == 3
  # The restored networks compute with the restored weights.
  x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
  for net in ("online_network", "target_network"):
    np.testing.assert_allclose(
      getattr(restored, net)(x, deterministic=True).numpy(),
      getattr(agent, net)(x, deterministic=True).numpy(),
    )


class _ListTorso(keras.layers.Layer):
  """Keeps its layers in a Python list, like a conv stack often does."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.stack = [
      keras.layers.Dense(8, activation="relu"),
      keras.layers.Dense(8, activation="relu"),
    ]

  def call(self, x):
    for layer in self.stack:
      x = layer(x)
    return x


def test_checkpoint_restores_target_with_list_torso(tmp_path):
  cfg = _config(torso=_ListTorso, target_update_period=1000)
  agent = agent_lib.DQNAgent(OBS, ACT, 2, cfg)
  for variable in agent.target_network.trainable_variables:
    variable.assign(variable + 1.0)  # target != online, != a fresh init
  path = tf.train.Checkpoint(**agent.checkpoint_objects()).save(
    str(tmp_path / "ckpt")
  )
  restored = agent_lib.DQNAgent(OBS, ACT, 2, cfg)
  tf.train.Checkpoint(**restored.checkpoint_objects()).restore(path)
  for mine, theirs in zip(
    restored.target_network.trainable_variables,
    agent.target_network.trainable_variables,
  ):
    np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


def test_stop_unblocks_train_step():
  agent = agent_lib.DQNAgent(OBS, ACT, 2, _config(min_replay_size=100))
  agent.stop()
  assert agent.train_step() == {}


def test_bad_unroll_rejected():
  agent = agent_lib.DQNAgent(OBS, ACT, 2, _config())
  unroll = _hand_unroll()
  unroll.action[0, 0] = 5
  with pytest.raises(ValueError, match=r"action: values must lie in \[0, 2\)"):
    agent.add_unrolls(unroll)
  unroll = _hand_unroll()
  unroll.reward = unroll.reward[:, :4]
  with pytest.raises(ValueError, match="Unroll.reward: shape"):
    agent.add_unrolls(unroll)
  with pytest.raises(ValueError, match="discrete"):
    agent_lib.DQNAgent(OBS, ArraySpec((2,), "float32"), 2, _config())


def test_atari_frames_stored_once_through_the_agent():
  """A uint8 [H, W, k] spec as the wire gives it (dtype by name, as every
  ArraySpec holds it) with store_frames_once (seed_rl/atari/gin/dqn.gin):
  the agent starts, its replay holds frame blocks instead of stacks, and a
  train step on them is finite. That rebuilt stacks equal the originals is
  tested on TransitionReplay itself (test_frames.py)."""

  def flat_torso():
    return keras.Sequential(
      [keras.layers.Flatten(), keras.layers.Dense(8, activation="relu")]
    )

  spec = ArraySpec((3, 3, 4), np.dtype(np.uint8), name="frames")
  assert spec.dtype == "uint8"
  agent = agent_lib.DQNAgent(
    spec, ACT, 2, _config(torso=flat_torso, store_frames_once=True)
  )
  rng = np.random.default_rng(0)
  b, t1 = 2, 6
  raw = rng.integers(1, 255, (b, t1, 3, 3)).astype(np.uint8)
  obs = np.zeros((b, t1, 3, 3, 4), np.uint8)
  for i in range(b):
    stack = np.zeros((3, 3, 4), np.uint8)
    for t in range(t1):  # newest frame last, as the runtime stacks
      stack = np.concatenate([stack[..., 1:], raw[i, t][..., None]], -1)
      obs[i, t] = stack
  zeros = np.zeros((b, t1), bool)
  unroll = _unroll(
    obs,
    rng.normal(size=(b, t1)),
    zeros,
    zeros,
    np.zeros((b, t1)),
    rng.integers(0, 2, (b, t1)),
  )
  unroll.observation = obs  # _unroll casts to float32; keep the frames
  for _ in range(3):
    agent.add_unrolls(unroll)
  stored = agent.replay._storage
  assert "observation" not in stored and "block" in stored
  metrics = agent.train_step()
  assert np.isfinite(metrics["loss/td"])


def test_learns_chain_mdp():
  """A few seconds of training recovers Q*(s, right) = gamma^(2-s).

  One-step targets: n-step returns without off-policy correction would learn
  the random behaviour policy's values instead of Q*.
  """
  cfg = _config(
    n_step=1,
    discount=0.9,
    unroll_length=8,
    batch_size=32,
    min_replay_size=32,
    learning_rate=3e-3,
    target_update_period=20,
    torso=lambda: mlp_torso((32,)),
    replay_capacity=5000,
  )
  agent = agent_lib.DQNAgent(OBS, ACT, 4, cfg)
  trajectory = _chain_trajectory(np.random.default_rng(3), 4, 8 * 40 + 1)
  for unroll in _cut(trajectory, cfg.unroll_length, agent.unroll_overlap):
    agent.add_unrolls(unroll)
  for _ in range(600):
    agent.train_step()
  q = agent.online_network(np.eye(4, dtype=np.float32)[:3]).numpy()
  np.testing.assert_allclose(q[:, 1], [0.81, 0.9, 1.0], atol=0.08)
  # Action 0: reward 0, then 0.25 bootstrap at truncation half the time.
  np.testing.assert_allclose(q[:, 0], [0.1125] * 3, atol=0.08)


@pytest.mark.parametrize("env", ["classic", "atari"])
def test_gin_files_parse_into_a_valid_config(env):
  with gin_file_parsed(env, "dqn"):
    config = DQNConfig()
  assert config.dueling and config.double_q and config.n_step == 3
  assert config.unroll_overlap == 3


def test_a_checkpoint_with_replay_resumes_training_where_it_was(tmp_path):
  """LearnerConfig.checkpoint_replay: a fresh agent restored from the
  checkpoint trains on the same prioritized samples to the same loss."""
  from seed_rl.common.checkpoints import Checkpointer

  agent = agent_lib.DQNAgent(OBS, ACT, 2, _config(min_replay_size=20))
  _fill(agent, num_unrolls=6)
  agent.train_step()
  directory = str(tmp_path / "checkpoints")
  Checkpointer(directory, agent.checkpoint_objects(), replay=agent).save(1)
  fresh = agent_lib.DQNAgent(OBS, ACT, 2, _config(min_replay_size=20, seed=4))
  Checkpointer(directory, fresh.checkpoint_objects(), replay=fresh).restore()
  assert len(fresh.replay) == len(agent.replay) > 20
  expected, resumed = agent.train_step(), fresh.train_step()
  for name in ("loss/td", "q/mean"):
    assert resumed[name] == expected[name], name
