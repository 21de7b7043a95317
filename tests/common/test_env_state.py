"""The learner's per-env frame stacks: NumPy's passes and the compiled
one-pass push (seed_rl/common/_frame_push.c) against plain channel
stacking of each env's frame history."""

import importlib
import os
import shutil
import sysconfig
from types import ModuleType
from typing import Optional

import numpy as np
import pytest

from seed_rl.common import env_state
from seed_rl.common.env_state import EnvStateTable
from seed_rl.common.specs import ArraySpec

_frame_push: Optional[ModuleType]
try:  # built or not, whatever SEED_RL_NATIVE says
  _frame_push = importlib.import_module("seed_rl.common._frame_push")
except ImportError:
  _frame_push = None

SHAPE = (6, 7)
ACT = ArraySpec((), "int32", num_values=2)


def _can_build() -> bool:
  """Whether this interpreter could have compiled the extension."""
  include = sysconfig.get_paths()["include"]
  has_cc = shutil.which("cc") or shutil.which("gcc")
  return bool(has_cc) and os.path.exists(os.path.join(include, "Python.h"))


def test_the_extension_is_built_wherever_it_can_be():
  if not _can_build():
    pytest.skip("no C compiler or Python headers: the NumPy path is used")
  assert _frame_push is not None, (
    "a C compiler and Python.h are here but seed_rl.common._frame_push was "
    "not built (pip install -e . builds it)"
  )


def _modes():
  yield "numpy"
  if _frame_push is not None:
    yield "native"


@pytest.fixture(params=list(_modes()))
def mode(request, monkeypatch):
  monkeypatch.setattr(
    env_state, "_NATIVE", _frame_push if request.param == "native" else None
  )
  return request.param


# (env ids, how the call is made) per step: one run read as a view, runs
# copied out, runs into a given buffer, a scattered batch (gather path),
# a peek that commits nothing, and non-contiguous frames.
STEPS = [
  (slice(0, 5), "view"),
  (np.array([0, 1, 2, 3, 5, 6, 7, 8]), "out"),
  (slice(3, 9), "new"),
  (np.array([1, 4, 8]), "new"),
  (slice(0, 9), "peek"),
  (np.array([4, 5, 6, 7, 0, 1, 2, 3]), "out"),
  (slice(2, 6), "strided"),
  (slice(0, 9), "view"),
]


def test_stacks_equal_channel_stacking_of_each_envs_history(mode):
  table = EnvStateTable(9, ArraySpec(SHAPE, "uint8"), ACT, lambda n: (), 4)
  assert table.push_kind == {"numpy": "numpy", "native": "compiled"}[mode]
  history = {e: [np.zeros(SHAPE, np.uint8)] * 4 for e in range(9)}
  rng = np.random.default_rng(1)
  for t, (index, how) in enumerate(STEPS * 3):
    if t == 10:  # episode starts for envs 2 and 7
      table.reset(np.array([2, 7]))
      for e in (2, 7):
        history[e] = [np.zeros(SHAPE, np.uint8)] * 4
    ids = env_state.index_ids(index)
    frames = rng.integers(0, 256, (len(ids),) + SHAPE, dtype=np.uint8)
    if how == "strided":  # every other column of wider frames
      wide = rng.integers(0, 256, (len(ids), SHAPE[0], 2 * SHAPE[1]), np.uint8)
      frames = wide[:, :, ::2]
      assert not frames.flags.c_contiguous
    index = env_state.env_index(ids)
    if how == "peek":
      got = table.stacked(index, frames, commit=False)
    elif how == "view":
      got = table.stacked(index, frames, view=True).copy()
    elif how == "out":
      buffer = np.full((len(ids),) + SHAPE + (4,), 7, np.uint8)
      got = table.stacked(index, frames, out=buffer)
      assert got is buffer
    else:
      got = table.stacked(index, frames)
    want = [history[e][1:] + [frames[i]] for i, e in enumerate(ids)]
    np.testing.assert_array_equal(
      got, np.stack([np.stack(w, -1) for w in want])
    )
    if how != "peek":
      for e, w in zip(ids, want):
        history[e] = w
  for e in range(9):  # the table holds every env's newest four frames
    np.testing.assert_array_equal(table.stack[e], np.stack(history[e], -1))


