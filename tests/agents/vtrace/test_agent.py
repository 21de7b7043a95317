"""VtraceAgent against the Agent contract: act, queue, training, checkpoints."""

from __future__ import annotations

import os
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gin
import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents.vtrace.agent import VtraceAgent, create_agent
from seed_rl.agents.vtrace.agent import policy_distribution
from seed_rl.agents.vtrace.config import VtraceConfig
from seed_rl.agents import distributions
from seed_rl.common.agent_api import ActInputs, Unroll
from seed_rl.common.specs import ArraySpec

from tests.support import helpers

# Queue waits block forever on a bug; fail fast instead.
pytestmark = pytest.mark.timeout(60)

OBS_SPEC = ArraySpec((4,), "float32", "observation")
ACTION_SPEC = ArraySpec((), "int32", "action", num_values=2)


def small_config(**overrides):
  kwargs = dict(
    unroll_length=5,
    batch_size=4,
    queue_capacity=8,
    lr_schedule="constant",
    learning_rate=1e-2,
  )
  kwargs.update(overrides)
  return VtraceConfig(**kwargs)


def act_inputs(agent, observation, eval_mask=None, core_state=None):
  """helpers.act_inputs starting from the agent's initial core state."""
  if core_state is None:
    core_state = agent.initial_core_state(len(observation))
  return helpers.act_inputs(
    observation.astype(np.float32),
    ACTION_SPEC,
    eval_mask=eval_mask,
    core_state=core_state,
  )


def make_unroll(agent, batch, rng, policy_version=0):
  """Random CartPole-shaped unrolls with behaviour logits from act()."""
  t1 = agent.unroll_length + 1
  observation = rng.normal(size=[batch, t1, 4]).astype(np.float32)
  logits = np.stack(
    [
      agent.act(act_inputs(agent, observation[:, t])).extras["logits"]
      for t in range(t1)
    ],
    1,
  )
  terminated = rng.random([batch, t1]) < 0.1
  truncated = (rng.random([batch, t1]) < 0.1) & ~terminated
  action = rng.integers(0, 2, [batch, t1]).astype(np.int32)
  return Unroll(
    env_ids=np.arange(batch, dtype=np.int32),
    observation=observation,
    reward=np.ones([batch, t1], np.float32),
    terminated=terminated,
    truncated=truncated,
    bootstrap_value=np.where(truncated, 5.0, 0.0).astype(np.float32),
    prev_action=np.roll(action, 1, axis=1),
    action=action,
    value=np.zeros([batch, t1], np.float32),
    extras={"logits": logits},
    core_state=agent.initial_core_state(batch),
    policy_version=np.full([batch, t1], policy_version, np.int64),
  )


def weights(agent):
  return [v.numpy().copy() for v in agent.network.trainable_variables]


