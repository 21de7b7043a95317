"""check_step_request's two paths, without a server.

The fast path compares a whole message with the session's expected layout
and only ever accepts; everything else goes to the field-by-field checks,
which accept or name the wrong field. These tests pin that split: the fast
path takes the usual messages (and returns the same arrays the detailed
checks would), defers valid messages it cannot vouch for, and leaves every
refusal, with its message, to the detailed checks. Wire-level refusals are
also tested over a real server in test_grpc_protocol and test_fuzz_protocol.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seed_rl.common.specs import ArraySpec, StepBatch
from seed_rl.grpc import codec, seed_rl_pb2, validation
from seed_rl.grpc.sessions import Session

# The detailed bound check of float16 observations casts the 1e6 limit to
# float16 (inf, so any finite value passes) with this warning.
pytestmark = pytest.mark.filterwarnings(
  "ignore:overflow encountered in cast:RuntimeWarning"
)

K = 4
TOTAL = 24  # six actors of K envs
SPECS = {
  "frames": ArraySpec((6, 5), "uint8", "frame"),
  "floats": ArraySpec((4,), "float32", "observation"),
  "doubles": ArraySpec((2,), "float64", "observation"),
  "halves": ArraySpec((3,), "float16", "observation"),
  "bools": ArraySpec((3,), "bool", "mask"),
}
FLOATS = SPECS["floats"]
ENDS = {
  "none": ((), ()),
  "terminated": ((1,), ()),
  "truncated": ((), (2,)),
  "several": ((0, 3), (1,)),
}


def owner_of(env_id: int) -> Optional[Session]:
  actor = env_id // K
  return Session("other", actor, actor * K, K) if actor < 2 else None


def session() -> Session:
  return Session("s", 2, 2 * K, K)  # env ids 8..11


def make_request(
  spec: ArraySpec, seed: int = 0, terminated=(), truncated=()
) -> seed_rl_pb2.StepRequest:
  """A valid message of session(); flags are env indices."""
  rng = np.random.default_rng(seed)
  term, trunc = np.zeros(K, bool), np.zeros(K, bool)
  term[list(terminated)], trunc[list(truncated)] = True, True
  ended = int(term.sum() + trunc.sum())

  def observations(rows):
    values = rng.normal(size=(rows,) + spec.shape) * 100
    return (values > 0 if spec.dtype == "bool" else values).astype(spec.dtype)

  return codec.encode_step_batch(
    StepBatch(
      env_ids=np.arange(2 * K, 3 * K, dtype=np.int32),
      run_ids=rng.integers(0, 2**62, K),
      reward=rng.normal(size=K).astype(np.float32),
      terminated=term,
      truncated=trunc,
      observation=observations(K),
      final_observation=observations(int(trunc.sum())),
      episode_return=rng.normal(size=ended).astype(np.float32) * 50,
      episode_length=rng.integers(1, 1000, ended).astype(np.int32),
    )
  )


def both_paths(request, spec):
  """(the fast path's batch or None, the detailed checks' batch or error)."""
  sess, limits = session(), validation.ValueLimits()
  layout = validation.layout_of(sess, spec, limits)
  fast = validation._check_fast(request, layout, sess)
  try:
    detailed = validation._check_in_detail(
      request, spec, sess, TOTAL, owner_of, limits
    )
  except ValueError as e:
    return fast, str(e)
  return fast, detailed


def assert_same_batch(a: StepBatch, b: StepBatch):
  for field in codec.STEP_FIELDS:
    x, y = getattr(a, field), getattr(b, field)
    assert (x.dtype, x.shape) == (y.dtype, y.shape), field
    np.testing.assert_array_equal(x, y, err_msg=field)
    assert not x.flags.writeable, field


@pytest.mark.parametrize("spec", sorted(SPECS))
@pytest.mark.parametrize("ends", sorted(ENDS))
def test_fast_path_takes_well_formed_messages(spec, ends):
  terminated, truncated = ENDS[ends]
  request = make_request(SPECS[spec], 1, terminated, truncated)
  fast, detailed = both_paths(request, SPECS[spec])
  assert fast is not None and isinstance(detailed, StepBatch)
  assert_same_batch(fast, detailed)
  sess = session()
  batch = validation.check_step_request(
    request, SPECS[spec], sess, TOTAL, owner_of
  )
  assert_same_batch(batch, detailed)
  # Later messages reuse the layout built for the session's first one.
  layout = sess.expected_layout
  validation.check_step_request(request, SPECS[spec], sess, TOTAL, owner_of)
  assert sess.expected_layout is layout


def _set(field, array):
  return lambda r: codec.fill_tensor(getattr(r, field), np.asarray(array))


def _set_value(field, index, value):
  """Puts `value` at flat `index` of the field, keeping dtype and shape."""

  def mutate(r):
    array = codec.decode_tensor(getattr(r, field)).copy()
    array.reshape(-1)[index] = value
    codec.fill_tensor(getattr(r, field), array)

  return mutate


def _set_stats(episode_return, episode_length):
  """Fills both episode statistics fields."""

  def mutate(r):
    codec.fill_tensor(r.episode_return, episode_return)
    codec.fill_tensor(r.episode_length, episode_length)

  return mutate


# Env 9 truncated (index 1), one episode ended; expected message fragments.
REFUSED = {
  "missing_field": (lambda r: r.ClearField("reward"), "reward: missing"),
  "unknown_dtype": (
    lambda r: setattr(r.run_ids, "dtype", "object"),
    "run_ids: unknown dtype 'object'",
  ),
  "wrong_dtype": (
    _set("reward", np.zeros(K, np.float64)),
    "reward: dtype float64, expected float32",
  ),
  "negative_shape": (
    lambda r: r.reward.shape.__setitem__(0, -4),
    "reward: shape [-4] has a negative dimension",
  ),
  "same_size_other_shape": (
    _set("observation", np.zeros((2, 8), np.float32)),
    "observation: shape [2, 8], expected [4, 4]",
  ),
  "flag_shape": (
    _set("terminated", np.zeros((K, 1), bool)),
    "terminated: shape [4, 1], expected [4]",
  ),
  "truncated_payload": (
    lambda r: setattr(r.observation, "data", r.observation.data[:-3]),
    "observation: truncated payload",
  ),
  "oversized_payload": (
    lambda r: setattr(r.run_ids, "data", r.run_ids.data + b"\0"),
    "run_ids: oversized payload",
  ),
  "bad_bool_bytes": (
    lambda r: setattr(r.truncated, "data", b"\x00\x01\x00\x07"),
    "truncated: bool payload holds bytes other than 0 and 1",
  ),
  "reward_count": (
    _set("reward", np.zeros(K - 1, np.float32)),
    "reward: 3 entries, expected 4",
  ),
  "final_observation_rows": (
    _set("final_observation", np.zeros((0, 4), np.float32)),
    "final_observation: 0 rows, expected 1",
  ),
  "env_id_out_of_range": (
    _set("env_ids", np.array([8, 9, 10, 99], np.int32)),
    "env_ids: env id 99 is outside the learner's range 0..23",
  ),
  "env_id_of_other_actor": (
    _set("env_ids", np.array([8, 9, 10, 1], np.int32)),
    "env_ids: env id 1 belongs to actor 0",
  ),
  "duplicate_env_ids": (
    _set("env_ids", np.array([8, 8, 10, 11], np.int32)),
    "env_ids: duplicate env id 8",
  ),
  "terminated_and_truncated": (
    _set("terminated", np.array([0, 1, 0, 0], bool)),
    "both set for env id 9",
  ),
  "nan_reward": (
    _set_value("reward", 1, np.nan),
    "reward: non-finite value nan at env id 9",
  ),
  "inf_observation": (
    _set_value("observation", 13, np.inf),
    "observation: non-finite value inf at env id 11",
  ),
  "inf_final_observation": (
    _set_value("final_observation", 1, -np.inf),
    "final_observation: non-finite value -inf at env id 9",
  ),
  "huge_reward": (
    _set_value("reward", 2, 3e38),
    "reward: 3e+38 at env id 10 exceeds the learner's limit",
  ),
  "reward_just_over_the_limit": (
    _set_value("reward", 0, np.nextafter(np.float32(1e6), np.float32(2e6))),
    "reward: 1e+06 at env id 8 exceeds",
  ),
  "huge_final_observation": (
    _set_value("final_observation", 3, -1e30),
    "final_observation: -1e+30 at env id 9 exceeds",
  ),
  "nan_episode_return": (
    _set_value("episode_return", 0, np.nan),
    "episode_return: non-finite value nan at row 0",
  ),
  "forged_episode_stats": (
    _set_stats(np.full(3, 1.0, np.float32), np.full(3, 10, np.int32)),
    "episode_return: 3 entries, expected 1",
  ),
  "zero_episode_length": (
    _set("episode_length", np.zeros(1, np.int32)),
    "episode_length: 0, expected >= 1",
  ),
  "episode_return_beyond_length": (
    _set_stats(np.array([3e6], np.float32), np.array([2], np.int32)),
    "exceeds episode_length x max_abs_reward",
  ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refusals_and_their_messages_come_from_the_detailed_checks(case):
  mutate, expected = REFUSED[case]
  request = make_request(FLOATS, 2, truncated=[1])
  mutate(request)
  fast, detailed = both_paths(request, FLOATS)
  assert fast is None
  assert isinstance(detailed, str) and expected in detailed, detailed
  with pytest.raises(ValueError) as error:
    validation.check_step_request(request, FLOATS, session(), TOTAL, owner_of)
  assert str(error.value) == detailed


# Valid, but beyond what the fast path can vouch for by a comparison.
DEFERRED = {
  "permuted_env_ids": _set("env_ids", np.array([11, 9, 10, 8], np.int32)),
  "reward_near_the_limit": _set_value("reward", 3, -9.9e5),
  "observation_near_the_limit": _set_value("observation", 5, 9.9e5),
}


@pytest.mark.parametrize("case", sorted(DEFERRED))
def test_fast_path_defers_valid_messages_it_cannot_vouch_for(case):
  request = make_request(FLOATS, 3, truncated=[1])
  DEFERRED[case](request)
  fast, detailed = both_paths(request, FLOATS)
  assert fast is None
  assert isinstance(detailed, StepBatch), detailed
  batch = validation.check_step_request(
    request, FLOATS, session(), TOTAL, owner_of
  )
  assert_same_batch(batch, detailed)


@pytest.mark.parametrize(
  "episode_return, episode_length",
  [(5e8, 1000), (-3e6, 3), (1e6, 1), (0.0, 1)],
)
def test_fast_path_takes_episode_returns_up_to_length_x_max_abs_reward(
  episode_return, episode_length
):
  request = make_request(FLOATS, 5, terminated=[0])
  codec.fill_tensor(
    request.episode_return, np.array([episode_return], np.float32)
  )
  codec.fill_tensor(
    request.episode_length, np.array([episode_length], np.int32)
  )
  fast, detailed = both_paths(request, FLOATS)
  assert fast is not None and isinstance(detailed, StepBatch), detailed
  assert_same_batch(fast, detailed)


def test_layout_follows_the_spec_and_limits_it_is_called_with():
  sess = session()
  request = make_request(FLOATS, 4)
  _set_value("reward", 0, 2.0)(request)
  validation.check_step_request(request, FLOATS, sess, TOTAL, owner_of)
  strict = validation.ValueLimits(max_abs_reward=1.0)
  with pytest.raises(ValueError, match="reward: 2 at env id 8 exceeds"):
    validation.check_step_request(
      request, FLOATS, sess, TOTAL, owner_of, strict
    )
  assert sess.expected_layout.limits is strict
  with pytest.raises(ValueError, match="observation: dtype float32, expected"):
    validation.check_step_request(
      request, SPECS["doubles"], sess, TOTAL, owner_of
    )
  assert sess.expected_layout.observation_spec is SPECS["doubles"]
  # Equal specs and limits in new objects keep the layout.
  layout = sess.expected_layout
  request = make_request(SPECS["doubles"], 5)
  validation.check_step_request(
    request,
    ArraySpec((2,), "float64", "renamed"),
    sess,
    TOTAL,
    owner_of,
    validation.ValueLimits(),
  )
  assert sess.expected_layout is layout


def test_safe_last_bytes_bound_every_float_they_admit():
  for dtype in ("float16", "float32", "float64"):
    wire = codec.WIRE_DTYPES[dtype]
    for bound in (1e-3, 1.0, 1e6, float(np.finfo(wire).max)):
      safe = set(validation._safe_last_bytes(wire, bound))
      # Every bit pattern of float16, and float32/64 ones through the
      # last-byte values and the extremes of the other bytes.
      if dtype == "float16":
        values = np.arange(2**16, dtype=np.uint16).view(wire)
      else:
        ends = [b"\x00" * (wire.itemsize - 1), b"\xff" * (wire.itemsize - 1)]
        values = np.frombuffer(
          b"".join(e + bytes([b]) for b in range(256) for e in ends), wire
        )
      last = values.view(np.uint8).reshape(-1, wire.itemsize)[:, -1]
      admitted = values[np.isin(last, list(safe))]
      assert np.isfinite(admitted).all()
      assert (np.abs(admitted.astype(np.float64)) <= bound).all()
    # Typical values are admitted.
    assert {0x00, 0x80} <= safe


@st.composite
def mutated_requests(draw):
  """A message of session() with random ends, then a random mutation of a
  field's dtype, shape, payload bytes or a value."""
  spec = SPECS[draw(st.sampled_from(sorted(SPECS)))]
  ends = draw(st.sets(st.integers(0, K - 1), max_size=K))
  truncated = draw(st.sets(st.sampled_from(sorted(ends)))) if ends else set()
  request = make_request(
    spec,
    draw(st.integers(0, 2**16)),
    sorted(ends - truncated),
    sorted(truncated),
  )
  field = draw(st.sampled_from(codec.STEP_FIELDS))
  tensor = getattr(request, field)
  kind = draw(
    st.sampled_from(["none", "value", "byte", "dtype", "shape", "size"])
  )
  if kind == "value" and tensor.data and tensor.dtype != "bool":
    array = codec.decode_tensor(tensor).copy()
    flat = array.reshape(-1)
    value = draw(st.floats(width=64) | st.integers(-(2**31), 2**31))
    with np.errstate(all="ignore"):
      flat[draw(st.integers(0, flat.size - 1))] = np.asarray(value).astype(
        array.dtype
      )
    codec.fill_tensor(tensor, array)
  elif kind == "byte" and tensor.data:
    payload = bytearray(tensor.data)
    payload[draw(st.integers(0, len(payload) - 1))] = draw(st.integers(0, 255))
    tensor.data = bytes(payload)
  elif kind == "dtype":
    tensor.dtype = draw(st.sampled_from(sorted(codec.WIRE_DTYPES) + [""]))
  elif kind == "shape":
    shape = list(tensor.shape)
    if shape and draw(st.booleans()):
      shape = shape[::-1] if draw(st.booleans()) else shape + [1]
    else:
      shape = draw(st.lists(st.integers(0, 9), max_size=3))
    tensor.ClearField("shape")
    tensor.shape.extend(shape)
  elif kind == "size":
    cut = draw(st.integers(0, len(tensor.data)))
    tensor.data = tensor.data[:cut] + draw(st.binary(max_size=8))
  return spec, request


@settings(max_examples=400, deadline=None, derandomize=True)
@given(case=mutated_requests())
def test_fast_path_accepts_only_what_the_detailed_checks_accept(case):
  spec, request = case
  fast, detailed = both_paths(request, spec)
  if fast is not None:
    assert isinstance(detailed, StepBatch), detailed
    assert_same_batch(fast, detailed)
  try:
    batch = validation.check_step_request(
      request, spec, session(), TOTAL, owner_of
    )
  except ValueError as e:
    assert str(e) == detailed
  else:
    assert isinstance(detailed, StepBatch), detailed
    assert_same_batch(batch, detailed)
