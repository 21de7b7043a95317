"""The usual StepRequest of a session read straight from its wire bytes.

An actor's usual message (no episode ended, no life lost) differs from its
previous one only in the run ids, rewards and observations, and in the
sequence number at its end; every other byte (field tags, lengths, dtype
names, shapes, the env ids, the all-false flags, the empty per-episode
fields) is the same. So the learner keeps, per session, the bytes of one
such message that passed the checks in full, split around those three
payloads:

    msg = C0 | run_ids [K x 8] | C1 | reward [K x 4] | C2 | observation | C3
          | sequence (field 10: tag 0x50 and a varint, absent when 0)

and reads a later message whose constant parts compare equal by
`bytes.startswith` at their offsets, without a protobuf parse: the
observation is a read-only NumPy view of the received bytes, where parsing
would copy them twice (into the message, then out of `Tensor.data`).

The template only ever accepts: a message it does not match goes to the
protobuf parse and validation.check_step_request, which accept it or name
the wrong field. A matched message parses to the same fields as the message
the template was learned from, except those three payloads and the sequence
(the lengths that frame them are inside the constant parts), so only what
varies is checked here: reward and float observation values by their last
bytes, as validation's fast path does, and the sequence's varint.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from seed_rl.common.specs import ArraySpec, StepBatch
from seed_rl.grpc import codec
from seed_rl.grpc import seed_rl_pb2
from seed_rl.grpc import validation
from seed_rl.grpc.sessions import Session

_SEQUENCE_TAG = 0x50  # field 10, varint
_MAX_VARINT_BYTES = 10
_TENSOR_FIELDS = 9  # StepRequest fields 1..9 are Tensors, in this order
_RUN_IDS, _REWARD, _OBSERVATION = 2, 3, 6  # their field numbers
_DATA = 3  # Tensor.data


def read_varint(buf: bytes, pos: int, end: int) -> Tuple[int, int]:
  """(value, position after it) of the base-128 varint at `pos`; raises
  ValueError if it runs past `end` or over 10 bytes (64 bits)."""
  value, shift = 0, 0
  for i in range(pos, min(end, pos + _MAX_VARINT_BYTES)):
    byte = buf[i]
    value |= (byte & 0x7F) << shift
    if byte < 0x80:
      if value >= 1 << 64:
        raise ValueError("varint over 64 bits")
      return value, i + 1
    shift += 7
  raise ValueError("truncated or overlong varint")


def _fields(buf: bytes, start: int, end: int) -> Iterator[Tuple[int, int, int]]:
  """(field number, start, end) of each field of the message in
  buf[start:end]; length-delimited fields only, ValueError on any other
  wire type (a StepRequest's and a Tensor's fields but `sequence` and the
  packed `shape` are all length-delimited)."""
  pos = start
  while pos < end:
    key, pos = read_varint(buf, pos, end)
    if key & 7 != 2:
      raise ValueError(f"field {key >> 3}: wire type {key & 7}")
    size, pos = read_varint(buf, pos, end)
    if pos + size > end:
      raise ValueError(f"field {key >> 3}: runs past the message")
    yield key >> 3, pos, pos + size
    pos += size


@dataclasses.dataclass(frozen=True)
class WireTemplate:
  """A session's usual StepRequest: constant parts and payload spans."""

  layout: Any  # the validation layout the template was learned under
  length: int  # bytes before the sequence field
  constants: Tuple[Tuple[int, bytes], ...]  # (offset, bytes), C0..C3
  run_ids: Tuple[int, int]  # [start, end) of the payloads
  reward: Tuple[int, int]
  observation: Tuple[int, int]


def learn(wire: bytes, layout: Any) -> Optional[WireTemplate]:
  """The template of `wire`, a usual message that passed validation's fast
  path under `layout`; None unless its fields 1..9 come in order, each
  Tensor's data last in it, and then at most the sequence."""
  end = len(wire)
  try:
    fields = list(_top_level(wire, end))
  except ValueError:
    return None
  numbers = [number for number, _, _ in fields]
  if numbers != list(range(1, _TENSOR_FIELDS + 1)):
    return None
  spans = {}
  for number, start, stop in fields:
    try:
      inner = list(_fields(wire, start, stop))
    except ValueError:
      return None
    # dtype, shape (absent when empty) and data (absent when empty), in order.
    if [n for n, _, _ in inner] not in ([1, 2, 3], [1, 2], [1]):
      return None
    if number in (_RUN_IDS, _REWARD, _OBSERVATION):
      data = inner[-1]
      if data[0] != _DATA or data[2] != stop:
        return None
      spans[number] = data[1:]
  length = fields[-1][2]
  cuts = [0]
  for number in (_RUN_IDS, _REWARD, _OBSERVATION):
    cuts += spans[number]
  cuts.append(length)
  constants = tuple(
    (cuts[i], wire[cuts[i] : cuts[i + 1]]) for i in range(0, len(cuts), 2)
  )
  return WireTemplate(
    layout,
    length,
    constants,
    spans[_RUN_IDS],
    spans[_REWARD],
    spans[_OBSERVATION],
  )