def test_config_validation_messages():
  with pytest.raises(ValueError, match="batch_size must be a positive"):
    VtraceConfig(batch_size=0)
  with pytest.raises(ValueError, match=r"discount must be in \[0, 1\]"):
    VtraceConfig(discount=1.5)
  with pytest.raises(
    ValueError, match=r"VtraceConfig.trace_lambda must be in \[0, 1\]"
  ):
    VtraceConfig(trace_lambda=-0.1)
  with pytest.raises(ValueError, match="clip_rho_threshold must be > 0"):
    VtraceConfig(clip_rho_threshold=-1.0)
  with pytest.raises(ValueError, match="optimizer 'sgd' is unknown"):
    VtraceConfig(optimizer="sgd")
  with pytest.raises(ValueError, match="reward_clipping 'sign' is unknown"):
    VtraceConfig(reward_clipping="sign")
  with pytest.raises(ValueError, match="queue_capacity .* must be >= "):
    VtraceConfig(batch_size=8, queue_capacity=4)
  with pytest.raises(
    ValueError,
    match="VtraceConfig.policy_loss 'ppo' is unknown; allowed: pg, clip",
  ):
    VtraceConfig(policy_loss="ppo")
  with pytest.raises(ValueError, match=r"clip_ratio must be in \(0, 1\)"):
    VtraceConfig(policy_loss="clip", clip_ratio=1.5)
  with pytest.raises(ValueError, match="separate_value_torso only works"):
    VtraceConfig(use_lstm=True, separate_value_torso=True)
  with pytest.raises(ValueError, match="allowed: behaviour, proximal"):
    VtraceConfig(policy_loss="clip", surrogate_anchor="target")
  with pytest.raises(ValueError, match="anchors the clipped surrogate"):
    VtraceConfig(policy_loss="pg", surrogate_anchor="proximal")
  with pytest.raises(ValueError, match="targets 'epoch' is unknown; allowed"):
    VtraceConfig(policy_loss="clip", targets="epoch")
  with pytest.raises(ValueError, match="only policy_loss 'clip' takes"):
    VtraceConfig(policy_loss="pg", targets="round")
  with pytest.raises(ValueError, match="minibatch_unit 'step' is unknown"):
    VtraceConfig(minibatch_unit="step")
  with pytest.raises(ValueError, match=r"targets 'round', has 'update'"):
    VtraceConfig(policy_loss="clip", minibatch_unit="transition")
  round_clip = dict(policy_loss="clip", targets="round")
  with pytest.raises(ValueError, match=r"use_lstm False, has True"):
    VtraceConfig(minibatch_unit="transition", use_lstm=True, **round_clip)
  with pytest.raises(ValueError, match=r"\(60\) must be a multiple of .*7"):
    VtraceConfig(
      minibatch_unit="transition",
      unroll_length=20,
      batch_size=3,
      num_minibatches=7,
      **round_clip,
    )
  with pytest.raises(ValueError, match=r"needs minibatch_unit 'transition'"):
    VtraceConfig(value_clip=0.1, **round_clip)
  with pytest.raises(ValueError, match="advantage 'q' is unknown; allowed"):
    VtraceConfig(advantage="q", **round_clip)
  with pytest.raises(ValueError, match=r"policy_loss is 'pg' \(use 'clip'"):
    VtraceConfig(advantage="lambda")
  with pytest.raises(ValueError, match=r"value_clip 0.0 clips .* must be > 0"):
    VtraceConfig(value_clip=0.0, minibatch_unit="transition", **round_clip)
  # 3 unrolls of 20 steps split into 4 minibatches of 15 steps.
  VtraceConfig(
    minibatch_unit="transition",
    unroll_length=20,
    batch_size=3,
    num_minibatches=4,
    **round_clip,
  )
  assert VtraceConfig().separate_value_torso
  assert not VtraceConfig(use_lstm=True).separate_value_torso


def test_act_shapes_dtypes_and_greedy_eval():
  agent = VtraceAgent(OBS_SPEC, ACTION_SPEC, 6, small_config())
  obs = np.random.default_rng(0).normal(size=[6, 4])
  out = agent.act(
    act_inputs(agent, obs, eval_mask=np.array([1, 1, 1, 0, 0, 0], bool))
  )
  assert out.action.shape == (6,) and out.action.dtype == np.int32
  assert out.value.shape == (6,) and out.value.dtype == np.float32
  assert out.extras["logits"].shape == (6, 2)
  assert out.core_state == ()
  np.testing.assert_array_equal(
    out.action[:3], out.extras["logits"][:3].argmax(-1)
  )
  # A different batch size reuses the same compiled function.
  assert agent.act(act_inputs(agent, obs[:1])).action.shape == (1,)
  with pytest.raises(ValueError, match="ActInputs.observation: dtype"):
    agent.act(
      ActInputs(
        np.arange(2, dtype=np.int32),
        np.zeros([2, 4]),
        np.zeros([2], np.int32),
        np.zeros([2], np.float32),
        np.zeros([2], bool),
        (),
        np.zeros([2], bool),
      )
    )


@pytest.mark.parametrize("normalize", [False, True])
def test_train_steps_are_finite_and_change_weights(normalize):
  config = small_config(normalize_advantages=normalize)
  agent = VtraceAgent(OBS_SPEC, ACTION_SPEC, 4, config)
  rng = np.random.default_rng(1)
  before = weights(agent)
  for _ in range(2):
    # Pieces of 3 and 5 regroup into two batches of 4.
    agent.add_unrolls(make_unroll(agent, 3, rng))
    agent.add_unrolls(make_unroll(agent, 5, rng))
    for _ in range(2):
      metrics = agent.train_step()
      for name in (
        "loss/total",
        "loss/policy",
        "loss/value",
        "loss/entropy",
        "vtrace/rho_mean",
        "grad/norm",
      ):
        assert np.isfinite(metrics[name]), name
  assert int(agent.step_counter.numpy()) == 4
  after = weights(agent)
  assert all(not np.allclose(a, b) for a, b in zip(before, after))


