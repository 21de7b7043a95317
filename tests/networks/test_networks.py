"""Torsos and the V-trace actor-critic: shapes, resets, step == unroll,
checkpoint round trips."""

from __future__ import annotations

import functools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest
import tensorflow as tf

from seed_rl.agents.vtrace import networks
from seed_rl.networks import atari_torso
from seed_rl.networks import mlp_torso
from seed_rl.agents import distributions
from seed_rl.common.specs import ArraySpec

NUM_ACTIONS = 3


def test_mlp_torso_shapes_and_dtypes():
  torso = mlp_torso(hidden_sizes=(32, 16))
  assert torso(np.zeros([5, 4], np.float32)).shape == (5, 16)
  # Multi-dimensional integer observations are flattened and cast.
  torso = mlp_torso()
  features = torso(np.ones([3, 2, 3], np.int32))
  assert features.shape == (3, 64) and features.dtype == tf.float32
  assert np.all(np.abs(features) <= 1.0)  # tanh


def test_mlp_torso_rejects_bad_arguments():
  with pytest.raises(ValueError, match="hidden_sizes"):
    mlp_torso(hidden_sizes=())
  with pytest.raises(ValueError, match="activation 'swishy' is unknown"):
    mlp_torso(activation="swishy")


@pytest.mark.parametrize(
  "kind,size", [("impala", 256), ("nature", 512), ("nips", 256)]
)
def test_atari_torso_shapes(kind, size):
  torso = atari_torso(kind=kind)
  frames = np.random.default_rng(0).integers(
    0, 256, [2, 84, 84, 4], dtype=np.uint8
  )
  features = torso(frames)
  assert features.shape == (2, size) and features.dtype == tf.float32
  assert np.all(np.isfinite(features))


def _nature_reference(torso, frames, strides=(4, 2, 1)):
  """The Nature (or, strides (4, 2), NIPS) torso from raw TF ops on
  frames / 255 (float32)."""
  x = tf.cast(frames, tf.float32) / 255.0
  assert len(torso.conv_layers) == len(strides)
  for layer, stride in zip(torso.conv_layers, strides):
    kernel, bias = (tf.cast(v, tf.float32) for v in layer.weights)
    x = tf.nn.relu(tf.nn.conv2d(x, kernel, stride, "VALID") + bias)
  kernel, bias = torso.dense.weights
  return tf.nn.relu(tf.reshape(x, [x.shape[0], -1]) @ kernel + bias)


@pytest.mark.parametrize(
  "kind,strides", [("nature", (4, 2, 1)), ("nips", (4, 2))]
)
def test_atari_torso_scales_inside(kind, strides):
  torso = atari_torso(kind=kind, dense_size=8)
  frames = np.random.default_rng(1).integers(
    0, 256, [3, 84, 84, 4], dtype=np.uint8
  )
  np.testing.assert_allclose(
    torso(frames),
    _nature_reference(torso, frames, strides),
    rtol=1e-5,
    atol=1e-6,
  )
  filters = [layer.filters for layer in torso.conv_layers]
  assert filters == ([32, 64, 64] if kind == "nature" else [16, 32])


@pytest.mark.parametrize("kind", ["impala", "nature"])
def test_atari_torso_bfloat16_compute(kind, tmp_path):
  frames = np.random.default_rng(2).integers(
    0, 256, [4, 84, 84, 4], dtype=np.uint8
  )
  fast = atari_torso(kind=kind, dense_size=32, compute_dtype="bfloat16")
  features = fast(frames)
  # Weights stay float32 (same checkpoints); the features come out float32.
  assert features.dtype == tf.float32
  assert all(v.dtype == tf.float32 for v in fast.weights)
  # A float32 torso restored from the bfloat16 one's checkpoint computes
  # the same features up to bfloat16 rounding (8 significand bits).
  exact = atari_torso(kind=kind, dense_size=32)
  exact(frames)
  path = tf.train.Checkpoint(net=fast).save(str(tmp_path / "ckpt"))
  tf.train.Checkpoint(net=exact).restore(path).assert_consumed()
  expected = exact(frames).numpy()
  if kind == "nature":
    np.testing.assert_allclose(
      expected, _nature_reference(exact, frames), rtol=1e-5, atol=1e-6
    )
  scale = np.abs(expected).max()
  assert scale > 0
  np.testing.assert_allclose(features, expected, atol=0.03 * scale)
  # Gradients reach the float32 weights through the bfloat16 compute.
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(fast(frames))
  grads = tape.gradient(loss, fast.trainable_variables)
  assert all(g is not None and g.dtype == tf.float32 for g in grads)
  assert all(np.all(np.isfinite(g)) for g in grads)


