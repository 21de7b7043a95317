"""The learner's inference path: per-env state, resets, truncation, unrolls.

The agent here is a deterministic NumPy recorder
(tests/support/recording_agent.py), so every stored field can be checked
exactly; end-to-end tests use real agents.
"""

import threading

import numpy as np

from seed_rl.common.learner import PROFILED_SECTIONS, Learner, LearnerConfig
from seed_rl.common.specs import ArraySpec, StepBatch
from tests.support.recording_agent import RecordingAgent, step_batch


def _learner(num_train=2, num_eval=0, frame_stack=1, obs_shape=(2,)):
  obs_spec = ArraySpec(obs_shape, "float32")
  act_spec = ArraySpec((), "int32", num_values=2)
  agent = RecordingAgent(obs_spec, act_spec, num_train)
  learner = Learner(
    agent,
    obs_spec,
    act_spec,
    num_train,
    num_eval,
    LearnerConfig(frame_stack=frame_stack),
  )
  return learner, agent


def test_core_state_and_prev_action_reset_at_episode_end_and_restart():
  learner, agent = _learner()
  ids = [0, 1]
  learner._infer([step_batch(ids, [5, 6], [[1, 1], [2, 2]])])
  learner._infer([step_batch(ids, [5, 6], [[1, 1], [2, 2]])])
  np.testing.assert_array_equal(agent.calls[-1].core_state[0][:, 0], [1, 1])
  np.testing.assert_array_equal(agent.calls[-1].prev_action, [0, 1])
  # env 0 terminates; env 1's actor restarted (new run id).
  learner._infer(
    [step_batch(ids, [5, 7], [[1, 1], [2, 2]], terminated=[True, False])]
  )
  call = agent.calls[-1]
  np.testing.assert_array_equal(call.core_state[0][:, 0], [0, 0])
  np.testing.assert_array_equal(call.prev_action, [0, 0])
  np.testing.assert_array_equal(call.done, [True, True])
  learner.shutdown()


def test_truncation_values_final_observation_with_pre_reset_state():
  learner, agent = _learner()
  ids = [0, 1]
  learner._infer([step_batch(ids, [5, 6], [[1, 1], [2, 2]])])
  learner._infer([step_batch(ids, [5, 6], [[1, 1], [2, 2]])])
  learner._infer(
    [
      step_batch(
        ids,
        [5, 6],
        [[3, 3], [4, 4]],
        reward=[1.0, 2.0],
        truncated=[False, True],
        final_obs=[[10, 20]],
      )
    ]
  )
  call = agent.calls[-1]
  # Two main rows plus env 1's final observation with its old state.
  np.testing.assert_array_equal(call.env_ids, [0, 1, 1])
  np.testing.assert_array_equal(call.observation[2], [10, 20])
  np.testing.assert_array_equal(call.core_state[0][:, 0], [2, 0, 2])
  np.testing.assert_array_equal(call.done, [False, True, False])
  # The unroll (3 steps + 1) completes on the next call for both envs.
  learner._infer([step_batch(ids, [5, 6], [[1, 1], [2, 2]])])
  (unroll,) = agent.unrolls
  np.testing.assert_array_equal(unroll.env_ids, [0, 1])
  np.testing.assert_array_equal(unroll.truncated[:, 2], [False, True])
  np.testing.assert_array_equal(unroll.bootstrap_value[:, 2], [0.0, 30.0])
  np.testing.assert_array_equal(unroll.reward[:, 2], [1.0, 2.0])
  np.testing.assert_array_equal(unroll.value[1], [4.0, 4.0, 8.0, 4.0])
  np.testing.assert_array_equal(unroll.core_state[0][:, 0], [0, 0])
  assert unroll.extras["logits"].shape == (2, 4, 2)
  learner.shutdown()


def test_restart_drops_partial_unroll_and_eval_envs_make_none():
  learner, agent = _learner(num_train=1, num_eval=1)
  for _ in range(2):
    learner._infer(
      [step_batch([0], [1], [[0, 0]]), step_batch([1], [2], [[0, 0]])]
    )
  assert learner.discarded_partial_unrolls == 0  # first run ids: nothing
  # Env 0's actor restarts: its two buffered steps are dropped.
  for _ in range(3):
    learner._infer(
      [step_batch([0], [9], [[0, 0]]), step_batch([1], [2], [[0, 0]])]
    )
  assert not agent.unrolls
  assert learner.discarded_partial_unrolls == 1
  learner._infer(
    [step_batch([0], [9], [[0, 0]]), step_batch([1], [2], [[0, 0]])]
  )
  (unroll,) = agent.unrolls
  np.testing.assert_array_equal(unroll.env_ids, [0])  # never eval env 1
  np.testing.assert_array_equal(agent.calls[-1].eval_mask, [False, True])
  assert learner.env_steps == 6
  learner.shutdown()


def test_frame_stacking_zeroes_history_at_episode_start():
  learner, agent = _learner(num_train=1, frame_stack=3, obs_shape=(1,))
  for t, term in [(1, False), (2, False), (3, False), (4, True), (5, False)]:
    learner._infer([step_batch([0], [1], [[t]], terminated=[term])])
  stacks = [c.observation[0, 0].tolist() for c in agent.calls]
  assert stacks == [[0, 0, 1], [0, 1, 2], [1, 2, 3], [0, 0, 4], [0, 4, 5]]
  learner.shutdown()


def test_several_actor_batches_split_actions_back_in_order():
  learner, _ = _learner(num_train=5)
  out = learner._infer(
    [
      step_batch([0, 1], [1, 1], [[0, 0]] * 2),
      step_batch([2, 3, 4], [1, 1, 1], [[0, 0]] * 3),
    ]
  )
  assert [a.tolist() for a in out] == [[0, 1], [0, 1, 0]]
  learner.shutdown()


