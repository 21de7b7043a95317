"""Checks one StepRequest against its session before the learner sees it.

Every failure is a ValueError whose message names the field and what was
expected; the server turns it into INVALID_ARGUMENT for that stream only.
The happy path costs a few vectorised NumPy calls per field; messages that
need lookups (who owns an env id) are built only on the error path.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional

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
    The StepBatch; arrays are read-only views of the received bytes.

  Raises:
    ValueError naming the field and what was expected.
  """
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
  _check_values(arrays, num_truncated, limits)
  _check_episodes(
    arrays["episode_return"],
    arrays["episode_length"],
    int(np.count_nonzero(terminated | truncated)),
    limits,
  )
  return StepBatch(**arrays)


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