def test_atari_torso_rejects_unknown_compute_dtype():
  with pytest.raises(
    ValueError,
    match="compute_dtype 'float16' is unknown; allowed: float32, bfloat16",
  ):
    atari_torso(kind="nature", compute_dtype="float16")


def _restored_copy(make, tmp_path):
  """Saves a fresh `make()` and restores it into another fresh one."""
  saved, restored = make(), make()
  path = tf.train.Checkpoint(net=saved).save(str(tmp_path / "ckpt"))
  tf.train.Checkpoint(net=restored).restore(path).assert_consumed()
  return saved, restored


@pytest.mark.parametrize("kind", ["impala", "nature"])
def test_atari_torso_network_checkpoint_round_trip(kind, tmp_path):
  # Nothing but the checkpoint ties the two networks together (no optimizer
  # holds their variables, as for a target network), so every layer of the
  # conv stack must be tracked for the outputs to agree.
  spec = ArraySpec((84, 84, 4), "uint8")

  def make():
    torso = functools.partial(
      atari_torso, kind=kind, dense_size=16, impala_channels=(4, 8)
    )
    net = networks.ActorCriticNetwork(torso, NUM_ACTIONS, tf.identity)
    networks.build_network(net, spec, ArraySpec((), "int32"))
    return net

  saved, restored = _restored_copy(make, tmp_path)
  frames = np.random.default_rng(4).integers(
    0, 256, [2, 84, 84, 4], dtype=np.uint8
  )
  args = (
    np.zeros([2], np.int32),
    np.zeros([2], np.float32),
    np.zeros([2], bool),
    (),
  )
  expected, _, _ = saved.step(frames, *args)
  got, _, _ = restored.step(frames, *args)
  np.testing.assert_array_equal(got, expected)
  assert len(restored.torso.conv_layers) == (3 if kind == "nature" else 8)


def test_mlp_torso_checkpoint_round_trip(tmp_path):
  def make():
    torso = mlp_torso(hidden_sizes=(8, 8))
    torso(np.zeros([1, 3], np.float32))
    return torso

  saved, restored = _restored_copy(make, tmp_path)
  x = np.random.default_rng(5).normal(size=[4, 3]).astype(np.float32)
  np.testing.assert_array_equal(restored(x), saved(x))


def test_action_features():
  one_hot = networks.action_features(distributions.Categorical(3))
  np.testing.assert_array_equal(
    one_hot(np.array([2, 0], np.int32)), [[0, 0, 1], [1, 0, 0]]
  )
  gaussian = distributions.DiagGaussian(2, bounds="none")
  features = networks.action_features(gaussian)(np.ones([3, 2], np.float64))
  assert features.dtype == tf.float32 and features.shape == (3, 2)


def test_atari_torso_rejects_unknown_kind():
  with pytest.raises(ValueError, match="kind 'resnet' is unknown"):
    atari_torso(kind="resnet")


def make_network(use_lstm, separate_value_torso=False):
  dist = distributions.Categorical(NUM_ACTIONS)
  network = networks.ActorCriticNetwork(
    torso_fn=functools.partial(mlp_torso, hidden_sizes=(16,)),
    num_policy_params=dist.num_params,
    action_features=networks.action_features(dist),
    use_lstm=use_lstm,
    lstm_units=8,
    separate_value_torso=separate_value_torso,
  )
  networks.build_network(
    network,
    ArraySpec((4,), "float32"),
    ArraySpec((), "int32", num_values=NUM_ACTIONS),
  )
  # Non-zero biases so zeroed inputs still produce distinguishable outputs.
  rng = np.random.default_rng(1)
  for variable in network.trainable_variables:
    variable.assign(rng.normal(scale=0.5, size=variable.shape))
  return network


def random_unroll(rng, num_steps1, batch, done_at=()):
  done = np.zeros([num_steps1, batch], bool)
  for t, b in done_at:
    done[t, b] = True
  prev_action = rng.integers(0, NUM_ACTIONS, [num_steps1, batch]).astype(
    np.int32
  )
  prev_action[done] = 0
  return dict(
    observation=rng.normal(size=[num_steps1, batch, 4]).astype(np.float32),
    prev_action=prev_action,
    reward=rng.normal(size=[num_steps1, batch]).astype(np.float32),
    done=done,
  )


def step_through(network, inputs, state):
  params, baselines = [], []
  for t in range(inputs["done"].shape[0]):
    p, v, state = network.step(
      inputs["observation"][t],
      inputs["prev_action"][t],
      inputs["reward"][t],
      inputs["done"][t],
      state,
    )
    params.append(p)
    baselines.append(v)
  return np.stack(params), np.stack(baselines), state


