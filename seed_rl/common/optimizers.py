"""Optimizers, learning-rate schedules and the learner step counter.

`Optimizer` applies Adam or RMSProp with TensorFlow's fused C++ kernels
(`ResourceApplyAdam`, `ResourceApplyRMSProp`) after a global-norm clip. On a
CPU learner the per-update cost matters as much as the per-frame cost: for
the Nature CNN's 1.7M parameters Keras 3's optimizers cost ~13-17 ms of CPU
per update against ~7 ms here (clip included), i.e. 10-20% of an A2C-sized
Atari update (benchmarks/RESULTS.md, "Optimizer step").

Update rules (g = the clipped gradient, t = 1, 2, ...):
  RMSProp (TF1 / IMPALA / Keras 3: epsilon inside the square root; the mean
  square starts at 0):
      ms <- rho ms + (1 - rho) g^2
      mom <- momentum mom + lr g / sqrt(ms + epsilon)
      theta <- theta - mom
  Adam (Kingma & Ba 2015), epsilon outside the square root, in one of two
  forms (`ADAM_EPSILON_FORMS`):
      m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
    'tensorflow' (TensorFlow's and Keras' kernels; SEED RL, Dopamine):
      theta <- theta - lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + epsilon)
    'paper' (the paper's Algorithm 1; PyTorch, so CleanRL and SB3):
      theta <- theta - lr / (1 - b1^t) m / (sqrt(v / (1 - b2^t)) + epsilon)
    They differ only in the first ~1,000 steps: the 'tensorflow' form is the
    'paper' form with epsilon / sqrt(1 - b2^t) (31.6 epsilon at t = 1,
    3.2 epsilon at t = 100), which damps the early steps of weights whose
    gradients are near epsilon (a Nature CNN's first PPO update on Atari moves
    its dense layer 2.4x less). The 'paper' form runs on the same kernel with
    epsilon sqrt(1 - b2^t).

Losses averaged over N = T x B samples have gradients N times smaller than
the summed losses of IMPALA and torchbeast; RMSProp gives the same update for
both when epsilon is scaled by 1 / N^2 (see `summed_loss_epsilon`).
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence, Tuple, Union

import tensorflow as tf

_OPTIMIZERS = ("adam", "rmsprop")
ADAM_EPSILON_FORMS = ("tensorflow", "paper")

LearningRate = Union[float, Callable[[tf.Tensor], tf.Tensor]]


def linear_schedule(
  initial: float, decay_steps: int, final: float = 0.0
) -> Callable[[tf.Tensor], tf.Tensor]:
  """step -> initial + (final - initial) * min(step / decay_steps, 1)."""
  initial, final = float(initial), float(final)

  def schedule(step):
    frac = tf.minimum(tf.cast(step, tf.float32) / float(decay_steps), 1.0)
    return initial + (final - initial) * frac

  return schedule


def learning_rate_schedule(
  learning_rate: float,
  decay_steps: Optional[int] = None,
  final_learning_rate: float = 0.0,
) -> LearningRate:
  """Constant, or linear decay to `final_learning_rate` over `decay_steps`.

  The schedule is driven by the optimizer's update counter, which is
  checkpointed with the optimizer, so a restored run resumes mid-schedule.
  """
  if not learning_rate > 0:
    raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
  if decay_steps is None:
    return float(learning_rate)
  if decay_steps < 1:
    raise ValueError(
      f"decay_steps must be >= 1 (or None for a constant "
      f"rate), got {decay_steps}"
    )
  if not 0 <= final_learning_rate <= learning_rate:
    raise ValueError(
      f"final_learning_rate must be in [0, learning_rate="
      f"{learning_rate}], got {final_learning_rate}"
    )
  return linear_schedule(learning_rate, decay_steps, final_learning_rate)


def summed_loss_epsilon(epsilon: float, samples_per_loss: int) -> float:
  """RMSProp epsilon that makes a mean-reduced loss step like a summed one.

  With g_mean = g_sum / N: lr g_mean / sqrt((1-rho) g_mean^2 + eps / N^2)
  = lr g_sum / sqrt((1-rho) g_sum^2 + eps), exactly (and likewise for every
  later step, since ms scales by 1 / N^2 too).
  """
  return float(epsilon) / float(samples_per_loss) ** 2


def tf_variable(variable) -> tf.Variable:
  """The tf.Variable behind a Keras 3 variable (or the variable itself)."""
  if isinstance(variable, tf.Variable):
    return variable
  inner = getattr(variable, "_value", None)
  if isinstance(inner, tf.Variable):
    return inner
  raise TypeError(
    f"cannot optimise {variable!r}: not a tf.Variable or a "
    "Keras 3 variable on the TensorFlow backend"
  )


def _check_optimizer_args(
  name: str, epsilon: float, max_grad_norm: Optional[float], epsilon_form: str
) -> None:
  if name not in _OPTIMIZERS:
    raise ValueError(
      f"optimizer {name!r} is unknown; allowed: {', '.join(_OPTIMIZERS)}"
    )
  if epsilon_form not in ADAM_EPSILON_FORMS:
    raise ValueError(
      f"Adam epsilon form {epsilon_form!r} is unknown; allowed: "
      f"{', '.join(ADAM_EPSILON_FORMS)}"
    )
  if not epsilon > 0:
    raise ValueError(f"optimizer epsilon must be > 0, got {epsilon}")
  if max_grad_norm is not None and max_grad_norm < 0:
    raise ValueError(
      f"max_grad_norm must be >= 0 (0 or None disables "
      f"clipping), got {max_grad_norm}"
    )


class Optimizer(tf.Module):
  """Adam or RMSProp on fused kernels, with a global-norm gradient clip.

  An update whose gradient is not finite (NaN or inf anywhere, e.g. from a
  huge reward) is skipped: the weights and slots keep their values and
  `nonfinite_updates` counts it (agents report it as
  errors/nonfinite_updates).

  Attributes:
    iterations: int64 updates applied (checkpointed; drives the schedule).
    nonfinite_updates: int64 updates skipped for a non-finite gradient.
    learning_rate: float32 variable holding the rate of the latest update
      (assignable when the rate is constant, as PPO's annealing does).
  """

  def __init__(  # noqa: PLR0913 (the optimizer's hyperparameters)
    self,
    name: str,
    learning_rate: LearningRate,
    variables: Sequence[tf.Variable],
    epsilon: float = 1e-7,
    max_grad_norm: Optional[float] = None,
    rmsprop_decay: float = 0.99,
    momentum: float = 0.0,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    clock: Optional[tf.Variable] = None,
    epsilon_form: str = "tensorflow",
  ):
    super().__init__(name=f"{name}_optimizer")
    # Built inside a tf.distribute strategy's scope (a multi-device
    # learner): the variables are mirrored and updates go through
    # `strategy.extended.update` (see apply_gradients).
    self._strategy = (
      tf.distribute.get_strategy() if tf.distribute.has_strategy() else None
    )
    # The learner step counter drives the schedule when given (one clock
    # for every schedule of an agent); else the updates applied here.
    self._clock = clock
    _check_optimizer_args(name, epsilon, max_grad_norm, epsilon_form)
    self.kind = name
    self.epsilon_form = epsilon_form
    self._schedule: Optional[Callable[[tf.Tensor], tf.Tensor]]
    if callable(learning_rate):
      self._schedule = learning_rate
      initial = float(learning_rate(tf.constant(0, tf.int64)))
    else:
      self._schedule = None
      initial = float(learning_rate)
    self.learning_rate = tf.Variable(
      initial, dtype=tf.float32, trainable=False, name="learning_rate"
    )
    self.iterations = tf.Variable(
      0, dtype=tf.int64, trainable=False, name="iterations"
    )
    self.nonfinite_updates = tf.Variable(
      0, dtype=tf.int64, trainable=False, name="nonfinite_updates"
    )
    self.epsilon = float(epsilon)
    self.max_grad_norm = float(max_grad_norm) if max_grad_norm else None
    self.rmsprop_decay, self.momentum = float(rmsprop_decay), float(momentum)
    self.beta_1, self.beta_2 = float(beta_1), float(beta_2)
    variables = [tf_variable(v) for v in variables]
    self._refs = [v.ref() for v in variables]
    zeros = lambda v, slot, i: tf.Variable(
      tf.zeros_like(v), trainable=False, name=f"{slot}_{i}"
    )
    # Lists of variables on a tf.Module are tracked by tf.train.Checkpoint.
    self.slot_a, self.slot_b = [], []
    for i, v in enumerate(variables):
      self.slot_a.append(zeros(v, "m" if name == "adam" else "ms", i))
      self.slot_b.append(zeros(v, "v" if name == "adam" else "mom", i))

  @property
  def slots(self) -> Tuple[tf.Variable, ...]:
    return tuple(self.slot_a) + tuple(self.slot_b)

  def apply_gradients(
    self, grads_and_vars: Iterable[Tuple[tf.Tensor, tf.Variable]]
  ) -> tf.Tensor:
    """Clips, then applies one update; returns the global norm before clip.

    A non-finite norm (some gradient is NaN or inf) skips the update.

    Built under a `tf.distribute.MirroredStrategy` scope, this is called in
    cross-replica context (outside `strategy.run`) with gradients already
    all-reduced: `tf.distribute.Mirrored` values (one identical copy per
    device, e.g. from `strategy.extended.batch_reduce_to`) or plain tensors.
    The raw `ResourceApply*` kernels need one variable handle per device,
    which a mirrored variable gives only inside an update context, so each
    variable is updated through `strategy.extended.update`: the kernel runs
    once per device on that device's copy of the weights and slots, with
    that device's copy of the gradient. The clip scale, the step counters
    and the learning rate are computed once (mirrored variables assigned in
    cross-replica context update every copy). So the update is applied once,
    identically, on every copy.
    """
    pairs = [(g, v) for g, v in grads_and_vars if g is not None]
    if not pairs:
      raise ValueError("apply_gradients got no gradients (all None)")
    grads, given = zip(*pairs)
    variables = [tf_variable(v) for v in given]
    index = {ref: i for i, ref in enumerate(self._refs)}
    slots = [index[v.ref()] for v in variables]
    if self._strategy is not None:
      # The norm of the first device's copy (all copies are equal).
      first = self._strategy.experimental_local_results
      norm = tf.linalg.global_norm([first(g)[0] for g in grads])
    else:
      norm = tf.linalg.global_norm(grads)
    finite = tf.math.is_finite(norm)

    def skip():
      self.nonfinite_updates.assign_add(1)
      return norm

    def update():
      self._apply(grads, variables, slots, norm)
      return norm

    return tf.cond(finite, update, skip)

  def _apply(self, grads, variables, slots, norm) -> None:
    if self._strategy is not None:
      self._apply_mirrored(grads, variables, slots, norm)
      return
    if self.max_grad_norm:
      grads, _ = tf.clip_by_global_norm(
        grads, self.max_grad_norm, use_norm=norm
      )
    step = self.iterations.assign_add(1)
    if self._schedule is not None:
      now = step - 1 if self._clock is None else self._clock
      self.learning_rate.assign(self._schedule(now))
    lr = tf.convert_to_tensor(self.learning_rate)
    if self.kind == "adam":
      t = tf.cast(step, tf.float32)
      b1_power, b2_power = self.beta_1**t, self.beta_2**t
      epsilon = self._adam_epsilon(b2_power)
      for g, v, i in zip(grads, variables, slots):
        tf.raw_ops.ResourceApplyAdam(
          var=v.handle,
          m=self.slot_a[i].handle,
          v=self.slot_b[i].handle,
          beta1_power=b1_power,
          beta2_power=b2_power,
          lr=lr,
          beta1=self.beta_1,
          beta2=self.beta_2,
          epsilon=epsilon,
          grad=tf.cast(g, v.dtype),
        )
    else:
      for g, v, i in zip(grads, variables, slots):
        tf.raw_ops.ResourceApplyRMSProp(
          var=v.handle,
          ms=self.slot_a[i].handle,
          mom=self.slot_b[i].handle,
          lr=lr,
          rho=self.rmsprop_decay,
          momentum=self.momentum,
          epsilon=self.epsilon,
          grad=tf.cast(g, v.dtype),
        )

  def _adam_epsilon(self, b2_power: tf.Tensor) -> tf.Tensor:
    """The epsilon to hand TensorFlow's Adam kernel at this step: scaled by
    sqrt(1 - b2^t) for the 'paper' form (see the module docstring)."""
    if self.epsilon_form == "paper":
      return self.epsilon * tf.sqrt(1.0 - b2_power)
    return tf.constant(self.epsilon, tf.float32)

  def _apply_mirrored(self, grads, variables, slots, norm) -> None:
    """`_apply` for mirrored variables (see apply_gradients)."""
    assert self._strategy is not None
    scale = None
    if self.max_grad_norm:
      # tf.clip_by_global_norm's factor, applied per device below.
      clip = tf.constant(self.max_grad_norm, norm.dtype)
      scale = clip * tf.minimum(1.0 / norm, 1.0 / clip)
    step = tf.convert_to_tensor(self.iterations.assign_add(1))
    if self._schedule is not None:
      now = step - 1 if self._clock is None else self._clock
      self.learning_rate.assign(self._schedule(now))
    lr = tf.convert_to_tensor(self.learning_rate)
    t = tf.cast(step, tf.float32)
    b1_power, b2_power = self.beta_1**t, self.beta_2**t
    epsilon = self._adam_epsilon(b2_power)

    def kernel(v, slot_a, slot_b, g):
      # In the update context: v, slot_a, slot_b and g are this device's.
      if scale is not None:
        g = g * scale
      g = tf.cast(g, v.dtype)
      if self.kind == "adam":
        return tf.raw_ops.ResourceApplyAdam(
          var=v.handle,
          m=slot_a.handle,
          v=slot_b.handle,
          beta1_power=b1_power,
          beta2_power=b2_power,
          lr=lr,
          beta1=self.beta_1,
          beta2=self.beta_2,
          epsilon=epsilon,
          grad=g,
        )
      return tf.raw_ops.ResourceApplyRMSProp(
        var=v.handle,
        ms=slot_a.handle,
        mom=slot_b.handle,
        lr=lr,
        rho=self.rmsprop_decay,
        momentum=self.momentum,
        epsilon=self.epsilon,
        grad=g,
      )

    for g, v, i in zip(grads, variables, slots):
      self._strategy.extended.update(
        v, kernel, args=(self.slot_a[i], self.slot_b[i], g), group=True
      )


def make_optimizer(
  name: str,
  learning_rate: LearningRate,
  epsilon: float = 1e-7,
  max_grad_norm: Optional[float] = None,
  rmsprop_decay: float = 0.99,
  momentum: float = 0.0,
  variables: Optional[Sequence[tf.Variable]] = None,
  clock: Optional[tf.Variable] = None,
  epsilon_form: str = "tensorflow",
) -> Optimizer:
  """Builds an `Optimizer` for `variables` (required: slots are made now,
  so a checkpoint restores into it before the first training step).

  `clock`: the learner step counter that drives a learning-rate schedule
  (read before the agent increments it: the index of this update).
  `epsilon_form`: Adam's, one of ADAM_EPSILON_FORMS (module docstring).
  """
  if variables is None:
    raise ValueError("make_optimizer needs the variables it will train")
  return Optimizer(
    name,
    learning_rate,
    list(variables),
    epsilon=epsilon,
    max_grad_norm=max_grad_norm,
    rmsprop_decay=rmsprop_decay,
    momentum=momentum,
    clock=clock,
    epsilon_form=epsilon_form,
  )


def learner_step_counter() -> tf.Variable:
  """int64 learner steps done: checkpointed, drives the agents' schedules."""
  return tf.Variable(0, dtype=tf.int64, trainable=False, name="learner_step")
