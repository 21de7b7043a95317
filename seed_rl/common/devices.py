"""Where the learner runs inference and training (`LearnerConfig`'s
`training_devices` and `inference_device`).

Default (`training_devices = None`): nothing changes, TensorFlow places
both inference and training on its default device (GPU:0 if there is one,
else the CPU), with no tf.distribute in the way.

With `training_devices = ('GPU:0', 'GPU:1', ...)` an agent that supports it
(its module sets SUPPORTS_TRAINING_DEVICES: V-trace, PPO, A2C, ACER, DQN,
R2D2, SAC, TD3)
creates its network and optimizer variables under a
`tf.distribute.MirroredStrategy` over those devices, so every device holds
a copy of the weights, and each training step splits the batch along B into
equal shards, one per device; inference runs on one device
(`inference_device`, default the first training device). See
seed_rl/agents/multi_device.py and `Optimizer.apply_gradients` for how the
update stays equal to the single-device update.

The learner (`learner_main`) resolves the names once, logs the placement,
and builds the agent inside `use(placement)`; agents read `current()`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Iterator, Optional, Sequence, Tuple

import tensorflow as tf

# Agents whose create_agent honours a multi-device placement (others are
# refused by learner_main when LearnerConfig.training_devices is set).
SUPPORTED_AGENTS_ATTR = "SUPPORTS_TRAINING_DEVICES"


@dataclasses.dataclass(frozen=True)
class Placement:
  """Resolved devices: full TF names ('/device:GPU:0').

  inference_device: where `act` runs; None = TensorFlow's default.
  training_devices: the replicas of the training step; None = one device,
    TensorFlow's default (no strategy).
  strategy: the MirroredStrategy over training_devices, or None.
  """

  inference_device: Optional[str] = None
  training_devices: Optional[Tuple[str, ...]] = None
  strategy: Optional[tf.distribute.Strategy] = None

  @property
  def num_replicas(self) -> int:
    return len(self.training_devices) if self.training_devices else 1

  def describe(self) -> str:
    """One line: which device does inference, which devices train."""
    default = default_device()
    inference = self.inference_device or default
    if not self.training_devices:
      return (
        f"devices: inference on {inference}, training on {default} "
        "(TensorFlow's default device; LearnerConfig.training_devices "
        "unset)"
      )
    return (
      f"devices: inference on {inference}, training on "
      f"{', '.join(self.training_devices)} (MirroredStrategy, "
      f"{self.num_replicas} replicas; each batch split along B)"
    )


def default_device() -> str:
  """The device TensorFlow places ops on by default."""
  gpus = tf.config.list_logical_devices("GPU")
  return gpus[0].name if gpus else tf.config.list_logical_devices("CPU")[0].name


def canonical_name(name: str, option: str = "device") -> str:
  """'/cpu:1', 'GPU:0', '/device:GPU:0' -> '/device:CPU:1', ...; raises
  ValueError (listing the available devices) for an unknown device."""
  available = [d.name for d in tf.config.list_logical_devices()]
  try:
    spec = tf.DeviceSpec.from_string(str(name))
  except (ValueError, TypeError):
    spec = None
  if spec is not None and spec.device_type is not None:
    wanted = (spec.device_type.upper(), spec.device_index or 0)
    for full in available:
      d = tf.DeviceSpec.from_string(full)
      if (str(d.device_type).upper(), d.device_index) == wanted:
        return full
  raise ValueError(
    f"{option}: unknown device {name!r}; available devices: "
    f"{', '.join(available)} (more CPU devices need "
    "tf.config.set_logical_device_configuration before TensorFlow starts)"
  )


def resolve(
  training_devices: Optional[Sequence[str]] = None,
  inference_device: Optional[str] = None,
) -> Placement:
  """Checks the names against this machine's devices, builds the strategy.

  Call after `configure_tf_threads` (listing devices starts TensorFlow).
  """
  inference = (
    canonical_name(inference_device, "LearnerConfig.inference_device")
    if inference_device
    else None
  )
  if not training_devices:
    return Placement(inference_device=inference)
  names = tuple(
    canonical_name(d, "LearnerConfig.training_devices")
    for d in training_devices
  )
  if len(set(names)) != len(names):
    raise ValueError(
      f"LearnerConfig.training_devices names a device twice: {', '.join(names)}"
    )
  return Placement(
    inference_device=inference or names[0],
    training_devices=names,
    strategy=tf.distribute.MirroredStrategy(list(names)),
  )


_current = Placement()


def current() -> Placement:
  """The placement agents are built with (see `use`)."""
  return _current


@contextlib.contextmanager
def use(placement: Placement) -> Iterator[Placement]:
  """Agents created inside take `placement` (restored on exit)."""
  global _current
  previous, _current = _current, placement
  try:
    yield placement
  finally:
    _current = previous


def shard_size(batch_size: int, placement: Placement, what: str) -> int:
  """batch_size / replicas, or a ValueError naming both options."""
  n = placement.num_replicas
  if batch_size % n:
    raise ValueError(
      f"{what} ({batch_size}) must be divisible by the number of "
      f"LearnerConfig.training_devices ({n}: "
      f"{', '.join(placement.training_devices or ())}): each training "
      "step splits the batch into equal shards, one per device"
    )
  return batch_size // n