@pytest.mark.parametrize("policy_loss", ["pg", "clip", "clip-proximal"])
def test_epochs_and_minibatches_reuse_each_round(policy_loss):
  """2 epochs x 2 minibatches: four updates on one round of 4 unrolls, each
  unroll trained on twice (V-trace corrects for the moving policy; 'clip'
  also bounds how far the ratio pi/mu may be pushed, 'clip-proximal' how
  far from the round's starting policy)."""
  proximal = policy_loss == "clip-proximal"
  policy_loss = "clip" if proximal else policy_loss
  anchor = "proximal" if proximal else "behaviour"
  agent = VtraceAgent(
    OBS_SPEC,
    ACTION_SPEC,
    4,
    small_config(
      num_epochs=2,
      num_minibatches=2,
      policy_loss=policy_loss,
      surrogate_anchor=anchor,
    ),
  )
  rng = np.random.default_rng(5)
  agent.add_unrolls(make_unroll(agent, 4, rng))
  metrics = agent.train_step()
  assert int(agent.step_counter.numpy()) == 4
  assert metrics["perf/samples_trained"] == 5 * 4 * 2
  # Later passes see a policy that moved: importance weights leave 1.
  assert np.isfinite(metrics["vtrace/rho_mean"])
  assert ("policy/clip_fraction" in metrics) == (policy_loss == "clip")
  # The weight pi_prox / mu of the round's data is reported.
  assert ("vtrace/proximal_weight" in metrics) == proximal
  if proximal:
    assert 0.0 < metrics["vtrace/proximal_weight"] < np.inf
  with pytest.raises(ValueError, match="multiple of num_minibatches"):
    small_config(batch_size=4, num_minibatches=3)


def one_round_from(seed, **settings):
  """A function (**config) -> the weights after training one round of 4
  random unrolls (fixed by `seed`) from the same initial weights, with
  policy_loss 'clip' and `settings`; checks the round's update count."""
  start = VtraceAgent(OBS_SPEC, ACTION_SPEC, 4, small_config()).network
  start = start.get_weights()
  probe = VtraceAgent(OBS_SPEC, ACTION_SPEC, 4, small_config())
  probe.network.set_weights(start)
  unroll = make_unroll(probe, 4, np.random.default_rng(seed))

  def trained(**config):
    config = small_config(policy_loss="clip", **settings, **config)
    agent = VtraceAgent(OBS_SPEC, ACTION_SPEC, 4, config)
    agent.network.set_weights(start)
    agent.add_unrolls(unroll)
    metrics = agent.train_step()
    updates = config.num_epochs * config.num_minibatches
    assert int(agent.step_counter.numpy()) == updates
    assert metrics["perf/samples_trained"] == 5 * 4 * config.num_epochs
    assert np.isfinite(metrics["loss/total"])
    return weights(agent)

  return trained


def same_weights(a, b):
  return all(np.allclose(x, y, rtol=1e-5, atol=1e-6) for x, y in zip(a, b))


@pytest.mark.parametrize("anchor", ["behaviour", "proximal"])
def test_round_targets_change_only_the_later_updates(anchor):
  """targets 'round' holds the first update's targets over the round: one
  update per round trains exactly as 'update' does; with two epochs the
  second pass differs (its own targets would have moved)."""
  trained = one_round_from(8, surrogate_anchor=anchor)
  assert same_weights(trained(targets="update"), trained(targets="round"))
  assert not same_weights(
    trained(targets="update", num_epochs=2),
    trained(targets="round", num_epochs=2),
  )


