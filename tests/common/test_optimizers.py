"""Optimizer updates against the update rules written out in NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from seed_rl.common import optimizers


def _rmsprop_reference(theta, grads, lr, rho, eps, momentum=0.0):
  ms, mom = np.zeros_like(theta), np.zeros_like(theta)
  for g in grads:
    ms = rho * ms + (1 - rho) * g * g
    mom = momentum * mom + lr * g / np.sqrt(ms + eps)
    theta = theta - mom
  return theta


def _adam_reference(theta, grads, lr, b1, b2, eps):
  m, v = np.zeros_like(theta), np.zeros_like(theta)
  for t, g in enumerate(grads, start=1):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    theta = theta - lr * np.sqrt(1 - b2**t) / (1 - b1**t) * m / (
      np.sqrt(v) + eps
    )
  return theta


def _adam_algorithm_1(theta, grads, lr, b1, b2, eps):
  """Kingma & Ba 2015, Algorithm 1: epsilon on the bias-corrected moments."""
  m, v = np.zeros_like(theta), np.zeros_like(theta)
  for t, g in enumerate(grads, start=1):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
    theta = theta - lr * m_hat / (np.sqrt(v_hat) + eps)
  return theta


def _run(opt_name, grads, **kw):
  var = tf.Variable(np.array([0.5, -1.0, 2.0], np.float32))
  opt = optimizers.make_optimizer(opt_name, variables=[var], **kw)
  for g in grads:
    opt.apply_gradients([(tf.constant(g), var)])
  return var.numpy(), opt


GRADS = [
  np.array([0.3, -2.0, 1e-3], np.float32),
  np.array([-0.1, 0.5, 4.0], np.float32),
  np.array([0.2, 0.2, -0.7], np.float32),
]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_rmsprop_matches_the_paper_rule(momentum):
  # IMPALA's RMSProp: decay 0.99, epsilon 0.01 inside the square root.
  got, _ = _run(
    "rmsprop",
    GRADS,
    learning_rate=6e-4,
    epsilon=0.01,
    rmsprop_decay=0.99,
    momentum=momentum,
  )
  want = _rmsprop_reference(
    np.array([0.5, -1.0, 2.0]), GRADS, 6e-4, 0.99, 0.01, momentum
  )
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_one_rmsprop_step_on_a_known_gradient():
  got, _ = _run(
    "rmsprop", GRADS[:1], learning_rate=0.1, epsilon=0.01, rmsprop_decay=0.99
  )
  g = GRADS[0].astype(np.float64)
  want = np.array([0.5, -1.0, 2.0]) - 0.1 * g / np.sqrt(0.01 * g * g + 0.01)
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_adam_matches_the_reference():
  got, _ = _run("adam", GRADS, learning_rate=1e-2, epsilon=1e-5)
  want = _adam_reference(
    np.array([0.5, -1.0, 2.0]), GRADS, 1e-2, 0.9, 0.999, 1e-5
  )
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_adam_paper_form_matches_algorithm_1():
  # Gradients near epsilon, where the two forms part: TensorFlow's adds
  # epsilon before the bias correction (31.6 epsilon at t = 1).
  grads = [g * 1e-4 for g in GRADS]
  theta = np.array([0.5, -1.0, 2.0])
  got, _ = _run(
    "adam", grads, learning_rate=1e-2, epsilon=1e-5, epsilon_form="paper"
  )
  want = _adam_algorithm_1(theta, grads, 1e-2, 0.9, 0.999, 1e-5)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  tf_form = _adam_reference(theta, grads, 1e-2, 0.9, 0.999, 1e-5)
  assert np.abs((tf_form - theta) / (want - theta) - 1).max() > 0.5


def test_mean_loss_with_scaled_epsilon_steps_like_the_summed_loss():
  n = 640  # 32 unrolls x 20 steps, IMPALA's batch
  summed, _ = _run("rmsprop", GRADS, learning_rate=6e-4, epsilon=0.01)
  mean, _ = _run(
    "rmsprop",
    [g / n for g in GRADS],
    learning_rate=6e-4,
    epsilon=optimizers.summed_loss_epsilon(0.01, n),
  )
  np.testing.assert_allclose(mean, summed, rtol=1e-4)
  # Without the scaling the mean loss's steps are far smaller.
  unscaled, _ = _run(
    "rmsprop", [g / n for g in GRADS], learning_rate=6e-4, epsilon=0.01
  )
  start = np.array([0.5, -1.0, 2.0])
  assert np.all(np.abs(unscaled - start) < 0.05 * np.abs(summed - start))


def test_clipping_scales_by_the_global_norm_and_reports_it():
  var = tf.Variable(np.zeros(2, np.float32))
  opt = optimizers.make_optimizer(
    "rmsprop",
    learning_rate=1.0,
    epsilon=1.0,
    rmsprop_decay=0.0,
    max_grad_norm=1.0,
    variables=[var],
  )
  norm = opt.apply_gradients([(tf.constant([3.0, 4.0]), var)])
  assert float(norm) == pytest.approx(5.0)
  g = np.array([0.6, 0.8])  # clipped to norm 1
  np.testing.assert_allclose(var.numpy(), -g / np.sqrt(g * g + 1.0), rtol=1e-5)


@pytest.mark.parametrize("name", ["adam", "rmsprop"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_gradient_skips_the_update(name, bad):
  var = tf.Variable(np.array([1.0, 2.0], np.float32))
  opt = optimizers.make_optimizer(
    name, 1e-2, variables=[var], max_grad_norm=1.0
  )
  opt.apply_gradients([(tf.constant([0.5, -0.5]), var)])
  before = var.numpy().copy()
  slots = [s.numpy().copy() for s in opt.slots]
  step = tf.function(lambda g: opt.apply_gradients([(g, var)]))
  norm = step(tf.constant([bad, 1.0], tf.float32))
  assert not np.isfinite(float(norm))
  np.testing.assert_array_equal(var.numpy(), before)
  for a, b in zip(slots, opt.slots):
    np.testing.assert_array_equal(a, b.numpy())
  assert int(opt.nonfinite_updates.numpy()) == 1
  assert int(opt.iterations.numpy()) == 1
  step(tf.constant([0.5, 0.5]))  # training goes on afterwards
  assert np.all(np.isfinite(var.numpy())) and int(opt.iterations.numpy()) == 2


def test_linear_schedule_follows_the_update_counter():
  _, opt = _run(
    "adam",
    GRADS,
    learning_rate=optimizers.learning_rate_schedule(1.0, decay_steps=4),
    epsilon=1e-5,
  )
  # The third update used step 2 of 4: 1 - 2/4.
  assert float(opt.learning_rate.numpy()) == pytest.approx(0.5)
  assert int(opt.iterations.numpy()) == 3


def test_slots_and_counter_checkpoint(tmp_path):
  _, opt = _run("rmsprop", GRADS, learning_rate=1e-3, epsilon=1e-5)
  path = tf.train.Checkpoint(optimizer=opt).save(str(tmp_path / "ckpt"))
  var = tf.Variable(np.zeros(3, np.float32))
  fresh = optimizers.make_optimizer("rmsprop", 1e-3, variables=[var])
  tf.train.Checkpoint(optimizer=fresh).restore(path).assert_consumed()
  assert int(fresh.iterations.numpy()) == 3
  for a, b in zip(opt.slots, fresh.slots):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize(
  "kwargs,match",
  [
    (dict(name="sgd"), "unknown; allowed: adam, rmsprop"),
    (dict(epsilon=0.0), "epsilon must be > 0"),
    (dict(max_grad_norm=-1.0), "max_grad_norm must be >= 0"),
    (dict(epsilon_form="torch"), "unknown; allowed: tensorflow, paper"),
  ],
)
def test_bad_settings_are_named(kwargs, match):
  args = dict(name="adam", learning_rate=1e-3, variables=[tf.Variable(1.0)])
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    optimizers.make_optimizer(**args)


def test_schedule_can_run_on_the_learner_step_counter():
  clock = tf.Variable(0, dtype=tf.int64)
  var = tf.Variable(np.zeros(2, np.float32))
  opt = optimizers.make_optimizer(
    "adam",
    optimizers.learning_rate_schedule(1.0, decay_steps=10),
    variables=[var],
    clock=clock,
  )
  clock.assign(5)  # e.g. a resumed run, or updates the optimizer skipped
  opt.apply_gradients([(tf.constant([1.0, 1.0]), var)])
  assert float(opt.learning_rate.numpy()) == pytest.approx(0.5)


def test_linear_schedule_values():
  from seed_rl.agents import schedules

  f = schedules.linear(1.0, 0.2, 4)
  assert [f(s) for s in (-1, 0, 2, 4, 9)] == pytest.approx(
    [1.0, 1.0, 0.6, 0.2, 0.2]
  )
  with pytest.raises(ValueError, match="steps must be > 0"):
    schedules.linear(1.0, 0.0, 0)
