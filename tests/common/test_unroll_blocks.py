"""The inference path's fast paths against plain references on mixed traffic.

UnrollStore keeps envs in blocks written by slices and hands whole blocks
out without copying; the learner stacks frames in place and straight into
the unroll slots it then hands to the agent. These tests drive both with
randomised traffic (lockstep actors, merged actors, subsets, reversed ids,
partial and whole resets, episode ends, truncations) and compare with
per-env references, and check that nothing handed out changes later.
"""

import copy
import dataclasses

import numpy as np

from seed_rl.common.agent_api import ActOutputs, Agent
from seed_rl.common.learner import Learner, LearnerConfig
from seed_rl.common.specs import ArraySpec, StepBatch
from seed_rl.common.unroll_store import PER_STEP_FIELDS, StepRecord, UnrollStore

ACTORS = [(0, 4), (4, 7), (7, 8), (8, 13)]  # [first, stop) env ids


def _traffic(rng, steps):
  """Per call: env ids int32 [B] of one or more actors (sometimes a subset
  or reversed) and the envs to reset before it."""
  for _ in range(steps):
    picked = rng.permutation(len(ACTORS))[: rng.choice([1, 1, 1, 2, 3])]
    ids = np.concatenate([np.arange(*ACTORS[a]) for a in picked])
    if rng.random() < 0.1:
      ids = np.sort(rng.choice(ids, rng.integers(1, ids.size + 1), False))
    if rng.random() < 0.05:
      ids = ids[::-1].copy()
    reset = np.zeros(0, np.int64)
    if rng.random() < 0.04:
      reset = np.arange(*ACTORS[rng.integers(len(ACTORS))])
    elif rng.random() < 0.04:
      reset = rng.choice(13, 1)
    yield ids.astype(np.int32), reset


def _step(rng, n):
  return StepRecord(
    observation=rng.normal(size=(n, 2, 3)).astype(np.float32),
    reward=rng.normal(size=n).astype(np.float32),
    terminated=rng.random(n) < 0.1,
    truncated=rng.random(n) < 0.1,
    bootstrap_value=rng.normal(size=n).astype(np.float32),
    prev_action=rng.integers(0, 5, n).astype(np.int32),
    action=rng.integers(0, 5, n).astype(np.int32),
    value=rng.normal(size=n).astype(np.float32),
    policy_version=rng.integers(0, 9, n),
    core_state=(rng.normal(size=(n, 2)).astype(np.float32),),
    extras={"logits": rng.normal(size=(n, 3)).astype(np.float32)},
  )


def _unroll_rows(unroll):
  """env id -> its row: every per-step field, extras and core state."""
  rows = {}
  for i, env in enumerate(unroll.env_ids.tolist()):
    rows[env] = [getattr(unroll, f)[i] for f in PER_STEP_FIELDS]
    rows[env] += [unroll.extras["logits"][i], unroll.core_state[0][i]]
  return rows


def test_unroll_store_matches_a_per_env_reference():
  length, overlap = 5, 2
  rng = np.random.default_rng(0)
  store = UnrollStore(13, length, overlap)
  history = {e: [] for e in range(13)}  # per env: the steps it holds
  emitted, snapshots, slot_arrays = [], [], []
  for ids, reset in _traffic(rng, 600):
    discarded = sum(bool(history[e]) for e in reset.tolist())
    assert store.reset(reset) == discarded
    for e in reset.tolist():
      history[e] = []
    step = _step(rng, ids.size)
    first, stop = int(ids[0]), int(ids[-1]) + 1
    slots = None
    if np.array_equal(ids, np.arange(first, stop)):
      slots = store.observation_slots(slice(first, stop))
    if slots is not None:  # written there first, as the learner does
      slot_arrays.append(slots.base)
      slots[...] = step.observation
      step = step._replace(observation=slots)
    out = store.append(ids, step)
    expected = {}
    for i, e in enumerate(ids.tolist()):
      history[e].append(step.rows(i))
      if len(history[e]) == length:
        expected[e] = history[e]
        history[e] = history[e][length - overlap :]
    if out is None:
      assert not expected
      continue
    assert out.env_ids.dtype == np.int32
    assert out.env_ids.tolist() == [e for e in ids.tolist() if e in expected]
    for e, row in _unroll_rows(out).items():
      steps = expected[e]
      for j, f in enumerate(PER_STEP_FIELDS):
        np.testing.assert_array_equal(
          row[j], np.stack([getattr(s, f) for s in steps])
        )
      np.testing.assert_array_equal(
        row[-2], np.stack([s.extras["logits"] for s in steps])
      )
      np.testing.assert_array_equal(row[-1], steps[0].core_state[0])
    emitted.append(out)
    snapshots.append(copy.deepcopy(out))
  assert len(emitted) > 100
  # Lockstep blocks were handed out as they are (no copy).
  assert any(out.observation is a for out in emitted for a in slot_arrays)
  for out, snapshot in zip(emitted, snapshots):  # never written again
    for f in dataclasses.fields(out):
      a, b = getattr(out, f.name), getattr(snapshot, f.name)
      if isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)