@pytest.mark.parametrize("anchor", ["behaviour", "proximal"])
def test_transition_minibatches(anchor):
  """minibatch_unit 'transition': one minibatch of all T*B steps trains
  exactly as one of all unrolls (same steps, same round targets, a mean
  over the same terms); split into minibatches, steps from every unroll
  are drawn (the update differs from whole-unroll minibatches)."""
  trained = one_round_from(
    9, surrogate_anchor=anchor, targets="round", num_epochs=2
  )
  assert same_weights(
    trained(minibatch_unit="unroll"), trained(minibatch_unit="transition")
  )
  assert not same_weights(
    trained(minibatch_unit="unroll", num_minibatches=2),
    trained(minibatch_unit="transition", num_minibatches=2),
  )


def test_value_clip_holds_values_near_the_round_start():
  """value_clip: a clip far wider than any value change trains as none;
  a tight one changes the later updates (the values moved past it). One
  minibatch per epoch: no shuffled order differs between the agents."""
  trained = one_round_from(
    10,
    targets="round",
    minibatch_unit="transition",
    num_epochs=3,
    learning_rate=0.05,
  )
  assert same_weights(trained(), trained(value_clip=1e6))
  assert not same_weights(trained(), trained(value_clip=1e-3))


@pytest.mark.parametrize("num_epochs", [1, 2])
def test_on_policy_round_in_ppo_layout_trains_as_ppo(num_epochs):
  """Targets 'round', steps drawn as PPO draws them and advantage 'lambda':
  on data the starting policy acted on (every importance weight 1, so
  v_s is the lambda-return and v_s - V(x_s) GAE), one round trains
  exactly as PPOAgent's with the same network, weights and settings (one
  minibatch per epoch, so no shuffled order differs). With the paper's
  advantage the update differs."""
  from seed_rl.agents.ppo.agent import LOG_PROB, PPOAgent
  from seed_rl.agents.ppo.config import PPOConfig

  common = dict(
    unroll_length=5,
    batch_size=4,
    num_epochs=num_epochs,
    num_minibatches=1,
    lr_schedule="constant",
    learning_rate=1e-2,
    discount=0.9,
    entropy_cost=0.01,
    value_cost=0.5,
    clip_ratio=0.1,
    max_grad_norm=0.5,
    optimizer_epsilon_form="paper",
  )
  ppo = PPOAgent(
    OBS_SPEC,
    ACTION_SPEC,
    4,
    PPOConfig(gae_lambda=0.8, value_clip=None, shared_torso=True, **common),
  )

  def vtrace_agent(advantage):
    config = VtraceConfig(
      policy_loss="clip",
      targets="round",
      minibatch_unit="transition",
      advantage=advantage,
      normalize_advantages=True,
      trace_lambda=0.8,
      separate_value_torso=False,
      queue_capacity=8,
      **common,
    )
    agent = VtraceAgent(OBS_SPEC, ACTION_SPEC, 4, config)
    assert [v.shape for v in agent.network.trainable_variables] == [
      v.shape for v in ppo.network.trainable_variables
    ]
    agent.network.set_weights(ppo.network.get_weights())
    return agent

  rng = np.random.default_rng(13)
  unroll = make_unroll(vtrace_agent("lambda"), 4, rng)
  unroll.reward[:] = rng.normal(size=unroll.reward.shape)
  logits = unroll.extras["logits"].astype(np.float64)
  log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  unroll.extras[LOG_PROB] = np.take_along_axis(
    log_softmax, unroll.action[..., None], -1
  )[..., 0].astype(np.float32)
  trained = {}
  for name, agent in [
    ("ppo", ppo),
    ("lambda", vtrace_agent("lambda")),
    ("vtrace", vtrace_agent("vtrace")),
  ]:
    agent.add_unrolls(unroll)
    agent.train_step()
    trained[name] = weights(agent)
  assert same_weights(trained["ppo"], trained["lambda"])
  assert not same_weights(trained["ppo"], trained["vtrace"])


def test_policy_lag_metric():
  agent = VtraceAgent(OBS_SPEC, ACTION_SPEC, 4, small_config())
  rng = np.random.default_rng(2)
  agent.step_counter.assign(10)
  agent.add_unrolls(make_unroll(agent, 4, rng, policy_version=7))
  assert agent.train_step()["perf/policy_lag"] == pytest.approx(3.0)


