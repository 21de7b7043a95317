"""Checks shared by the agents' config dataclasses (`__post_init__`).

Each raises ValueError naming the config class and the field, the value
found and what is allowed, e.g. "VtraceConfig.batch_size must be a positive
integer, got 0". `why` arguments append the reason a bad value would break
training, in parentheses.
"""

from __future__ import annotations

import numbers
from typing import Any, NoReturn, Sequence, Tuple

# Values of every agent's `reward_clipping` field (an agent may add modes,
# e.g. V-trace's 'soft_asymmetric'): 'none', or 'abs_one' to clip each raw
# reward to [-1, 1] before any target is computed (DQN on Atari, Mnih et al.
# 2015).
REWARD_CLIPPING = ("none", "abs_one")
# Values of every agent's `lr_schedule` field: 'constant', or 'linear' from
# learning_rate to 0 at total_learner_steps (learner steps).
LR_SCHEDULES = ("constant", "linear")


def fail(config: Any, message: str) -> NoReturn:
  """Raises ValueError with `message` prefixed by the config's class name."""
  raise ValueError(f"{type(config).__name__}.{message}")


def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def positive_ints(config: Any, *names: str) -> None:
  """Each field is an int >= 1 (bools are not counts)."""
  for name in names:
    value = getattr(config, name)
    if not _is_int(value) or value < 1:
      fail(config, f"{name} must be a positive integer, got {value!r}")


def positive(config: Any, *names: str, why: str = "") -> None:
  """Each field is > 0."""
  for name in names:
    value = getattr(config, name)
    if not value > 0:
      fail(config, f"{name} must be > 0{_reason(why)}, got {value}")


def non_negative(config: Any, *names: str, why: str = "") -> None:
  """Each field is >= 0."""
  for name in names:
    value = getattr(config, name)
    if not value >= 0:
      fail(config, f"{name} must be >= 0{_reason(why)}, got {value}")


def in_unit_interval(config: Any, *names: str) -> None:
  """Each field lies in [0, 1] (probabilities, exponents, mixing weights)."""
  for name in names:
    value = getattr(config, name)
    if not 0 <= value <= 1:
      fail(config, f"{name} must be in [0, 1], got {value}")


def discount(config: Any, name: str = "discount") -> None:
  """A discount factor gamma in [0, 1] (0: every step is its own bandit,
  as in the synthetic pipeline check)."""
  value = getattr(config, name)
  if not 0 <= value <= 1:
    fail(config, f"{name} must be in [0, 1], got {value}")


def max_grad_norm(config: Any, name: str = "max_grad_norm") -> None:
  """A global-norm gradient clip: None or 0 (off), or > 0."""
  value = getattr(config, name)
  if value is not None and value < 0:
    fail(
      config, f"{name} must be >= 0 (0 or None disables clipping), got {value}"
    )


def optimizer_epsilon(config: Any, name: str) -> None:
  """The epsilon in an adaptive optimizer's denominator."""
  positive(config, name, why="it guards a division")


# Where a clipped surrogate anchors its ratio (PPO and V-trace configs).
SURROGATE_ANCHORS = ("behaviour", "proximal")


def choice(config: Any, name: str, allowed: Sequence[str]) -> None:
  """The field is one of `allowed` (strings)."""
  value = getattr(config, name)
  if value not in allowed:
    fail(config, f"{name} {value!r} is unknown; allowed: {', '.join(allowed)}")


def surrogate_anchor(config: Any, loss_field: str) -> None:
  """`surrogate_anchor` is 'behaviour' or 'proximal', and 'proximal' (the
  decoupled clipped surrogate) comes with the loss field set to 'clip'."""
  choice(config, "surrogate_anchor", SURROGATE_ANCHORS)
  loss = getattr(config, loss_field)
  if config.surrogate_anchor == "proximal" and loss != "clip":
    fail(
      config,
      f"surrogate_anchor 'proximal' anchors the clipped surrogate; "
      f"{loss_field} {loss!r} has none (use {loss_field} 'clip' or "
      f"surrogate_anchor 'behaviour')",
    )


def layer_widths(config: Any, name: str = "head_hidden") -> Tuple[int, ...]:
  """A tuple of positive hidden-layer widths (a list is accepted; () means no
  hidden layer). Returns it as a tuple of ints for the config to store."""
  value = getattr(config, name)
  if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
    fail(
      config,
      f"{name} must be a tuple of hidden-layer widths, e.g. (512,) for one "
      f"layer or () for none, got {value!r}",
    )
  if any(
    isinstance(w, bool) or not isinstance(w, numbers.Integral) or w < 1
    for w in value
  ):
    fail(config, f"{name} must hold positive layer widths, got {value!r}")
  return tuple(int(w) for w in value)


def queue_capacity(config: Any, name: str = "queue_capacity") -> None:
  """An unroll queue (None: a default) holds at least one training batch."""
  value = getattr(config, name)
  if value is not None and value < config.batch_size:
    fail(
      config,
      f"{name} ({value}) must be >= batch_size "
      f"({config.batch_size}), otherwise actors block before a full "
      f"training batch can be queued",
    )


def min_replay_size(config: Any) -> None:
  """Training starts after min_replay_size items, so replay must hold them."""
  if config.min_replay_size > config.replay_capacity:
    fail(
      config,
      f"min_replay_size ({config.min_replay_size}) must be <= "
      f"replay_capacity ({config.replay_capacity}), otherwise training "
      f"would never start: it waits for more items than replay can hold",
    )


def rate_limiter_error_buffer(config: Any, value) -> None:
  """The rate limiter's allowed drift (None: a default chosen elsewhere).

  One training step samples batch_size items at once; a drift budget below
  half of that can never admit it.
  """
  if value is not None and (not value > 0 or 2 * value < config.batch_size):
    fail(
      config,
      f"rate_limiter_error_buffer ({value}) must be >= "
      f"batch_size / 2 ({config.batch_size / 2}): a larger training batch "
      f"than 2 * error_buffer deadlocks acting and training",
    )


def torso_factory(
  config: Any, name: str = "torso", allow_none: bool = False
) -> None:
  """The field builds the observation torso: a callable returning a layer."""
  value = getattr(config, name)
  if allow_none and value is None:
    return
  if not callable(value):
    fail(
      config,
      f"{name} must be a callable returning a Keras layer (e.g. "
      f"@mlp_torso or @atari_torso){' or None' if allow_none else ''}, "
      f"got {value!r}",
    )


def scheduled_optimizer(config: Any, optimizers: Sequence[str]) -> None:
  """The optimizer group of a config with `learning_rate`, `lr_schedule`
  ('constant' or 'linear' to 0 at `total_learner_steps`),
  `optimizer_epsilon`, `max_grad_norm`, `optimizer` (one of `optimizers`)
  and `rmsprop_decay` (A2C's and ACER's)."""
  positive(config, "learning_rate")
  choice(config, "lr_schedule", LR_SCHEDULES)
  if config.lr_schedule == "linear":
    total = config.total_learner_steps
    if not _is_int(total) or total < 1:
      fail(
        config,
        f"total_learner_steps must be a positive number of learner steps "
        f"with lr_schedule='linear' (the learning rate reaches 0 there), "
        f"got {total!r}",
      )
  optimizer_epsilon(config, "optimizer_epsilon")
  max_grad_norm(config)
  choice(config, "optimizer", optimizers)
  if not 0 <= config.rmsprop_decay < 1:
    fail(config, f"rmsprop_decay must be in [0, 1), got {config.rmsprop_decay}")


def _reason(why: str) -> str:
  return f" ({why})" if why else ""