def _top_level(wire: bytes, end: int) -> Iterator[Tuple[int, int, int]]:
  """_fields of the StepRequest, stopping before a trailing sequence."""
  pos = 0
  while pos < end:
    if wire[pos] == _SEQUENCE_TAG:
      _, after = read_varint(wire, pos + 1, end)
      if after != end:
        raise ValueError("fields after the sequence")
      return
    number, start, stop = next(_fields(wire, pos, end))
    yield number, start, stop
    pos = stop


def decode(
  template: WireTemplate, wire: bytes
) -> Optional[Tuple[int, StepBatch]]:
  """(sequence, batch) of `wire` if it matches `template` and its values
  are within the layout's limits, else None.

  The batch's arrays are read-only, as validation's: the observation a view
  of `wire`, run ids and rewards copies of their few bytes (so they are
  aligned), the rest the layout's shared constants.
  """
  size, length = len(wire), template.length
  if not length <= size <= length + 1 + _MAX_VARINT_BYTES:
    return None
  for offset, constant in template.constants:
    if not wire.startswith(constant, offset):
      return None
  sequence = 0
  if size > length:
    if wire[length] != _SEQUENCE_TAG:
      return None
    try:
      sequence, after = read_varint(wire, length + 1, size)
    except ValueError:
      return None
    if after != size:
      return None
  layout = template.layout
  reward = wire[slice(*template.reward)]
  if not validation.all_within(reward, 4, layout.safe_reward):
    return None
  start, stop = template.observation
  dtype = layout.observation_dtype
  safe = layout.safe_observation
  if safe is not None or start % dtype.itemsize:
    # Floats and bools are checked by value (a copy's last bytes); a view
    # of a multi-byte dtype would be misaligned here.
    observation: Any = wire[start:stop]
    itemsize = dtype.itemsize
    if safe is not None and not validation.all_within(
      observation, itemsize, safe
    ):
      return None
    start = 0
  else:
    observation = wire
  return sequence, StepBatch(
    layout.env_ids,
    np.frombuffer(wire[slice(*template.run_ids)], np.dtype("<i8")),
    np.frombuffer(reward, np.dtype("<f4")),
    layout.false_flags,
    layout.false_flags,
    np.ndarray(layout.observation_rows, dtype, observation, start),
    layout.no_final_observation,
    *layout.no_episodes,
  )


class ResponseEncoder:
  """StepResponse wire bytes of an actions array: a prefix fixed by its
  dtype and shape (tags, lengths, dtype name, shape) and then its bytes,
  where a message built and serialized per response costs microseconds.
  The bytes are those StepResponse.SerializeToString gives (tested)."""

  def __init__(self):
    # b"": no prefix fits (then each response is serialized in full).
    self._prefixes: Dict[Tuple[np.dtype, Tuple[int, ...]], bytes] = {}

  def encode(self, actions: np.ndarray) -> bytes:
    key = (actions.dtype, actions.shape)
    prefix = self._prefixes.get(key)
    if prefix is None:
      prefix = self._prefixes[key] = _response_prefix(actions) or b""
    if not prefix:
      return _serialize_response(actions)
    return prefix + actions.tobytes()


def _serialize_response(actions: np.ndarray) -> bytes:
  response = seed_rl_pb2.StepResponse()
  codec.fill_tensor(response.action, actions, "action")
  return response.SerializeToString()


def _response_prefix(actions: np.ndarray) -> Optional[bytes]:
  """The bytes before the payload in `actions`' StepResponse; None where
  the payload is not the message's tail as is (empty, or a dtype the wire
  converts)."""
  wire, data = _serialize_response(actions), actions.tobytes()
  if not data or not wire.endswith(data):
    return None
  return wire[: len(wire) - len(data)]


# Session.wire_template of a session whose messages no template fits.
UNLEARNABLE = False


def check_wire(
  wire: Any,
  observation_spec: ArraySpec,
  session: Session,
  limits: validation.ValueLimits,
) -> Optional[Tuple[int, StepBatch]]:
  """(sequence, batch) of the received bytes `wire` when they match the
  session's template (validation.check_step_request's fast path without a
  parse), else None: parse and check them in full."""
  template = session.wire_template
  if not template or not isinstance(wire, bytes):
    return None
  if template.layout is not validation.layout_of(
    session, observation_spec, limits
  ):
    return None
  return decode(template, wire)


def remember(wire: Any, batch: StepBatch, session: Session) -> None:
  """Learns the session's template from its first message that
  check_step_request's fast path took whole (`batch` holds the layout's
  shared arrays only there) with no episode ended and no life lost; a
  session whose first such message fits no template is not tried again."""
  layout = session.expected_layout
  if (
    session.wire_template is None
    and isinstance(wire, bytes)
    and layout is not None
    and batch.env_ids is layout.env_ids
    and batch.terminated is layout.false_flags
    and batch.truncated is layout.false_flags
    and batch.life_lost is None
  ):
    session.wire_template = learn(wire, layout) or UNLEARNABLE


__all__: List[str] = [
  "ResponseEncoder",
  "UNLEARNABLE",
  "WireTemplate",
  "check_wire",
  "decode",
  "learn",
  "read_varint",
  "remember",
]
