"""Optimizer, learning-rate schedule and step-counter factories for agents."""

from __future__ import annotations

from typing import Optional, Sequence, Union

import keras
import tensorflow as tf

_OPTIMIZERS = ("adam", "rmsprop")


def learning_rate_schedule(
    learning_rate: float,
    decay_steps: Optional[int] = None,
    final_learning_rate: float = 0.0
) -> Union[float, keras.optimizers.schedules.LearningRateSchedule]:
  """Constant, or linear decay to `final_learning_rate` over `decay_steps`.

  The schedule is driven by the optimizer's own iteration counter, which is
  checkpointed with the optimizer, so a restored run resumes mid-schedule.
  """
  if not learning_rate > 0:
    raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
  if decay_steps is None:
    return float(learning_rate)
  if decay_steps < 1:
    raise ValueError(f"decay_steps must be >= 1 (or None for a constant "
                     f"rate), got {decay_steps}")
  if not 0 <= final_learning_rate <= learning_rate:
    raise ValueError(f"final_learning_rate must be in [0, learning_rate="
                     f"{learning_rate}], got {final_learning_rate}")
  return keras.optimizers.schedules.PolynomialDecay(
      initial_learning_rate=float(learning_rate),
      decay_steps=int(decay_steps),
      end_learning_rate=float(final_learning_rate),
      power=1.0)


def make_optimizer(name: str,
                   learning_rate,
                   epsilon: float = 1e-7,
                   max_grad_norm: Optional[float] = None,
                   rmsprop_decay: float = 0.99,
                   momentum: float = 0.0,
                   variables: Optional[Sequence[tf.Variable]] = None
                  ) -> keras.optimizers.Optimizer:
  """Builds a Keras 3 optimizer.

  Args:
    name: 'adam' or 'rmsprop'.
    learning_rate: float or LearningRateSchedule.
    epsilon: numerical-stability term of the second-moment denominator.
    max_grad_norm: clip gradients by global norm; None or 0 disables.
    rmsprop_decay: RMSProp's rho (IMPALA used 0.99).
    momentum: RMSProp momentum.
    variables: when given, the optimizer's slots are created for them now,
      so a checkpoint restores into it before the first training step.
  """
  if not epsilon > 0:
    raise ValueError(f"optimizer epsilon must be > 0, got {epsilon}")
  if max_grad_norm is not None and max_grad_norm < 0:
    raise ValueError(f"max_grad_norm must be >= 0 (0 or None disables "
                     f"clipping), got {max_grad_norm}")
  clipnorm = float(max_grad_norm) if max_grad_norm else None
  if name == "adam":
    optimizer = keras.optimizers.Adam(learning_rate=learning_rate,
                                      epsilon=epsilon,
                                      global_clipnorm=clipnorm)
  elif name == "rmsprop":
    optimizer = keras.optimizers.RMSprop(learning_rate=learning_rate,
                                         rho=rmsprop_decay, momentum=momentum,
                                         epsilon=epsilon,
                                         global_clipnorm=clipnorm)
  else:
    raise ValueError(f"optimizer {name!r} is unknown; allowed: "
                     f"{', '.join(_OPTIMIZERS)}")
  if variables is not None:
    optimizer.build(variables)
  return optimizer


def learner_step_counter() -> tf.Variable:
  """int64 learner steps done: checkpointed, drives the agents' schedules."""
  return tf.Variable(0, dtype=tf.int64, trainable=False, name="learner_step")