def test_only_four_uint8_frames_are_packed():
  for spec, k in (
    (ArraySpec(SHAPE, "uint8"), 1),
    (ArraySpec(SHAPE, "float32"), 4),
  ):
    assert EnvStateTable(2, spec, ACT, lambda n: (), k).push_kind is None


needs_native = pytest.mark.skipif(_frame_push is None, reason="not built")


def _runs(*triples):
  return np.array(triples, np.int64).reshape(-1, 3)


@needs_native
def test_push_runs_is_one_pass_of_shift_and_write_per_run():
  rng = np.random.default_rng(2)
  hw = 5
  table = rng.integers(0, 2**32, (6, hw), dtype=np.uint32)
  frames = rng.integers(0, 256, (4, hw), dtype=np.uint8)
  runs = _runs((0, 1, 4), (1, 4, 0))  # frame 0 -> env 4, 1..3 -> envs 0..2
  envs = [4, 0, 1, 2]
  want = table.copy()
  want[envs] = (table[envs] >> 8) | (frames.astype(np.uint32) << 24)
  out = np.zeros((4, hw), np.uint32)
  assert _frame_push is not None
  _frame_push.push_runs(table, frames, out, runs, hw)
  np.testing.assert_array_equal(table, want)
  np.testing.assert_array_equal(out, want[envs])
  _frame_push.push_runs(table, frames, None, _runs((1, 2, 3)), hw)  # no out
  want[3] = (want[3] >> 8) | (frames[1].astype(np.uint32) << 24)
  np.testing.assert_array_equal(table, want)
  _frame_push.push_runs(table, frames, None, _runs(), hw)  # no runs
  np.testing.assert_array_equal(table, want)


@needs_native
def test_push_runs_refuses_what_does_not_fit_and_writes_nothing():
  assert _frame_push is not None
  push = _frame_push.push_runs
  table = np.zeros((3, 4), np.uint32)
  frames = np.full((2, 4), 9, np.uint8)
  for runs, match in [
    (_runs((0, 2, 2)), r"run 0 \(lo 0, hi 2, first 2\) does not fit.*<= 3"),
    (_runs((0, 1, 0), (1, 3, 0)), r"run 1 \(lo 1, hi 3, first 0\)"),
    (_runs((1, 0, 0)), "run 0"),
    (_runs((0, 1, -1)), "run 0"),
    (np.zeros(4, np.int64), "int64 triples"),
  ]:
    with pytest.raises(ValueError, match=match):
      push(table, frames, None, runs, 4)
  with pytest.raises(ValueError, match="hw .* must be > 0 and divide"):
    push(table, frames, None, _runs((0, 1, 0)), 3)
  with pytest.raises(
    ValueError, match="4 bytes per frame byte: 16 bytes for 8"
  ):
    push(table, frames, np.zeros(4, np.uint32), _runs((0, 1, 0)), 4)
  with pytest.raises(ValueError, match="4-byte aligned"):
    push(table.view(np.uint8).ravel()[1:33], frames[:1], None, _runs(), 4)
  with pytest.raises(TypeError, match="argument 1 must be read-write"):
    push(np.zeros((3, 8), np.uint32)[:, ::2], frames, None, _runs(), 4)
  readonly = table.copy()
  readonly.flags.writeable = False
  with pytest.raises(TypeError, match="argument 1 must be read-write"):
    push(readonly, frames, None, _runs(), 4)
  with pytest.raises((BufferError, ValueError), match="contiguous|writable"):
    push(table, frames, np.zeros((2, 8), np.uint32)[:, ::2], _runs(), 4)
  np.testing.assert_array_equal(table, 0)  # nothing written on refusal


def test_seed_rl_native_0_turns_the_compiled_push_off(monkeypatch):
  monkeypatch.setenv("SEED_RL_NATIVE", "0")
  assert env_state._load_native() is None
  monkeypatch.setenv("SEED_RL_NATIVE", "1")
  assert env_state._load_native() is _frame_push