def test_packed_four_frame_stack_matches_the_generic_stack():
  """The uint32 fast path for 4 uint8 frames equals plain channel stacking."""
  from seed_rl.common.env_state import EnvStateTable

  spec = ArraySpec((3, 5), "uint8")
  act = ArraySpec((), "int32", num_values=2)
  fast = EnvStateTable(4, spec, act, lambda n: (), frame_stack=4)
  assert fast._packed
  rng = np.random.default_rng(0)
  history = {e: [np.zeros((3, 5), np.uint8)] * 4 for e in range(4)}
  for t in range(12):
    ids = np.array([0, 2, 3] if t % 3 else [1, 2])
    if t == 7:  # an episode start for env 2
      fast.reset(np.array([2]))
      history[2] = [np.zeros((3, 5), np.uint8)] * 4
    frames = rng.integers(0, 256, (len(ids), 3, 5), dtype=np.uint8)
    peek = fast.stacked(ids, frames, commit=False)
    out = fast.stacked(ids, frames)
    np.testing.assert_array_equal(peek, out)
    for row, e in enumerate(ids):
      history[e] = history[e][1:] + [frames[row]]
      np.testing.assert_array_equal(out[row], np.stack(history[e], -1))


def test_profiler_counts_sections_and_ticks_only_when_given():
  from seed_rl.common import profiling

  learner, _ = _learner()
  assert learner.profiler is profiling.NULL_PROFILER  # the default: nothing
  learner.shutdown()
  obs_spec = ArraySpec((2,), "float32")
  act_spec = ArraySpec((), "int32", num_values=2)
  profiler = profiling.Profiler(PROFILED_SECTIONS)
  learner = Learner(
    RecordingAgent(obs_spec, act_spec, 2),
    obs_spec,
    act_spec,
    2,
    profiler=profiler,
  )
  for _ in range(3):
    learner._infer([step_batch([0, 1], [5, 6], [[1, 1], [2, 2]])])
  cpu = profiler.cpu_seconds
  assert cpu["inference"] >= cpu["act"] > 0.0
  stop = threading.Event()
  stop.set()
  assert learner.run(stop) == "stopped"  # reports once on the way out
  (tick,) = profiler.ticks
  assert tick["env_steps"] == 6 and "training_cpu_s" in tick
  assert set(profiler.summary()) == {"cpu_s", "steady_state"}


def _atari_like_batch(env_ids, run_id, frames, starts):
  k = len(env_ids)
  return StepBatch(
    env_ids=np.asarray(env_ids, np.int32),
    run_ids=np.full(k, run_id, np.int64),
    reward=np.ones(k, np.float32),
    terminated=np.asarray(starts),
    truncated=np.zeros(k, bool),
    observation=frames,
    final_observation=np.zeros((0,) + frames.shape[1:], np.uint8),
    episode_return=np.zeros(0, np.float32),
    episode_length=np.zeros(0, np.int32),
  )


def test_merged_messages_in_any_order_give_the_stacks_and_unrolls_of_one_by_one():
  """Four actors of three envs, 4 uint8 frames stacked: inference calls of
  several messages in shuffled order give every env the stacks and the
  unrolls that the same messages give one per call, episode starts and a
  restart included."""
  frame = (3, 5)
  spec = ArraySpec(frame, "uint8")
  act = ArraySpec((), "int32", num_values=2)

  def make():
    agent = RecordingAgent(spec, act, 12)
    return Learner(agent, spec, act, 12, 0, LearnerConfig(frame_stack=4)), agent

  merged, merged_agent = make()
  single, single_agent = make()
  rng = np.random.default_rng(3)
  seen = {"merged": {}, "single": {}}
  for t in range(40):
    batches = []
    for actor in range(4):
      ids = list(range(3 * actor, 3 * actor + 3))
      run_id = 2 if (actor == 1 and t >= 17) else 1  # actor 1 restarts
      frames = rng.integers(0, 256, (3,) + frame, dtype=np.uint8)
      starts = (rng.random(3) < 0.1).tolist()
      batches.append(_atari_like_batch(ids, run_id, frames, starts))
    order = rng.permutation(4)
    calls = [[batches[i] for i in order[:2]], [batches[i] for i in order[2:]]]
    if t % 3 == 0:
      calls = [[batches[i] for i in order]]
    for call in calls:
      for b, a in zip(call, merged._infer(call)):
        np.testing.assert_array_equal(a, b.env_ids % 2)
    for b in batches:
      single._infer([b])
    for name, agent in (("merged", merged_agent), ("single", single_agent)):
      for c in agent.calls:
        for row, env in enumerate(c.env_ids.tolist()):
          seen[name].setdefault(env, []).append(c.observation[row].copy())
      agent.calls.clear()
  for env in range(12):
    np.testing.assert_array_equal(
      np.stack(seen["merged"][env]), np.stack(seen["single"][env])
    )

  def by_env(agent):
    rows = {}
    for unroll in agent.unrolls:
      for i, env in enumerate(unroll.env_ids.tolist()):
        rows.setdefault(env, []).append(
          (unroll.observation[i].copy(), unroll.reward[i].copy())
        )
    return rows

  got, want = by_env(merged_agent), by_env(single_agent)
  assert sorted(got) == sorted(want) == list(range(12))
  for env in range(12):
    assert len(got[env]) == len(want[env]) > 5
    for (obs_a, rew_a), (obs_b, rew_b) in zip(got[env], want[env]):
      np.testing.assert_array_equal(obs_a, obs_b)
      np.testing.assert_array_equal(rew_a, rew_b)
  merged.shutdown()
  single.shutdown()