def test_add_unrolls_rejects_malformed_unrolls():
  agent = VtraceAgent(OBS_SPEC, ACTION_SPEC, 4, small_config())
  rng = np.random.default_rng(3)
  unroll = make_unroll(agent, 2, rng)
  unroll.reward = unroll.reward[:, :-1]
  with pytest.raises(ValueError, match=r"Unroll.reward: shape \[2, 5\]"):
    agent.add_unrolls(unroll)
  unroll = make_unroll(agent, 2, rng)
  unroll.extras = {}
  with pytest.raises(ValueError, match="lacks 'logits'"):
    agent.add_unrolls(unroll)
  unroll = make_unroll(agent, 2, rng)
  unroll.terminated = unroll.terminated.astype(np.int32)
  with pytest.raises(ValueError, match="Unroll.terminated: dtype int32"):
    agent.add_unrolls(unroll)


def test_back_pressure_and_stop():
  agent = VtraceAgent(OBS_SPEC, ACTION_SPEC, 4, small_config())
  unroll = make_unroll(agent, 4, np.random.default_rng(4))
  agent.add_unrolls(unroll)
  agent.add_unrolls(unroll)  # queue now holds its capacity of 8
  blocked = threading.Thread(target=agent.add_unrolls, args=(unroll,))
  blocked.start()
  time.sleep(0.2)
  assert blocked.is_alive(), "add_unrolls must block while the queue is full"
  metrics = agent.train_step()  # frees 4 slots
  # Taken from a full queue: training is what binds.
  assert metrics["perf/queue_fill"] == 1.0
  assert "perf/train_data_wait" not in metrics  # no previous batch yet
  blocked.join(timeout=5)
  assert not blocked.is_alive()
  agent.train_step()  # the 8 queued now, in two batches without waiting
  agent.train_step()
  # The next batch arrives 0.3 s after training asks for it.
  threading.Timer(0.3, agent.add_unrolls, args=(unroll,)).start()
  metrics = agent.train_step()
  assert metrics["perf/queue_fill"] == 0.5  # 4 of 8: the actors bind
  assert 0.2 < metrics["perf/train_data_wait"] <= 1.0
  agent.add_unrolls(unroll)
  agent.add_unrolls(unroll)  # full again
  stuck = threading.Thread(target=agent.add_unrolls, args=(unroll,))
  stuck.start()
  time.sleep(0.2)
  assert stuck.is_alive()
  agent.stop()
  stuck.join(timeout=5)
  assert not stuck.is_alive(), "stop() must unblock add_unrolls"
  assert agent.train_step() == {}


def test_train_step_returns_empty_after_stop_while_waiting():
  agent = VtraceAgent(OBS_SPEC, ACTION_SPEC, 4, small_config())
  result = {}
  waiter = threading.Thread(
    target=lambda: result.update(metrics=agent.train_step())
  )
  waiter.start()
  time.sleep(0.1)
  agent.stop()
  waiter.join(timeout=5)
  assert not waiter.is_alive() and result["metrics"] == {}


@pytest.mark.parametrize("policy_loss, num_epochs", [("pg", 1), ("clip", 2)])
def test_learns_contextual_bandit(policy_loss, num_epochs):
  """Single-step episodes: reward 1 when the action equals the context bit."""
  config = small_config(
    batch_size=8,
    queue_capacity=16,
    learning_rate=3e-2,
    entropy_cost=0.0,
    policy_loss=policy_loss,
    clip_ratio=0.2,
    num_epochs=num_epochs,
  )
  agent = VtraceAgent(OBS_SPEC, ACTION_SPEC, 8, config)
  rng = np.random.default_rng(5)
  t1 = agent.unroll_length + 1

  def contexts(shape):
    bits = rng.integers(0, 2, shape)
    observation = np.zeros(shape + (4,), np.float32)
    observation[..., 0] = bits
    observation[..., 1] = 1 - bits
    return bits, observation

  for _ in range(30):
    bits, observation = contexts((8, t1))
    steps = [agent.act(act_inputs(agent, observation[:, t])) for t in range(t1)]
    action = np.stack([s.action for s in steps], 1)
    reward = np.zeros([8, t1], np.float32)
    reward[:, 1:] = action[:, :-1] == bits[:, :-1]
    agent.add_unrolls(
      Unroll(
        env_ids=np.arange(8, dtype=np.int32),
        observation=observation,
        reward=reward,
        terminated=np.ones([8, t1], bool),
        truncated=np.zeros([8, t1], bool),
        bootstrap_value=np.zeros([8, t1], np.float32),
        prev_action=np.zeros([8, t1], np.int32),
        action=action,
        value=np.stack([s.value for s in steps], 1),
        extras={"logits": np.stack([s.extras["logits"] for s in steps], 1)},
        core_state=(),
        policy_version=np.zeros([8, t1], np.int64),
      )
    )
    agent.train_step()
  bits, observation = contexts((200,))
  greedy = agent.act(
    act_inputs(agent, observation, eval_mask=np.ones([200], bool))
  )
  assert np.mean(greedy.action == bits) > 0.95
  # Values approach the expected reward of the current (nearly greedy) policy.
  assert np.mean(greedy.value) > 0.6


