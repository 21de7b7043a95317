"""NumPy arrays, ArraySpecs and StepBatches to and from the wire messages.

Tensors travel as raw little-endian bytes in C order. Decoding trusts nothing
the peer sent: the dtype must be a known numeric or bool dtype, the shape
non-negative and the payload exactly `prod(shape) * itemsize` bytes. Decoded
arrays are read-only views of the received bytes (no copy), so a consumer that
wants to write must copy first.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from seed_rl.common.specs import ArraySpec, StepBatch
from seed_rl.grpc import seed_rl_pb2

# The wire dtypes, keyed by the NumPy name that travels in Tensor.dtype.
# Object, string, datetime and complex dtypes are refused on purpose: nothing in
# an RL step needs them, and object arrays cannot be sent as raw bytes.
WIRE_DTYPES = {
  name: np.dtype(name).newbyteorder("<")
  for name in (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
  )
}

# The StepBatch fields every StepRequest carries, in order; then those sent
# only when set (None in the StepBatch otherwise).
STEP_FIELDS = tuple(
  f.name
  for f in dataclasses.fields(StepBatch)
  if f.default is dataclasses.MISSING
)
OPTIONAL_STEP_FIELDS = tuple(
  f.name for f in dataclasses.fields(StepBatch) if f.name not in STEP_FIELDS
)


def _wire_dtype(name: str, what: str) -> np.dtype:
  dtype = WIRE_DTYPES.get(name)
  if dtype is None:
    raise ValueError(
      f"{what}: unknown dtype {name!r}; allowed: {', '.join(WIRE_DTYPES)}"
    )
  return dtype


# Keyed by dtype object: `dtype.name` builds a new string on every call, which
# adds up to microseconds per message.
_NAME_OF_DTYPE = {dtype: name for name, dtype in WIRE_DTYPES.items()}


def _check_shape(shape, what: str) -> tuple:
  shape = tuple(shape)
  if shape and min(shape) < 0:
    raise ValueError(f"{what}: shape {list(shape)} has a negative dimension")
  return shape


def fill_tensor(
  message: seed_rl_pb2.Tensor, array, what: str = "array"
) -> None:
  """Writes `array` into the (sub)message `message` in place.

  Filling a submessage in place avoids the copy that constructing a Tensor and
  assigning it to a parent field would make.
  """
  array = np.asarray(array)
  name = _NAME_OF_DTYPE.get(array.dtype)
  if name is None:  # big-endian or a non-wire dtype
    name = array.dtype.name
    array = array.astype(_wire_dtype(name, what))
  message.dtype = name
  message.shape[:] = array.shape
  message.data = array.tobytes()  # C order whatever the input's layout


def encode_tensor(array, what: str = "array") -> seed_rl_pb2.Tensor:
  """Returns `array` as a Tensor message."""
  message = seed_rl_pb2.Tensor()
  fill_tensor(message, array, what)
  return message


def decode_tensor(
  message: seed_rl_pb2.Tensor, what: str = "tensor"
) -> np.ndarray:
  """Returns the read-only array held by `message`.

  Raises:
    ValueError naming `what`: unknown dtype, negative shape, a shape NumPy
      cannot hold, a payload whose size does not match the shape ("truncated
      payload" when short), or a bool payload holding bytes other than 0
      and 1.
  """
  # Runs for every field of every message: kept to a few C-level calls.
  dtype = WIRE_DTYPES.get(message.dtype)
  if dtype is None:
    dtype = _wire_dtype(message.dtype, what)  # raises naming the allowed dtypes
  shape = tuple(message.shape)
  if shape and min(shape) < 0:
    raise ValueError(f"{what}: shape {list(shape)} has a negative dimension")
  data = message.data  # one copy out of the protobuf arena; kept by the array
  expected = math.prod(shape) * dtype.itemsize
  if len(data) != expected:
    problem = (
      "truncated payload" if len(data) < expected else "oversized payload"
    )
    raise ValueError(
      f"{what}: {problem}: {len(data)} bytes, expected {expected} "
      f"for shape {list(shape)} {message.dtype}"
    )
  # NumPy would carry other bytes as "true" values that compare unequal to
  # True; deleting the valid bytes leaves any others (a C loop, no NumPy call).
  if dtype.kind == "b" and data.translate(None, b"\x00\x01"):
    raise ValueError(f"{what}: bool payload holds bytes other than 0 and 1")
  try:
    return np.frombuffer(data, dtype).reshape(shape)
  except ValueError as e:
    # E.g. a zero dimension next to dimensions whose product overflows:
    # the payload size matches (0 bytes) but NumPy refuses the shape.
    raise ValueError(f"{what}: shape {list(shape)} is not valid: {e}") from None


def encode_spec(spec: ArraySpec) -> seed_rl_pb2.TensorSpec:
  """Returns `spec` as a TensorSpec message."""
  message = seed_rl_pb2.TensorSpec(
    name=spec.name, dtype=spec.dtype, shape=spec.shape
  )
  if spec.minimum is not None:
    fill_tensor(message.minimum, spec.minimum, f"{spec.name}.minimum")
  if spec.maximum is not None:
    fill_tensor(message.maximum, spec.maximum, f"{spec.name}.maximum")
  if spec.num_values is not None:
    message.num_values = spec.num_values
  return message


def decode_spec(message: seed_rl_pb2.TensorSpec, what: str) -> ArraySpec:
  """Returns the ArraySpec held by `message`; ValueError naming `what` if bad."""
  _wire_dtype(message.dtype, f"{what}.dtype")
  shape = _check_shape(message.shape, f"{what}.shape")
  bounds = {}
  for field in ("minimum", "maximum"):
    if message.HasField(field):
      bound = decode_tensor(getattr(message, field), f"{what}.{field}")
      if bound.dtype.name != message.dtype or bound.shape != shape:
        raise ValueError(
          f"{what}.{field}: {bound.dtype.name} {list(bound.shape)}, expected "
          f"{message.dtype} {list(shape)} like the spec"
        )
      bounds[field] = bound
  num_values = message.num_values if message.HasField("num_values") else None
  try:
    return ArraySpec(
      shape=shape,
      dtype=message.dtype,
      name=message.name,
      num_values=num_values,
      minimum=bounds.get("minimum"),
      maximum=bounds.get("maximum"),
    )
  except ValueError as e:
    raise ValueError(f"{what}: {e}") from None


def spec_mismatch(
  learner: ArraySpec, actor: ArraySpec, what: str
) -> Optional[str]:
  """Returns a message naming the first field where the specs differ, or None.

  Bounds are not compared: they describe the environment's action space for
  the agent, and the wire does not depend on them.
  """
  for field in ("dtype", "shape", "num_values"):
    learner_value = getattr(learner, field)
    actor_value = getattr(actor, field)
    if learner_value != actor_value:
      if field == "shape":
        learner_value, actor_value = list(learner_value), list(actor_value)
      return f"{what}.{field}: learner {learner_value}, actor {actor_value}"
  return None


def encode_step_batch(batch: StepBatch) -> seed_rl_pb2.StepRequest:
  """Returns `batch` as a StepRequest (no validation; the learner validates)."""
  request = seed_rl_pb2.StepRequest()
  for name in STEP_FIELDS:
    fill_tensor(getattr(request, name), getattr(batch, name), name)
  for name in OPTIONAL_STEP_FIELDS:
    value = getattr(batch, name)
    if value is not None:
      fill_tensor(getattr(request, name), value, name)
  return request


def decode_step_fields(request: seed_rl_pb2.StepRequest) -> dict:
  """Returns {field: array} for every StepBatch field of `request` (the
  optional ones only when present).

  Checks presence and tensor well-formedness only; what the arrays must hold
  for a given session is checked by validation.check_step_request.
  """
  arrays = {}
  for name in STEP_FIELDS:
    if not request.HasField(name):
      raise ValueError(f"{name}: missing from the StepRequest")
    arrays[name] = decode_tensor(getattr(request, name), name)
  for name in OPTIONAL_STEP_FIELDS:
    if request.HasField(name):
      arrays[name] = decode_tensor(getattr(request, name), name)
  return arrays


def decode_step_request(request: seed_rl_pb2.StepRequest) -> StepBatch:
  """Returns the StepBatch in `request` after the checks of decode_step_fields."""
  return StepBatch(**decode_step_fields(request))