class _Counter:
  """A step counter that counts its reads."""

  def __init__(self):
    self.reads = 0

  def numpy(self):
    self.reads += 1
    return np.int64(7)


class _StackAgent(Agent):
  """Keeps every ActInputs and Unroll it is given (by reference)."""

  unroll_length = 3

  def __init__(self, obs_spec, action_spec, num_envs):
    super().__init__(obs_spec, action_spec, num_envs)
    self.calls, self.unrolls = [], []
    self.counter = _Counter()

  def act(self, inputs):
    self.calls.append((inputs, copy.deepcopy(inputs)))
    n = inputs.env_ids.size
    flat = inputs.observation.reshape(n, -1).astype(np.int64)
    return ActOutputs(
      action=(flat.sum(-1) % 3).astype(np.int32),
      value=flat[:, 0].astype(np.float32),
      extras={},
      core_state=(),
    )

  def add_unrolls(self, unrolls):
    self.unrolls.append((unrolls, copy.deepcopy(unrolls)))

  def train_step(self):
    return {}

  @property
  def step_counter(self):
    return self.counter

  def checkpoint_objects(self):
    return {}


def test_learner_stacks_match_frame_history_and_stay_unchanged():
  """Four packed uint8 frames per pixel, stacked in place, unrolls of
  frames: every observation the agent saw equals the env's last four frames
  (zeros before an episode start), and no unroll it was handed changed."""
  rng = np.random.default_rng(1)
  frame = ArraySpec((3, 5), "uint8")
  action = ArraySpec((), "int32", num_values=3)
  agent = _StackAgent(frame, action, 13)
  learner = Learner(agent, frame, action, 11, 2, LearnerConfig(frame_stack=4))
  blank = [np.zeros((3, 5), np.uint8)] * 4
  frames = {e: list(blank) for e in range(13)}
  run_ids = rng.integers(1, 2**40, 13)
  for ids, _ in _traffic(rng, 400):
    n = ids.size
    if rng.random() < 0.03:  # an actor restarts: new run ids
      run_ids[ids] = rng.integers(1, 2**40, n)
      for e in ids.tolist():
        frames[e] = list(blank)
    ended = rng.random(n) < 0.08
    truncated = ended & (rng.random(n) < 0.5)
    obs = rng.integers(0, 256, (n, 3, 5), np.uint8)
    final = rng.integers(0, 256, (int(truncated.sum()), 3, 5), np.uint8)
    finals = [  # on the ended episode's frames
      np.stack(frames[e][1:] + [last], -1)
      for e, last in zip(ids[truncated].tolist(), final)
    ]
    expected = []
    for i, e in enumerate(ids.tolist()):
      history = list(blank) if ended[i] else frames[e]
      frames[e] = history[1:] + [obs[i]]
      expected.append(np.stack(frames[e], -1))
    learner._infer(
      [
        StepBatch(
          env_ids=ids,
          run_ids=run_ids[ids],
          reward=np.zeros(n, np.float32),
          terminated=ended & ~truncated,
          truncated=truncated,
          observation=obs,
          final_observation=final,
          episode_return=np.zeros(0, np.float32),
          episode_length=np.zeros(0, np.int32),
        )
      ]
    )
    np.testing.assert_array_equal(
      agent.calls[-1][0].observation, expected + finals
    )
  # Act inputs are valid during act only (agent_api.ActInputs: one actor's
  # stacks are a view of the learner's table); unrolls never change.
  assert any(
    not inputs.observation.flags.writeable for inputs, _ in agent.calls
  )
  for unroll, snapshot in agent.unrolls:
    np.testing.assert_array_equal(unroll.observation, snapshot.observation)
    np.testing.assert_array_equal(unroll.policy_version, 7)
  assert len(agent.unrolls) > 20
  assert agent.counter.reads == 1  # not once per call
  learner.shutdown()