def test_checkpoint_round_trip(tmp_path):
  agent = VtraceAgent(OBS_SPEC, ACTION_SPEC, 4, small_config())
  rng = np.random.default_rng(6)
  agent.add_unrolls(make_unroll(agent, 4, rng))
  agent.train_step()
  assert set(agent.checkpoint_objects()) == {"network", "optimizer", "step"}
  saved_weights = weights(agent)
  obs = rng.normal(size=[3, 4])
  saved_logits = agent.act(act_inputs(agent, obs)).extras["logits"]

  def train_on():
    agent.add_unrolls(make_unroll(agent, 4, rng))
    agent.train_step()
    assert not np.allclose(weights(agent)[0], saved_weights[0])

  fresh = helpers.checkpoint_round_trip(
    agent,
    lambda: VtraceAgent(OBS_SPEC, ACTION_SPEC, 4, small_config()),
    tmp_path,
    after_save=train_on,
  )
  assert int(fresh.step_counter.numpy()) == 1
  np.testing.assert_allclose(
    fresh.act(act_inputs(fresh, obs)).extras["logits"], saved_logits, rtol=1e-6
  )


def test_lstm_agent_act_and_train():
  agent = VtraceAgent(
    OBS_SPEC,
    ACTION_SPEC,
    3,
    small_config(use_lstm=True, lstm_units=8, batch_size=3, queue_capacity=6),
  )
  state = agent.initial_core_state(3)
  assert [s.shape for s in state] == [(3, 8), (3, 8)]
  out = agent.act(act_inputs(agent, np.ones([3, 4])))
  assert [s.shape for s in out.core_state] == [(3, 8), (3, 8)]
  assert not np.allclose(out.core_state[0], 0.0)
  with pytest.raises(ValueError, match="core_state has 0 arrays, expected 2"):
    agent.act(act_inputs(agent, np.ones([3, 4]), core_state=()))
  unroll = make_unroll(agent, 3, np.random.default_rng(7))
  unroll.core_state = out.core_state
  agent.add_unrolls(unroll)
  assert np.isfinite(agent.train_step()["loss/total"])


def test_continuous_actions():
  action_spec = ArraySpec((2,), "float32", "torque", minimum=-1.0, maximum=1.0)
  agent = VtraceAgent(
    OBS_SPEC, action_spec, 2, small_config(batch_size=2, queue_capacity=2)
  )
  out = agent.act(helpers.act_inputs(np.ones([2, 4], np.float32), action_spec))
  assert out.action.shape == (2, 2) and out.action.dtype == np.float32
  assert out.extras["logits"].shape == (2, 4)  # mean and log std
  t1 = agent.unroll_length + 1
  rng = np.random.default_rng(8)
  agent.add_unrolls(
    Unroll(
      env_ids=np.arange(2, dtype=np.int32),
      observation=rng.normal(size=[2, t1, 4]).astype(np.float32),
      reward=rng.normal(size=[2, t1]).astype(np.float32),
      terminated=np.zeros([2, t1], bool),
      truncated=np.zeros([2, t1], bool),
      bootstrap_value=np.zeros([2, t1], np.float32),
      prev_action=np.zeros([2, t1, 2], np.float32),
      action=rng.normal(size=[2, t1, 2]).astype(np.float32),
      value=np.zeros([2, t1], np.float32),
      extras={"logits": np.zeros([2, t1, 4], np.float32)},
      core_state=(),
      policy_version=np.zeros([2, t1], np.int64),
    )
  )
  assert np.isfinite(agent.train_step()["loss/total"])