@pytest.mark.parametrize(
  "use_lstm,separate", [(False, False), (False, True), (True, False)]
)
def test_step_equals_unroll(use_lstm, separate):
  network = make_network(use_lstm, separate)
  rng = np.random.default_rng(2)
  inputs = random_unroll(rng, 6, 3, done_at=[(2, 0), (4, 1), (0, 2)])
  state = tuple(
    tf.constant(rng.normal(size=s.shape), tf.float32)
    for s in network.initial_state(3)
  )
  params, baseline = network.unroll(
    **{k: tf.constant(v) for k, v in inputs.items()}, core_state=state
  )
  assert params.shape == (6, 3, NUM_ACTIONS) and baseline.shape == (6, 3)
  step_params, step_baseline, _ = step_through(network, inputs, state)
  np.testing.assert_allclose(params, step_params, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(baseline, step_baseline, rtol=1e-5, atol=1e-5)


def test_step_shapes_and_state():
  network = make_network(use_lstm=True)
  state = network.initial_state(5)
  assert [s.shape for s in state] == [(5, 8), (5, 8)]
  params, baseline, new_state = network.step(
    np.zeros([5, 4], np.float32),
    np.zeros([5], np.int32),
    np.zeros([5], np.float32),
    np.zeros([5], bool),
    state,
  )
  assert params.shape == (5, NUM_ACTIONS) and baseline.shape == (5,)
  assert [s.shape for s in new_state] == [(5, 8), (5, 8)]
  assert make_network(use_lstm=False).initial_state(5) == ()


def test_lstm_resets_at_done():
  network = make_network(use_lstm=True)
  rng = np.random.default_rng(3)
  inputs = random_unroll(rng, 5, 2, done_at=[(2, 0), (2, 1)])
  # Two different histories before the episode start at t=2 ...
  other = random_unroll(rng, 5, 2, done_at=[(2, 0), (2, 1)])
  for key in inputs:
    other[key][2:] = inputs[key][2:]
  state_a = tuple(
    tf.constant(rng.normal(size=s.shape), tf.float32)
    for s in network.initial_state(2)
  )
  state_b = network.initial_state(2)
  params_a, base_a = network.unroll(**inputs, core_state=state_a)
  params_b, base_b = network.unroll(**other, core_state=state_b)
  # ... differ before it and agree from it on.
  assert not np.allclose(params_a[:2], params_b[:2])
  np.testing.assert_allclose(params_a[2:], params_b[2:], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(base_a[2:], base_b[2:], rtol=1e-5, atol=1e-6)


def test_lstm_done_zeroes_previous_action_and_reward():
  network = make_network(use_lstm=True)
  state = network.initial_state(2)
  obs = np.zeros([2, 4], np.float32)
  done = np.array([True, True])
  params, _, _ = network.step(
    obs,
    np.array([0, 2], np.int32),
    np.array([0.0, 5.0], np.float32),
    done,
    state,
  )
  np.testing.assert_allclose(params[0], params[1], rtol=1e-6)
  not_done = np.array([False, False])
  params, _, _ = network.step(
    obs,
    np.array([0, 2], np.int32),
    np.array([0.0, 5.0], np.float32),
    not_done,
    state,
  )
  assert not np.allclose(params[0], params[1])


def test_network_rejects_lstm_with_separate_value_torso():
  with pytest.raises(ValueError, match="separate_value_torso"):
    networks.ActorCriticNetwork(
      mlp_torso, 2, tf.identity, use_lstm=True, separate_value_torso=True
    )


def test_compute_dtype_auto_follows_cpu_flags(tmp_path, monkeypatch):
  from seed_rl.networks import conv

  with_bf16 = tmp_path / "with"
  with_bf16.write_text(
    "processor: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"
  )
  without = tmp_path / "without"
  without.write_text("processor: 0\nflags\t\t: fpu avx2 avx512f\n")
  assert conv.cpu_has_bfloat16(str(with_bf16))
  assert not conv.cpu_has_bfloat16(str(without))
  assert not conv.cpu_has_bfloat16(str(tmp_path / "missing"))
  monkeypatch.setattr(conv, "cpu_has_bfloat16", lambda: True)
  assert conv.resolve_compute_dtype("auto") == (
    "float32" if tf.config.list_physical_devices("GPU") else "bfloat16"
  )
  monkeypatch.setattr(conv, "cpu_has_bfloat16", lambda: False)
  assert conv.resolve_compute_dtype("auto") == "float32"
  assert conv.resolve_compute_dtype("bfloat16") == "bfloat16"
