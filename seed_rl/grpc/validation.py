"""Checks one StepRequest against its session before the learner sees it.

Every failure is a ValueError whose message names the field and what was
expected; the server turns it into INVALID_ARGUMENT for that stream only.
This runs for every message of every actor on the learner's hot thread, so it
has two paths. The fast path (`_check_fast`) compares the whole message with
the session's expected layout (`_Layout`, built once per session) by bytes and
list comparisons, without NumPy calls on tiny arrays; it only ever accepts.
Whatever it is not sure of (an error, but also e.g. permuted env ids or a
large reward) goes to the detailed checks (`_check_in_detail`), which accept
it or raise the error naming the field. Messages that need lookups (who owns
an env id) are built only on the error path.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from seed_rl.common.specs import ArraySpec, StepBatch
from seed_rl.grpc import codec
from seed_rl.grpc import seed_rl_pb2
from seed_rl.grpc.sessions import Session

# One entry per env of the session, in this dtype.
_PER_ENV_DTYPES = tuple(
  (name, np.dtype(dtype))
  for name, dtype in (
    ("env_ids", "int32"),
    ("run_ids", "int64"),
    ("reward", "float32"),
    ("terminated", "bool"),
    ("truncated", "bool"),
  )
)
_EPISODE_DTYPES = (
  ("episode_return", np.dtype("float32")),
  ("episode_length", np.dtype("int32")),
)


@dataclasses.dataclass(frozen=True)
class ValueLimits:
  """Largest magnitudes the learner accepts; beyond them a message is refused
  (INVALID_ARGUMENT naming the field) before any value reaches training.

  The defaults are far beyond any real environment's rewards and float
  observations, yet small enough that squares and sums over a batch stay
  finite in float32 (3e38): one forged reward of 3e38 would otherwise make
  the loss infinite and the weights NaN.
  """

  max_abs_reward: float = 1e6
  max_abs_observation: float = 1e6

  def __post_init__(self):
    for name in ("max_abs_reward", "max_abs_observation"):
      if not getattr(self, name) > 0:
        raise ValueError(
          f"ValueLimits.{name} must be > 0, got {getattr(self, name)}"
        )


def _check_bound(
  name: str, array: np.ndarray, bound: float, env_ids: Optional[np.ndarray]
) -> None:
  if array.dtype.kind != "f" or not array.size:
    return
  flat = array.reshape(array.shape[0], -1)
  too_big = np.abs(flat) > bound
  if not too_big.any():
    return
  row = int(np.flatnonzero(too_big.any(axis=1))[0])
  value = flat[row][too_big[row]][0]
  where = f"env id {env_ids[row]}" if env_ids is not None else f"row {row}"
  raise ValueError(
    f"{name}: {value:g} at {where} exceeds the learner's "
    f"limit of {bound:g} in magnitude (ValueLimits)"
  )


def _check_episodes(
  episode_return: np.ndarray,
  episode_length: np.ndarray,
  ended: int,
  limits: ValueLimits,
) -> None:
  """Statistics come only for the envs that ended in this very message."""
  if episode_return.shape[0] != ended:
    raise ValueError(
      f"episode_return: {episode_return.shape[0]} entries, "
      f"expected {ended} (one per env whose terminated or "
      f"truncated flag is set in this step)"
    )
  if ended and episode_length.min() < 1:
    raise ValueError(
      f"episode_length: {int(episode_length.min())}, expected "
      f">= 1 (agent steps of the ended episode)"
    )
  if ended:
    bound = episode_length.astype(np.float64) * limits.max_abs_reward
    if (np.abs(episode_return) > bound).any():
      i = int(np.argmax(np.abs(episode_return) > bound))
      raise ValueError(
        f"episode_return: {episode_return[i]:g} over "
        f"{episode_length[i]} steps exceeds "
        f"episode_length x max_abs_reward"
      )


def _check_dtype(name: str, array: np.ndarray, expected: np.dtype) -> None:
  if array.dtype != expected:
    raise ValueError(
      f"{name}: dtype {array.dtype.name}, expected {expected.name}"
    )


def _check_vector(name: str, array: np.ndarray, k: int, session: Session):
  if array.ndim != 1:
    raise ValueError(
      f"{name}: shape {list(array.shape)}, expected [{k}] (one entry per env)"
    )
  if array.shape[0] != k:
    raise ValueError(
      f"{name}: {array.shape[0]} entries, expected {k} (one per "
      f"env of {session.describe()})"
    )


def _check_rows(
  name: str, array: np.ndarray, rows: int, row_shape: tuple, rows_are: str
) -> None:
  expected = (rows,) + row_shape
  if array.shape == expected:
    return
  if array.ndim == len(expected) and array.shape[1:] == row_shape:
    raise ValueError(
      f"{name}: {array.shape[0]} rows, expected {rows} ({rows_are})"
    )
  raise ValueError(
    f"{name}: shape {list(array.shape)}, expected "
    f"{list(expected)} ([rows, *obs_shape] with {rows_are})"
  )


def _check_finite(name: str, array: np.ndarray, env_ids: Optional[np.ndarray]):
  if array.dtype.kind != "f" or not array.size or np.isfinite(array).all():
    return
  flat = array.reshape(array.shape[0], -1) if array.ndim > 1 else array[:, None]
  row = int(np.flatnonzero(~np.isfinite(flat).all(axis=1))[0])
  bad = flat[row][~np.isfinite(flat[row])][0]
  where = f"env id {env_ids[row]}" if env_ids is not None else f"row {row}"
  raise ValueError(
    f"{name}: non-finite value {bad} at {where}; expected finite floats"
  )


def _check_env_ids(
  env_ids: np.ndarray,
  session: Session,
  num_envs_total: int,
  owner_of: Callable[[int], Optional[Session]],
) -> None:
  if env_ids.tobytes() == session.env_ids_bytes:  # the usual order
    return
  relative = env_ids.astype(np.int64) - session.first_env_id
  if relative.min() >= 0 and relative.max() < session.num_envs:
    counts = np.bincount(relative, minlength=session.num_envs)
    if counts.max() > 1:
      dup = int(np.argmax(counts)) + session.first_env_id
      raise ValueError(
        f"env_ids: duplicate env id {dup}; each env of "
        f"{session.describe()} must appear exactly once"
      )
    return
  for env_id in env_ids.tolist():
    if session.first_env_id <= env_id < session.end_env_id:
      continue
    if not 0 <= env_id < num_envs_total:
      raise ValueError(
        f"env_ids: env id {env_id} is outside the learner's "
        f"range 0..{num_envs_total - 1}; this stream is "
        f"{session.describe()}"
      )
    owner = owner_of(env_id)
    belongs = (
      f"belongs to actor {owner.actor_id}"
      if owner is not None
      else "belongs to no connected actor"
    )
    raise ValueError(
      f"env_ids: env id {env_id} {belongs}; this stream is {session.describe()}"
    )


def check_step_request(
  request: seed_rl_pb2.StepRequest,
  observation_spec: ArraySpec,
  session: Session,
  num_envs_total: int,
  owner_of: Callable[[int], Optional[Session]],
  limits: ValueLimits = ValueLimits(),
) -> StepBatch:
  """Decodes `request` and checks it fits `session`.

  Args:
    request: the StepRequest received on the session's stream.
    observation_spec: per-env observation spec on the wire.
    session: the stream's session (K = session.num_envs).
    num_envs_total: environments served by the learner.
    owner_of: env id -> live session owning it, for error messages.
    limits: largest accepted rewards and float observations.

  Returns:
    The StepBatch. Its arrays are read-only: views of the received bytes, or
    constant arrays shared between batches where equal to them (empty fields,
    all-false flags, the session's env ids in the usual order).

  Raises:
    ValueError naming the field and what was expected.
  """
  layout = layout_of(session, observation_spec, limits)
  batch = _check_fast(request, layout, session)
  if batch is not None:
    return batch
  return _check_in_detail(
    request, observation_spec, session, num_envs_total, owner_of, limits
  )


def _check_in_detail(
  request: seed_rl_pb2.StepRequest,
  observation_spec: ArraySpec,
  session: Session,
  num_envs_total: int,
  owner_of: Callable[[int], Optional[Session]],
  limits: ValueLimits,
) -> StepBatch:
  """check_step_request field by field, so that the error names the first
  wrong field; the arrays are views of the received bytes."""
  arrays = codec.decode_step_fields(request)
  num_truncated = _check_layout(arrays, observation_spec, session)
  env_ids = arrays["env_ids"]
  terminated, truncated = arrays["terminated"], arrays["truncated"]
  _check_env_ids(env_ids, session, num_envs_total, owner_of)
  if num_truncated and np.count_nonzero(terminated):
    both = terminated & truncated
    if both.any():
      env_id = int(env_ids[np.argmax(both)])
      raise ValueError(
        f"terminated, truncated: both set for env id {env_id}; "
        f"an episode ends either by termination or by "
        f"truncation"
      )
  _check_life_lost(arrays, session)
  _check_values(arrays, num_truncated, limits)
  _check_episodes(
    arrays["episode_return"],
    arrays["episode_length"],
    int(np.count_nonzero(terminated | truncated)),
    limits,
  )
  return StepBatch(**arrays)


def _check_life_lost(arrays: Dict[str, np.ndarray], session: Session) -> None:
  """The optional life_lost flags: bool [K], none where an episode ended
  (a life loss that ends the game is that episode's end)."""
  life_lost = arrays.get("life_lost")
  if life_lost is None:
    return
  _check_dtype("life_lost", life_lost, _BOOL)
  _check_vector("life_lost", life_lost, session.num_envs, session)
  both = life_lost & (arrays["terminated"] | arrays["truncated"])
  if both.any():
    env_id = int(arrays["env_ids"][np.argmax(both)])
    raise ValueError(
      f"life_lost: set for env id {env_id}, whose episode ended in this "
      f"step; a life loss that ends the game is reported only as the "
      f"episode's end (terminated or truncated)"
    )


def _check_layout(
  arrays: Dict[str, np.ndarray], observation_spec: ArraySpec, session: Session
) -> int:
  """Every field's dtype and shape: K rows of the per-env fields, one final
  observation per truncated env, E entries of the per-episode fields.
  Returns the number of truncated envs."""
  k = session.num_envs
  for name, dtype in _PER_ENV_DTYPES:
    _check_dtype(name, arrays[name], dtype)
    _check_vector(name, arrays[name], k, session)
  observation_dtype = np.dtype(observation_spec.dtype)
  for name in ("observation", "final_observation"):
    _check_dtype(name, arrays[name], observation_dtype)
  for name, dtype in _EPISODE_DTYPES:
    _check_dtype(name, arrays[name], dtype)
  _check_rows(
    "observation",
    arrays["observation"],
    k,
    observation_spec.shape,
    f"K={k}, one per env",
  )
  num_truncated = int(np.count_nonzero(arrays["truncated"]))
  _check_rows(
    "final_observation",
    arrays["final_observation"],
    num_truncated,
    observation_spec.shape,
    f"{num_truncated}, one per truncated env",
  )
  episode_return = arrays["episode_return"]
  episode_length = arrays["episode_length"]
  for name in ("episode_return", "episode_length"):
    if arrays[name].ndim != 1:
      raise ValueError(
        f"{name}: shape {list(arrays[name].shape)}, expected "
        f"[E] (one entry per finished episode)"
      )
  if episode_return.shape != episode_length.shape:
    raise ValueError(
      f"episode_length: {episode_length.shape[0]} entries but "
      f"episode_return has {episode_return.shape[0]}; they must "
      f"have equal length (one per finished episode)"
    )
  return num_truncated


def _check_values(
  arrays: Dict[str, np.ndarray], num_truncated: int, limits: ValueLimits
) -> None:
  """Rewards, observations and episode returns are finite, and rewards and
  float observations within `limits`; errors name the env id."""
  env_ids, truncated = arrays["env_ids"], arrays["truncated"]
  _check_finite("reward", arrays["reward"], env_ids)
  _check_finite("observation", arrays["observation"], env_ids)
  if num_truncated:
    _check_finite(
      "final_observation", arrays["final_observation"], env_ids[truncated]
    )
  _check_finite("episode_return", arrays["episode_return"], None)
  _check_bound("reward", arrays["reward"], limits.max_abs_reward, env_ids)
  _check_bound(
    "observation", arrays["observation"], limits.max_abs_observation, env_ids
  )
  if num_truncated:
    _check_bound(
      "final_observation",
      arrays["final_observation"],
      limits.max_abs_observation,
      env_ids[truncated],
    )


# --- fast path ---------------------------------------------------------------

# The request's nine tensors in StepBatch field order, and getters that map()
# applies to all nine: C loops, no bytecode per field.
_TENSORS = operator.attrgetter(*codec.STEP_FIELDS)
_DTYPE, _SHAPE, _DATA = (
  operator.attrgetter(a) for a in ("dtype", "shape", "data")
)
_BOOL_BYTES = b"\x00\x01"
_BOOL, _I32, _I64, _F32 = (
  codec.WIRE_DTYPES[name] for name in ("bool", "int32", "int64", "float32")
)


def _safe_last_bytes(dtype: np.dtype, bound: float) -> bytes:
  """The values of a little-endian float's last byte (its sign and top
  exponent bits) for which every float ending in that byte is finite and at
  most `bound` in magnitude.

  A payload whose every `itemsize`-th byte is one of them holds only such
  floats: one slice and one bytes.translate instead of NumPy calls, which cost
  microseconds each on small arrays. Floats near the bound have other last
  bytes and go to the detailed checks, which decide exactly.
  """
  # The largest magnitude ending in each byte: all lower bytes 0xff.
  largest = np.frombuffer(
    b"".join(b"\xff" * (dtype.itemsize - 1) + bytes([b]) for b in range(256)),
    dtype,
  ).astype(np.float64)
  ok = np.isfinite(largest) & (np.abs(largest) <= bound)
  return bytes(np.flatnonzero(ok).tolist())


def all_within(payload: bytes, itemsize: int, safe_last_bytes: bytes) -> bool:
  """Whether every float in `payload` ends in one of `safe_last_bytes`."""
  return not payload[itemsize - 1 :: itemsize].translate(None, safe_last_bytes)


def _safe_observation_bytes(
  dtype: np.dtype, limits: ValueLimits
) -> Optional[bytes]:
  """_Layout.safe_observation: what the detailed checks check by dtype."""
  if dtype.kind == "f":
    return _safe_last_bytes(dtype, limits.max_abs_observation)
  return _BOOL_BYTES if dtype.kind == "b" else None


def _wire_name(dtype: np.dtype) -> Optional[str]:
  """The Tensor.dtype that decodes to exactly `dtype`; None (which no message
  matches) when there is none."""
  return dtype.name if codec.WIRE_DTYPES.get(dtype.name) == dtype else None


@dataclasses.dataclass(frozen=True)
class _Layout:
  """A session's well-formed StepRequest, compared whole by the fast path.

  Built once per session (again if the observation spec or limits change).
  The tuples hold one entry per StepBatch field, in order.
  """

  observation_spec: ArraySpec
  limits: ValueLimits
  dtype_names: Tuple[Optional[str], ...]
  shapes: Tuple[List[int], ...]  # lists: they compare equal to Tensor.shape
  sizes: Tuple[int, ...]  # payload bytes
  no_flags: bytes  # K false bools
  # Every bit but bit 0 of each of K bytes read as an integer (negative: the
  # bits beyond K bytes too).
  not_flag_bits: int
  observation_dtype: np.dtype
  observation_rows: Tuple[int, ...]  # (K, *obs_shape)
  # Last bytes of the floats within the limits (_safe_last_bytes); None for
  # integer observations (not checked), b"\0\1" for bool ones.
  safe_reward: bytes
  safe_observation: Optional[bytes]
  # Read-only arrays shared by the batches whose fields equal them.
  env_ids: np.ndarray
  false_flags: np.ndarray
  no_final_observation: np.ndarray
  no_episodes: Tuple[np.ndarray, np.ndarray]
  # (truncated, ended) -> shapes_and_sizes(); at most (K + 1)^2 keys, as
  # _count_ends counts flags within K bytes only.
  _with_ends: Dict[Tuple[int, int], tuple] = dataclasses.field(
    default_factory=dict
  )

  def built_for(self, observation_spec: ArraySpec, limits: ValueLimits) -> bool:
    # The server passes the same two objects with every message.
    if self.observation_spec is observation_spec and self.limits is limits:
      return True
    spec = self.observation_spec
    return (spec.dtype, spec.shape, self.limits) == (
      observation_spec.dtype,
      observation_spec.shape,
      limits,
    )

  def shapes_and_sizes(self, num_truncated: int, ended: int):
    """Expected shapes and payload sizes; `shapes` and `sizes` are those of
    a step where no env ended. When some did, the last three fields
    (final_observation, episode_return, episode_length) grow."""
    if not ended:
      return self.shapes, self.sizes
    key = (num_truncated, ended)
    cached = self._with_ends.get(key)
    if cached is None:
      cached = self._with_ends[key] = self._grown(num_truncated, ended)
    return cached

  def _grown(self, num_truncated: int, ended: int):
    row_shape = list(self.observation_rows[1:])
    row_size = self.sizes[5] // self.observation_rows[0]
    shapes = self.shapes[:6] + ([num_truncated, *row_shape], [ended], [ended])
    sizes = self.sizes[:6] + (
      num_truncated * row_size,
      ended * _F32.itemsize,  # episode_return
      ended * _I32.itemsize,  # episode_length
    )
    return shapes, sizes


def _build_layout(
  session: Session, observation_spec: ArraySpec, limits: ValueLimits
) -> _Layout:
  k, row_shape = session.num_envs, observation_spec.shape
  observation_dtype = np.dtype(observation_spec.dtype)
  dtypes = [dtype for _, dtype in _PER_ENV_DTYPES]
  dtypes += [observation_dtype] * 2 + [dtype for _, dtype in _EPISODE_DTYPES]
  shapes = ([k],) * 5 + ([k, *row_shape], [0, *row_shape], [0], [0])
  sizes = tuple(
    math.prod(shape) * dtype.itemsize for shape, dtype in zip(shapes, dtypes)
  )
  empty = [
    np.frombuffer(b"", dtype).reshape(shape)
    for dtype, shape in zip(dtypes[6:], shapes[6:])
  ]
  return _Layout(
    observation_spec=observation_spec,
    limits=limits,
    dtype_names=tuple(_wire_name(dtype) for dtype in dtypes),
    shapes=shapes,
    sizes=sizes,
    no_flags=bytes(k),
    not_flag_bits=~int.from_bytes(b"\x01" * k, "little"),
    observation_dtype=observation_dtype,
    observation_rows=(k, *row_shape),
    safe_reward=_safe_last_bytes(_F32, limits.max_abs_reward),
    safe_observation=_safe_observation_bytes(observation_dtype, limits),
    env_ids=np.frombuffer(session.env_ids_bytes, _I32),
    false_flags=np.frombuffer(bytes(k), _BOOL),
    no_final_observation=empty[0],
    no_episodes=(empty[1], empty[2]),
  )


def layout_of(
  session: Session, observation_spec: ArraySpec, limits: ValueLimits
) -> _Layout:
  layout = session.expected_layout
  if layout is None or not layout.built_for(observation_spec, limits):
    layout = session.expected_layout = _build_layout(
      session, observation_spec, limits
    )
  return layout


def _check_fast(
  request: seed_rl_pb2.StepRequest, layout: _Layout, session: Session
) -> Optional[StepBatch]:
  """The batch if `request` surely passes _check_in_detail, else None.

  Everything is compared at once against `layout`: dtype names, shapes and
  payload sizes (which is all decode_tensor checks, bool payloads aside),
  the env ids' bytes, and the values through their last bytes.
  """
  if request.HasField("life_lost"):  # a few steps per game: in detail
    return None
  tensors = _TENSORS(request)
  # An absent field reads as an empty Tensor, whose dtype '' matches nothing.
  if tuple(map(_DTYPE, tensors)) != layout.dtype_names:
    return None
  payloads = tuple(map(_DATA, tensors))
  ends = _count_ends(payloads[3], payloads[4], layout)  # the flags
  if ends is None:
    return None
  num_truncated, ended = ends
  shapes, sizes = layout.shapes_and_sizes(num_truncated, ended)
  if (
    payloads[0] != session.env_ids_bytes  # other orders: checked in detail
    or tuple(map(_SHAPE, tensors)) != shapes
    or tuple(map(len, payloads)) != sizes
    or not _values_within(layout, payloads, num_truncated)
  ):
    return None
  batch = _decode_fast(layout, payloads, num_truncated, ended)
  if ended and not _episodes_plausible(batch, layout.limits.max_abs_reward):
    return None
  return batch


def _count_ends(
  terminated: bytes, truncated: bytes, layout: _Layout
) -> Optional[Tuple[int, int]]:
  """(truncated envs, ended envs) of the flag payloads; None unless every
  byte is 0 or 1 and no env has both flags (lengths are checked later)."""
  if terminated == truncated == layout.no_flags:  # the usual step
    return 0, 0
  # Each payload read as one integer: bit 8i is env i's flag when the bytes
  # are 0 and 1, and any other bit set is a byte that is neither.
  term = int.from_bytes(terminated, "little")
  trunc = int.from_bytes(truncated, "little")
  if (term | trunc) & layout.not_flag_bits or term & trunc:
    return None
  return trunc.bit_count(), (term | trunc).bit_count()


def _values_within(
  layout: _Layout, payloads: Tuple[bytes, ...], num_truncated: int
) -> bool:
  """Rewards, and float or bool observations, are finite and within limits
  (bool ones hold only 0 and 1) by their last bytes."""
  reward, observation, final_observation = payloads[2], payloads[5], payloads[6]
  if not all_within(reward, _F32.itemsize, layout.safe_reward):
    return False
  safe = layout.safe_observation
  if safe is None:  # integer observations: any value is valid
    return True
  itemsize = layout.observation_dtype.itemsize
  return all_within(observation, itemsize, safe) and (
    not num_truncated or all_within(final_observation, itemsize, safe)
  )


def _decode_fast(
  layout: _Layout, payloads: Tuple[bytes, ...], num_truncated: int, ended: int
) -> StepBatch:
  """The StepBatch of payloads that passed the fast checks: read-only views
  of them, or the layout's shared arrays where they are equal."""
  (_, run_ids, reward, terminated, truncated, observation, final_observation,
   episode_return, episode_length) = payloads  # fmt: skip
  view, dtype = np.frombuffer, layout.observation_dtype
  no_flags = layout.no_flags
  batch = StepBatch(
    layout.env_ids,  # equal to the payload: compared by _check_fast
    view(run_ids, _I64),
    view(reward, _F32),
    layout.false_flags if terminated == no_flags else view(terminated, _BOOL),
    layout.false_flags if truncated == no_flags else view(truncated, _BOOL),
    # One call where frombuffer + reshape take two; read-only like them.
    np.ndarray(layout.observation_rows, dtype, observation),
    layout.no_final_observation,
    *layout.no_episodes,
  )
  if num_truncated:
    rows = (num_truncated, *layout.observation_rows[1:])
    batch.final_observation = np.ndarray(rows, dtype, final_observation)
  if ended:
    batch.episode_return = view(episode_return, _F32)
    batch.episode_length = view(episode_length, _I32)
  return batch


def _episodes_plausible(batch: StepBatch, max_abs_reward: float) -> bool:
  """_check_episodes' value checks, without NumPy calls: lengths >= 1 and
  returns finite and within length x max_abs_reward (same float64 math)."""
  returns = batch.episode_return.tolist()
  lengths = batch.episode_length.tolist()
  shortest = min(lengths)
  if shortest < 1 or not math.isfinite(sum(returns)):
    return False
  # One bound for all (exact for a single episode), else episode by episode.
  return max(map(abs, returns)) <= shortest * max_abs_reward or all(
    abs(r) <= n * max_abs_reward for r, n in zip(returns, lengths)
  )