def test_policy_distribution_ignores_box_bounds():
  # The env must get the very sample whose log-prob the learner recomputes,
  # so a Box does not make V-trace clip or squash.
  box = ArraySpec((2,), "float32", "action", minimum=-1.0, maximum=1.0)
  gaussian = policy_distribution(box)
  assert isinstance(gaussian, distributions.DiagGaussian)
  assert gaussian.bounds == "none" and gaussian.num_params == 4
  params = tf.constant([[5.0, -5.0, -20.0, -20.0]])
  action, raw = gaussian.mode(params)
  np.testing.assert_array_equal(action, [[5.0, -5.0]])
  np.testing.assert_array_equal(action, raw)
  assert isinstance(policy_distribution(ACTION_SPEC), distributions.Categorical)
  with pytest.raises(ValueError, match="discrete actions must be scalars"):
    policy_distribution(ArraySpec((2,), "int32", num_values=3))
  with pytest.raises(ValueError, match="continuous actions must be float"):
    policy_distribution(ArraySpec((2, 2), "float32"))


def test_create_agent_reads_gin():
  gin.clear_config()
  try:
    gin.parse_config_files_and_bindings(
      [],
      [
        "VtraceConfig.unroll_length = 7",
        "VtraceConfig.batch_size = 2",
        "mlp_torso.hidden_sizes = (8,)",
      ],
    )
    agent = create_agent(OBS_SPEC, ACTION_SPEC, 2)
    assert agent.unroll_length == 7 and agent.config.batch_size == 2
    assert agent.unroll_overlap == 1
    assert agent.network.torso.layers[-1].units == 8
  finally:
    gin.clear_config()


@pytest.mark.parametrize("policy_loss", ["pg", "clip-proximal"])
def test_atari_shaped_lstm_agent_trains(policy_loss):
  from seed_rl.networks import atari_torso

  obs_spec = ArraySpec((84, 84, 4), "uint8", "frames")
  action_spec = ArraySpec((), "int32", "action", num_values=6)
  config = small_config(
    unroll_length=2,
    batch_size=2,
    queue_capacity=2,
    use_lstm=True,
    lstm_units=16,
    torso=atari_torso,
    reward_clipping="abs_one",
    policy_loss=policy_loss.split("-")[0],
    surrogate_anchor="proximal" if "proximal" in policy_loss else "behaviour",
  )
  agent = VtraceAgent(obs_spec, action_spec, 2, config)
  rng = np.random.default_rng(9)
  frames = rng.integers(0, 256, [2, 3, 84, 84, 4], dtype=np.uint8)
  state = agent.initial_core_state(2)
  out = agent.act(
    ActInputs(
      np.arange(2, dtype=np.int32),
      frames[:, 0],
      np.zeros([2], np.int32),
      np.zeros([2], np.float32),
      np.ones([2], bool),
      state,
      np.zeros([2], bool),
    )
  )
  assert out.extras["logits"].shape == (2, 6)
  agent.add_unrolls(
    Unroll(
      env_ids=np.arange(2, dtype=np.int32),
      observation=frames,
      reward=np.full([2, 3], 3.0, np.float32),
      terminated=np.zeros([2, 3], bool),
      truncated=np.zeros([2, 3], bool),
      bootstrap_value=np.zeros([2, 3], np.float32),
      prev_action=np.zeros([2, 3], np.int32),
      action=rng.integers(0, 6, [2, 3]).astype(np.int32),
      value=np.zeros([2, 3], np.float32),
      extras={"logits": np.zeros([2, 3, 6], np.float32)},
      core_state=state,
      policy_version=np.zeros([2, 3], np.int64),
    )
  )
  metrics = agent.train_step()
  assert np.isfinite(metrics["loss/total"])
  # Rewards of 3 are clipped to 1 before the targets: with V ~ 0 and
  # discount 0.99 the two-step targets stay below 2.
  assert metrics["value/target_mean"] < 2.0
