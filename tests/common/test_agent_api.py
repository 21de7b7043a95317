"""Helpers shared by the agents: unroll and act-input validation, row
selection, layout conversion, the unroll queue and config checks."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from seed_rl.common import agent_api
from seed_rl.agents import config_checks as checks
from seed_rl.common.agent_api import ActInputs, Unroll
from seed_rl.common.specs import ArraySpec
from seed_rl.common.unroll_queue import UnrollQueue

OBS = ArraySpec((3,), "float32", "observation")
DISCRETE = ArraySpec((), "int32", "action", num_values=4)
BOX = ArraySpec((2,), "float32", "action")
T = 4


def make_unroll(b=2, action_spec=DISCRETE, first_env=0, core_state=()):
  t1 = T + 1
  steps = np.arange(b * t1, dtype=np.float32).reshape(b, t1)
  return Unroll(
    env_ids=np.arange(first_env, first_env + b, dtype=np.int32),
    observation=np.zeros((b, t1) + OBS.shape, np.float32) + steps[..., None],
    reward=steps.copy(),
    terminated=np.zeros((b, t1), bool),
    truncated=np.zeros((b, t1), bool),
    bootstrap_value=np.zeros((b, t1), np.float32),
    prev_action=np.zeros((b, t1) + action_spec.shape, action_spec.dtype),
    action=np.ones((b, t1) + action_spec.shape, action_spec.dtype),
    value=steps.copy(),
    extras={"log_prob": steps.copy()},
    core_state=core_state,
    policy_version=np.zeros((b, t1), np.int64),
  )


def check(unroll, **kwargs):
  agent_api.check_unroll(
    unroll, T, OBS, kwargs.pop("action_spec", DISCRETE), **kwargs
  )


# ---------------------------------------------------------------- unrolls


def test_check_unroll_accepts_a_well_formed_unroll():
  check(make_unroll(), required_extras={"log_prob": ()})
  check(make_unroll(action_spec=BOX), action_spec=BOX)
  state = (np.zeros([2, 5], np.float32), np.zeros([2, 5], np.float32))
  check(make_unroll(core_state=state), core_state_shapes=[(5,), (5,)])
  check(make_unroll(b=0))


@pytest.mark.parametrize(
  "field,value,match",
  [
    (
      "observation",
      np.zeros((2, 5, 4), np.float32),
      r"Unroll.observation: shape \[2, 5, 4\], expected \[2, 5, 3\] "
      r"\(batch 2, unroll_length \+ 1 = 5\)",
    ),
    (
      "observation",
      np.zeros((2, 5, 3), np.float64),
      "Unroll.observation: dtype float64, expected float32",
    ),
    (
      "prev_action",
      np.zeros((2, 5), np.int64),
      "Unroll.prev_action: dtype int64, expected int32",
    ),
    (
      "action",
      np.zeros((2, 4), np.int32),
      r"Unroll.action: shape \[2, 4\], expected \[2, 5\]",
    ),
    (
      "action",
      np.full((2, 5), 4, np.int32),
      r"Unroll.action: values must lie in \[0, 4\), got range \[4, 4\]",
    ),
    ("reward", np.zeros((2, 6), np.float32), r"Unroll.reward: shape \[2, 6\]"),
    ("value", np.zeros((2,), np.float32), r"Unroll.value: shape \[2\]"),
    (
      "policy_version",
      np.zeros((3, 5), np.int64),
      "Unroll.policy_version: shape",
    ),
    (
      "terminated",
      np.zeros((2, 5), np.int32),
      "Unroll.terminated: dtype int32, expected bool",
    ),
    ("env_ids", np.zeros((2, 1), np.int32), r"Unroll.env_ids: shape \[2, 1\]"),
  ],
)
def test_check_unroll_names_the_bad_field(field, value, match):
  unroll = dataclasses.replace(make_unroll(), **{field: value})
  with pytest.raises(ValueError, match=match):
    check(unroll)


def test_check_unroll_extras_and_core_state():
  with pytest.raises(ValueError, match=r"lacks 'logits' .* has \['log_prob'\]"):
    check(make_unroll(), required_extras={"logits": (4,)})
  with pytest.raises(
    ValueError,
    match=r"Unroll.extras\['log_prob'\]: shape \[2, 5\], "
    r"expected \[2, 5, 2\]",
  ):
    check(make_unroll(), required_extras={"log_prob": (2,)})
  with pytest.raises(ValueError, match="core_state has 0 arrays, expected 2"):
    check(make_unroll(), core_state_shapes=[(5,), (5,)])
  with pytest.raises(ValueError, match="core_state has 1 arrays, expected 0"):
    check(make_unroll(core_state=(np.zeros([2, 5]),)))
  with pytest.raises(ValueError, match=r"core_state\[0\]: shape \[2, 6\]"):
    check(make_unroll(core_state=(np.zeros([2, 6]),)), core_state_shapes=[(5,)])


def test_unroll_rows_by_slice_and_mask():
  unroll = make_unroll(b=3, core_state=(np.arange(3.0)[:, None],))
  part = agent_api.unroll_rows(unroll, slice(1, 3))
  assert part.batch_size == 2 and part.env_ids.tolist() == [1, 2]
  assert np.shares_memory(part.observation, unroll.observation)
  picked = agent_api.unroll_rows(unroll, np.array([True, False, True]))
  assert picked.env_ids.tolist() == [0, 2]
  np.testing.assert_array_equal(
    picked.extras["log_prob"], unroll.extras["log_prob"][[0, 2]]
  )
  np.testing.assert_array_equal(picked.core_state[0], [[0.0], [2.0]])
  np.testing.assert_array_equal(picked.reward, unroll.reward[[0, 2]])


def test_time_major_and_policy_lag():
  x = np.arange(6, dtype=np.int64).reshape(2, 3)
  y = agent_api.time_major(x, np.float32)
  assert y.shape == (3, 2) and y.dtype == np.float32
  np.testing.assert_array_equal(y, x.T)
  assert np.shares_memory(agent_api.time_major(x), x)  # a view
  assert agent_api.policy_lag(10, np.array([[7, 8], [9, 8]])) == 2.0


# ---------------------------------------------------------------- act inputs


def make_inputs(b=3, **overrides):
  fields = dict(
    env_ids=np.arange(b, dtype=np.int32),
    observation=np.zeros((b, 3), np.float32),
    prev_action=np.zeros(b, np.int32),
    reward=np.zeros(b),
    done=np.zeros(b, np.int32),
    core_state=(),
    eval_mask=np.zeros(b, np.int32),
  )
  fields.update(overrides)
  return ActInputs(**fields)


def test_check_act_inputs_converts_dtypes():
  state = (np.zeros([3, 2], np.float64),)
  out = agent_api.check_act_inputs(
    make_inputs(core_state=state), OBS, DISCRETE, num_core_arrays=1
  )
  assert out.reward.dtype == np.float32
  assert out.done.dtype == np.bool_ and out.eval_mask.dtype == np.bool_
  assert out.core_state[0].dtype == np.float32


@pytest.mark.parametrize(
  "overrides,kwargs,match",
  [
    (
      dict(observation=np.zeros((3, 3), np.float64)),
      {},
      "ActInputs.observation: dtype float64",
    ),
    (
      dict(prev_action=np.zeros(3, np.int64)),
      dict(action_spec=DISCRETE),
      "ActInputs.prev_action: dtype int64",
    ),
    (
      dict(eval_mask=np.zeros(2, bool)),
      {},
      r"ActInputs.eval_mask: shape \[2\], expected \[3\]",
    ),
    (dict(reward=np.zeros((3, 1))), {}, r"ActInputs.reward: shape \[3, 1\]"),
    (
      {},
      dict(num_core_arrays=2),
      r"core_state has 0 arrays, expected 2 \(use initial_core_state",
    ),
  ],
)
def test_check_act_inputs_rejects(overrides, kwargs, match):
  with pytest.raises(ValueError, match=match):
    agent_api.check_act_inputs(make_inputs(**overrides), OBS, **kwargs)


def test_check_act_inputs_ignores_prev_action_without_action_spec():
  # Feed-forward agents do not read it, whatever its dtype.
  agent_api.check_act_inputs(make_inputs(prev_action=np.zeros(3)), OBS)


# ---------------------------------------------------------------- queue


def test_unroll_queue_regroups_pieces_into_batches():
  queue = UnrollQueue(capacity=8, batch_size=3)
  queue.put(make_unroll(b=2, first_env=0))
  queue.put(make_unroll(b=2, first_env=2))
  queue.put(make_unroll(b=0))  # empty pieces are no-ops
  assert len(queue) == 4
  batch = queue.get_batch()
  assert batch.env_ids.tolist() == [0, 1, 2]
  np.testing.assert_array_equal(batch.reward[2], make_unroll().reward[0])
  assert len(queue) == 1
  queue.put(make_unroll(b=2, first_env=4))
  assert queue.get_batch().env_ids.tolist() == [3, 4, 5]


def test_unroll_queue_blocks_when_full_and_stop_releases():
  queue = UnrollQueue(capacity=2, batch_size=2)
  queue.put(make_unroll(b=2))
  results = []
  producer = threading.Thread(
    target=lambda: results.append(queue.put(make_unroll(b=1)))
  )
  producer.start()
  producer.join(0.2)
  assert producer.is_alive()  # back-pressure: the queue is full
  assert queue.get_batch().batch_size == 2
  producer.join(5)
  assert results == [True] and len(queue) == 1
  queue.stop()
  assert queue.get_batch() is None
  assert queue.put(make_unroll(b=1)) is False


def test_unroll_queue_counts_the_consumers_wait_and_its_fill():
  queue = UnrollQueue(capacity=8, batch_size=2)
  for first in range(0, 6, 2):
    queue.put(make_unroll(b=2, first_env=first))
  assert queue.get_batch().batch_size == 2
  assert queue.fill_at_last_get == 6 / 8  # taken with 6 of 8 queued
  assert queue.consumer_wait_s == 0.0  # the data was there
  queue.get_batch()
  queue.get_batch()
  assert queue.fill_at_last_get == 2 / 8
  threading.Timer(0.3, lambda: queue.put(make_unroll(b=2))).start()
  assert queue.get_batch().batch_size == 2  # waits for the timer's put
  assert 0.2 <= queue.consumer_wait_s < 5.0
  assert queue.fill_at_last_get == 2 / 8


def test_unroll_queue_rejects_bad_sizes():
  with pytest.raises(ValueError, match="batch_size <= capacity"):
    UnrollQueue(capacity=2, batch_size=3)


# ---------------------------------------------------------------- configs


@dataclasses.dataclass
class _Config:
  batch_size: int = 4
  count: int = 1
  rate: float = 0.1
  gamma: float = 0.9
  mode: str = "a"
  queue_capacity: int = 4
  torso: object = len


@pytest.mark.parametrize(
  "overrides,call,match",
  [
    (
      dict(count=0),
      lambda c: checks.positive_ints(c, "count"),
      r"_Config.count must be a positive integer, got 0",
    ),
    (dict(count=True), lambda c: checks.positive_ints(c, "count"), "got True"),
    (
      dict(rate=0.0),
      lambda c: checks.positive(c, "rate", why="it divides"),
      r"_Config.rate must be > 0 \(it divides\), got 0.0",
    ),
    (
      dict(rate=-1.0),
      lambda c: checks.non_negative(c, "rate"),
      "rate must be >= 0, got -1.0",
    ),
    (
      dict(rate=1.5),
      lambda c: checks.in_unit_interval(c, "rate"),
      r"rate must be in \[0, 1\], got 1.5",
    ),
    (
      dict(gamma=1.5),
      lambda c: checks.discount(c, "gamma"),
      r"gamma must be in \[0, 1\], got 1.5",
    ),
    (
      dict(mode="c"),
      lambda c: checks.choice(c, "mode", ("a", "b")),
      "mode 'c' is unknown; allowed: a, b",
    ),
    (
      dict(queue_capacity=3),
      checks.queue_capacity,
      r"queue_capacity \(3\) must be >= batch_size \(4\)",
    ),
    (dict(torso=3), checks.torso_factory, "torso must be a callable"),
  ],
)
def test_config_checks(overrides, call, match):
  call(_Config())  # the defaults pass
  with pytest.raises(ValueError, match=match):
    call(_Config(**overrides))
