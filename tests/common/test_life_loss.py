"""Life loss: reported by Atari actors, carried on the wire, and turned into
agent-side terminals by the learner only under
`LearnerConfig.terminal_on_life_loss`, while episodes count whole games.

The learner tests use test_learner_runtime's deterministic recording agent,
so every stored flag and stacked frame is checked exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from seed_rl.common.learner import Learner, LearnerConfig
from seed_rl.common.specs import ArraySpec, StepBatch
from seed_rl.grpc import codec, validation
from seed_rl.grpc.sessions import Session
from tests.support.recording_agent import RecordingAgent, step_batch


def _learner(terminal_on_life_loss, num_train=2, num_eval=0, frame_stack=2):
  obs_spec = ArraySpec((1,), "float32")
  act_spec = ArraySpec((), "int32", num_values=2)
  agent = RecordingAgent(obs_spec, act_spec, num_train)
  config = LearnerConfig(
    frame_stack=frame_stack, terminal_on_life_loss=terminal_on_life_loss
  )
  learner = Learner(agent, obs_spec, act_spec, num_train, num_eval, config)
  return learner, agent


def _lost(batch: StepBatch, flags) -> StepBatch:
  batch.life_lost = np.asarray(flags, bool)
  return batch


def _play(learner, steps):
  """Feeds env 0 (and env 1, always [0], no flags) `steps`: (frame,
  reward, life_lost, terminated) per step."""
  for frame, reward, lost, term in steps:
    batch = step_batch(
      [0, 1],
      [1, 2],
      [[frame], [0]],
      reward=[reward, 0.0],
      terminated=[term, False],
    )
    if term:  # the actor's own count, which the learner cross-checks
      batch.episode_return = np.array([4.0], np.float32)
      batch.episode_length = np.array([4], np.int32)
    learner._infer([_lost(batch, [lost, False]) if lost else batch])


# Env 0: a game of 6 steps with a life lost at step 3 (reward 1 each step).
GAME = [
  (1, 0.0, False, False),  # first message: starts the episode
  (2, 1.0, False, False),
  (3, 1.0, True, False),  # lost a life; the game goes on at frame 3
  (4, 1.0, False, False),
  (5, 1.0, False, True),  # game over: frame 5 is the next game's first
  (6, 1.0, False, False),
]


@pytest.mark.parametrize("terminal", [True, False])
def test_episode_counts_the_whole_game_either_way(terminal):
  learner, _ = _learner(terminal)
  _play(learner, GAME)
  stats = learner.episodes.drain()
  assert stats["episode/return"] == 4.0  # rewards of steps 2..5
  assert stats["episode/length"] == 4.0
  assert learner.episodes.episodes == 1
  learner.shutdown()


def test_life_loss_terminates_the_agent_episode_only_when_asked():
  learner, agent = _learner(True)
  _play(learner, GAME)
  stacks = [c.observation[0, 0].tolist() for c in agent.calls]
  # Frame history starts over after the life loss and after the game over.
  assert stacks == [[0, 1], [1, 2], [0, 3], [3, 4], [0, 5], [5, 6]]
  done = [bool(c.done[0]) for c in agent.calls]
  assert done == [True, False, True, False, True, False]
  assert [int(c.core_state[0][0, 0]) for c in agent.calls] == [0, 1, 0, 1, 0, 1]
  # Unrolls of 3 + 1 steps: the life-loss step is stored as terminated.
  unroll = agent.unrolls[0]
  np.testing.assert_array_equal(unroll.env_ids, [0, 1])
  np.testing.assert_array_equal(
    unroll.terminated[0], [False, False, True, False]
  )
  assert not unroll.terminated[1].any()
  learner.shutdown()


def test_without_the_option_a_life_loss_changes_nothing():
  with_flags, agent = _learner(False)
  _play(with_flags, GAME)
  without, plain = _learner(False)
  _play(without, [(f, r, False, t) for f, r, _, t in GAME])
  for a, b in zip(agent.calls, plain.calls):
    np.testing.assert_array_equal(a.observation, b.observation)
    np.testing.assert_array_equal(a.done, b.done)
  for a, b in zip(agent.unrolls, plain.unrolls):
    np.testing.assert_array_equal(a.terminated, b.terminated)
  assert len(agent.unrolls) == len(plain.unrolls) == 1
  with_flags.shutdown()
  without.shutdown()


def test_eval_envs_play_whole_games_and_merged_batches_keep_flags():
  learner, agent = _learner(True, num_train=1, num_eval=1)
  for t in range(3):
    train = step_batch([0], [1], [[t + 1]])
    evaluation = step_batch([1], [2], [[t + 1]])
    if t == 2:  # both lose a life
      train, evaluation = _lost(train, [True]), _lost(evaluation, [True])
    learner._infer([train, evaluation])
  last = agent.calls[-1]
  np.testing.assert_array_equal(last.done, [True, False])
  assert last.observation[:, 0].tolist() == [[0, 3], [2, 3]]
  # One batch with flags merged with one without: the missing ones are
  # false, and the flagged env still ends its agent episode.
  learner._infer(
    [_lost(step_batch([0], [1], [[4]]), [True]), step_batch([1], [2], [[4]])]
  )
  np.testing.assert_array_equal(agent.calls[-1].done, [True, False])
  learner.shutdown()


# --- the wire -----------------------------------------------------------------

K = 3
OBS = ArraySpec((2,), "float32", "observation")


def _session() -> Session:
  return Session("s", 0, 0, K)


def _wire_batch(life_lost=None, terminated=(False,) * K) -> StepBatch:
  ended = int(np.count_nonzero(terminated))
  return StepBatch(
    env_ids=np.arange(K, dtype=np.int32),
    run_ids=np.arange(K, dtype=np.int64),
    reward=np.ones(K, np.float32),
    terminated=np.asarray(terminated, bool),
    truncated=np.zeros(K, bool),
    observation=np.zeros((K, 2), np.float32),
    final_observation=np.zeros((0, 2), np.float32),
    episode_return=np.ones(ended, np.float32),
    episode_length=np.ones(ended, np.int32),
    life_lost=life_lost,
  )


def _check(request):
  return validation.check_step_request(
    request, OBS, _session(), K, lambda _: None
  )


def test_life_lost_round_trips_and_is_absent_when_not_set():
  request = codec.encode_step_batch(_wire_batch())
  assert not request.HasField("life_lost")
  assert _check(request).life_lost is None
  flags = np.array([False, True, False])
  request = codec.encode_step_batch(_wire_batch(flags))
  batch = _check(request)
  np.testing.assert_array_equal(batch.life_lost, flags)
  # The fast path leaves such messages to the detailed checks.
  sess = _session()
  layout = validation.layout_of(sess, OBS, validation.ValueLimits())
  assert validation._check_fast(request, layout, sess) is None


@pytest.mark.parametrize(
  "life_lost, terminated, message",
  [
    (np.array([1, 0, 0], np.uint8), (False,) * K, "life_lost: dtype uint8"),
    (np.array([True, False]), (False,) * K, "life_lost: 2 entries"),
    (
      np.array([True, False, False]),
      (True, False, False),
      "life_lost: set for env id 0, whose episode ended",
    ),
  ],
)
def test_malformed_life_lost_is_refused_by_name(life_lost, terminated, message):
  request = codec.encode_step_batch(_wire_batch(life_lost, terminated))
  with pytest.raises(ValueError, match=message):
    _check(request)


# --- the Atari env --------------------------------------------------------------


@pytest.mark.parametrize(
  "game, lives_lost", [("space_invaders", 2), ("pong", 0)]
)
def test_atari_reports_lost_lives_of_games_that_go_on(game, lives_lost):
  from seed_rl.atari.env import create_environment

  env = create_environment(1, 0, game=game, num_threads=1)
  env.reset()
  rng = np.random.default_rng(0)
  lost = 0
  for _ in range(30_000):
    result = env.step(rng.integers(0, env.action_spec.num_values, 1))
    assert result.life_lost is not None
    ended = result.terminated | result.truncated
    assert not (result.life_lost & ended).any()
    lost += int(result.life_lost.sum())
    if ended.any():
      break
  env.close()
  assert ended.any()
  # SpaceInvaders: 3 lives, the last one's loss is the game's end.
  assert lost == lives_lost
