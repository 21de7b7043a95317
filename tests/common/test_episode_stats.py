"""The learner's own episode statistics (common/episode_stats.py): checked
against a plain-Python reference of the same rules, then through the
Learner, whose `episode/` statistics, console and target_return must follow
the steps it received and never what actors report."""

from __future__ import annotations

import numpy as np
import pytest

from seed_rl.actors.batched_env import EpisodeTracker as ActorTracker
from seed_rl.common import episode_stats
from seed_rl.common.env_state import EnvStateTable, env_index
from seed_rl.common.episode_stats import EpisodeStats
from seed_rl.common.learner import Learner, LearnerConfig
from seed_rl.common.specs import ArraySpec, StepBatch
from tests.support.recording_agent import RecordingAgent


class Reference:
  """The rules of episode_stats.py, one env and one message at a time."""

  def __init__(self, first_message_starts=True):
    self.first_message_starts = first_message_starts
    self.run_id = {}  # as EnvStateTable: 0 until the first restart
    self.known = set()  # envs that sent a restart message before
    self.ret, self.len, self.seen = {}, {}, {}

  def step(self, env, run_id, reward, ended):
    """'counted' (return, length), 'uncounted', or None (nothing ended)."""
    if run_id != self.run_id.get(env, 0):  # a restart (first message too)
      self.run_id[env] = run_id
      self.seen[env] = (
        env in self.known or self.first_message_starts or bool(ended)
      )
      self.known.add(env)
      self.ret[env], self.len[env] = 0.0, 0
      return "uncounted" if ended else None
    self.ret[env] = self.ret.get(env, 0.0) + float(np.float32(reward))
    self.len[env] = self.len.get(env, 0) + 1
    if not ended:
      return None
    out = (self.ret[env], self.len[env]) if self.seen.get(env) else "uncounted"
    self.ret[env], self.len[env], self.seen[env] = 0.0, 0, True
    return out


def _update(stats, table, env_ids, run_ids, reward, ended):
  """One (merged) batch through EpisodeStats as the learner feeds it."""
  env_ids = np.asarray(env_ids, np.int32)
  rows = env_index(env_ids)
  restarted = table.refresh_run_ids(rows, np.asarray(run_ids, np.int64))
  return stats.update(
    rows, np.asarray(reward, np.float32), np.asarray(ended, bool), restarted
  )


def _table(num_envs):
  spec = ArraySpec((1,), "float32")
  act = ArraySpec((), "int32", num_values=2)
  return EnvStateTable(num_envs, spec, act, lambda n: ())


def _check_against_reference(first_message_starts, seed):
  rng = np.random.default_rng(seed)
  num_actors, k = 4, 3
  n = num_actors * k
  stats, table = EpisodeStats(n, first_message_starts), _table(n)
  ref = Reference(first_message_starts)
  run_ids = rng.integers(1, 2**62, num_actors)
  counted = uncounted = 0
  for _ in range(400):
    # Some actors send this round; two or more of them merge into one
    # batch (env ids no longer one slice).
    actors = sorted(rng.choice(num_actors, rng.integers(1, 4), replace=False))
    for a in actors:
      if rng.random() < 0.03:  # the actor process restarted
        run_ids[a] = rng.integers(1, 2**62)
    env_ids = np.concatenate([np.arange(a * k, (a + 1) * k) for a in actors])
    runs = np.repeat([run_ids[a] for a in actors], k)
    reward = rng.choice([0.0, 1.0, -2.5, 0.1], len(env_ids))
    terminated = rng.random(len(env_ids)) < 0.1
    truncated = ~terminated & (rng.random(len(env_ids)) < 0.05)
    ended = terminated | truncated
    finished = _update(stats, table, env_ids, runs, reward, ended)
    expected = [
      (row, ref.step(int(e), int(r), reward[row], ended[row]))
      for row, (e, r) in enumerate(zip(env_ids, runs))
    ]
    want = [(row, out) for row, out in expected if isinstance(out, tuple)]
    skipped = sum(out == "uncounted" for _, out in expected)
    if finished is None:
      assert not want and not skipped
      continue
    assert finished.uncounted == skipped
    assert finished.env_ids.tolist() == [int(env_ids[row]) for row, _ in want]
    np.testing.assert_allclose(finished.returns, [o[0] for _, o in want])
    assert finished.lengths.tolist() == [o[1] for _, o in want]
    # Where each one's report stands among the batch's ended envs.
    rank = np.cumsum(ended) - 1
    assert finished.report_index.tolist() == [int(rank[r]) for r, _ in want]
    counted += finished.size
    uncounted += skipped
  return counted, uncounted


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_the_reference_with_interleaved_actors_and_restarts(seed):
  counted, uncounted = _check_against_reference(True, seed)
  assert counted > 300 and uncounted > 0


@pytest.mark.parametrize("seed", [0, 1])
def test_matches_the_reference_after_a_resume(seed):
  counted, uncounted = _check_against_reference(False, seed)
  assert counted > 300 and uncounted >= 12  # every env's first episode


def test_the_ending_step_reward_belongs_to_the_ending_episode():
  stats, table = EpisodeStats(2), _table(2)
  assert _update(stats, table, [0, 1], [7, 8], [0, 0], [0, 0]) is None
  assert _update(stats, table, [0, 1], [7, 8], [1, 2], [0, 0]) is None
  # Env 0 terminates, env 1 is truncated: both end alike (the ending
  # step's reward is theirs), the next step starts from zero.
  finished = _update(stats, table, [0, 1], [7, 8], [10, 20], [1, 1])
  assert finished.env_ids.tolist() == [0, 1]
  assert finished.returns.tolist() == [11.0, 22.0]
  assert finished.lengths.tolist() == [2, 2]
  _update(stats, table, [0, 1], [7, 8], [3, 3], [0, 0])
  assert stats.running(0) == (3.0, 1, True)


def test_a_restart_drops_the_running_episode_and_starts_a_new_one():
  stats, table = EpisodeStats(1), _table(1)
  _update(stats, table, [0], [7], [0], [0])
  for _ in range(5):
    _update(stats, table, [0], [7], [1], [0])
  # The actor process restarted mid-episode: its first message (reward and
  # any end flag belong to the old process) starts a new episode.
  finished = _update(stats, table, [0], [9], [50], [1])
  assert finished.size == 0 and finished.uncounted == 1
  assert stats.running(0) == (0.0, 0, True)
  _update(stats, table, [0], [9], [2], [0])
  finished = _update(stats, table, [0], [9], [2], [1])
  assert (finished.returns.tolist(), finished.lengths.tolist()) == ([4.0], [2])


def test_an_env_picked_up_mid_episode_counts_from_its_next_start():
  """After a resume, an actor may still be in the episode it began for the
  previous learner: its first message is not a start."""
  stats, table = EpisodeStats(2, first_message_starts=False), _table(2)
  _update(stats, table, [0, 1], [7, 8], [1, 1], [0, 0])
  finished = _update(stats, table, [0, 1], [7, 8], [1, 1], [1, 0])
  assert finished.size == 0 and finished.uncounted == 1  # env 0's, unseen
  finished = _update(stats, table, [0, 1], [7, 8], [1, 1], [1, 1])
  assert finished.env_ids.tolist() == [0]  # env 1's start is still unseen
  assert (finished.returns.tolist(), finished.lengths.tolist()) == ([1.0], [1])
  # An actor restart the learner sees (a run id it knew changed) is a start.
  _update(stats, table, [0, 1], [7, 18], [0, 0], [0, 0])
  finished = _update(stats, table, [0, 1], [7, 18], [1, 1], [0, 1])
  assert finished.env_ids.tolist() == [1]


def test_cross_check_flags_reports_that_differ_from_the_count():
  stats, table = EpisodeStats(4), _table(4)
  _update(stats, table, range(4), [1] * 4, [0] * 4, [0] * 4)
  _update(stats, table, range(4), [1] * 4, [1] * 4, [0] * 4)
  finished = _update(stats, table, range(4), [1] * 4, [1] * 4, [1, 0, 1, 1])
  assert finished.report_index.tolist() == [0, 1, 2]
  honest = np.array([2, 2, 2], np.float32), np.array([2, 2, 2], np.int32)
  assert not episode_stats.cross_check(finished, *honest).any()
  forged = np.array([2, 1e9, 2], np.float32), np.array([2, 1000, 3], np.int32)
  assert episode_stats.cross_check(finished, *forged).tolist() == [
    False,
    True,
    True,
  ]
  # float32 rounding of a long sum is not a lie.
  close = np.array([2.0001, 2, 2], np.float32), honest[1]
  assert not episode_stats.cross_check(finished, *close).any()
  missing = np.zeros(0, np.float32), np.zeros(0, np.int32)
  assert episode_stats.cross_check(finished, *missing).all()


def test_the_actor_tracker_agrees_exactly_with_the_learner():
  """An honest actor's reports (actors/batched_env.EpisodeTracker, summing
  the float32 rewards it sends) never count as mismatches."""
  rng = np.random.default_rng(0)
  k = 8
  stats, table, actor = EpisodeStats(k), _table(k), ActorTracker(k)
  _update(stats, table, range(k), [3] * k, np.zeros(k), np.zeros(k))
  checked = 0
  for _ in range(3000):
    reward = rng.normal(0, 7, k).astype(np.float32)
    terminated = rng.random(k) < 0.01
    truncated = ~terminated & (rng.random(k) < 0.005)
    returns, lengths = actor.update(reward, terminated, truncated)
    finished = _update(
      stats, table, range(k), [3] * k, reward, terminated | truncated
    )
    if finished is not None:
      np.testing.assert_array_equal(
        finished.returns.astype(np.float32), returns
      )
      np.testing.assert_array_equal(finished.lengths, lengths)
      assert not episode_stats.cross_check(finished, returns, lengths).any()
      checked += finished.size
  assert checked > 100


# ---------------------------------------------------------- the Learner --


def _learner(num_train=4, num_eval=0, checkpointer=None, **config):
  obs_spec = ArraySpec((2,), "float32")
  act_spec = ArraySpec((), "int32", num_values=2)
  learner = Learner(
    RecordingAgent(obs_spec, act_spec, num_train),
    obs_spec,
    act_spec,
    num_train,
    num_eval,
    LearnerConfig(**config),
    checkpointer=checkpointer,
  )
  return learner


def step_batch(env_ids, run_id, reward, ended=None, claims=None):
  """A StepBatch of envs `env_ids`; `claims`: the episode (return, length)
  the actor reports for each ended env."""
  k = len(env_ids)
  ended = np.zeros(k, bool) if ended is None else np.asarray(ended, bool)
  e = int(ended.sum())
  claim_return, claim_length = claims or (0.0, 1)
  return StepBatch(
    env_ids=np.asarray(env_ids, np.int32),
    run_ids=np.full(k, run_id, np.int64),
    reward=np.broadcast_to(np.float32(reward), (k,)).copy(),
    terminated=ended,
    truncated=np.zeros(k, bool),
    observation=np.zeros((k, 2), np.float32),
    final_observation=np.zeros((0, 2), np.float32),
    episode_return=np.full(e, claim_return, np.float32),
    episode_length=np.full(e, claim_length, np.int32),
  )


def test_forged_reports_do_not_reach_the_statistics(capsys):
  """Every env ends every step claiming 1e9 (then 475 over 475 steps):
  the learner counts 1-step episodes of the rewards it got, the target is
  not reached, and each lie is counted (one warning per interval)."""
  learner = _learner(target_return=195)
  ids = [0, 1, 2, 3]
  learner._infer([step_batch(ids, 5, 0.0)])
  for claims in ((1e9, 1000), (475.0, 475)):
    for _ in range(60):
      learner._infer([step_batch(ids, 5, 1.0, [1] * 4, claims)])
  assert learner.episodes.episodes == 480
  assert learner.episodes.full_window()
  assert learner.episodes.recent_mean() == 1.0
  assert learner.stop_rules.reason(1.0, learner.counters()) is None
  assert learner.stop_rules.solved_at_s is None  # not "target reached"
  assert learner.episodes.drain() == {
    "episode/return": 1.0,
    "episode/length": 1.0,
  }
  assert learner.episode_stat_mismatches == 480
  out = capsys.readouterr().out
  assert out.count("WARNING") == 1, out
  assert "env 0's actor reported return 1e+09 over 1000 steps" in out, out
  assert "the learner counted return 1 over 1 steps" in out, out
  learner.shutdown()


def test_honest_episodes_are_counted_once_and_eval_envs_apart():
  learner = _learner(num_train=2, num_eval=2, target_return=3)
  train, evaluation = [0, 1], [2, 3]
  learner._infer([step_batch(train, 5, 0.0), step_batch(evaluation, 6, 0.0)])
  for t in range(1, 4):
    end = [t == 3] * 2
    learner._infer(
      [
        step_batch(train, 5, 1.0, end, (3.0, 3)),
        step_batch(evaluation, 6, 2.0, end, (6.0, 3)),
      ]
    )
  assert learner.episodes.drain() == {
    "episode/return": 3.0,
    "episode/length": 3.0,
    "eval/return": 6.0,
    "eval/length": 3.0,
  }
  assert learner.episodes.episodes == 2  # training episodes only
  assert learner.episode_stat_mismatches == 0
  learner.shutdown()


def test_a_resumed_learner_skips_each_env_first_episode():
  class Resumed:
    env_steps = 1000

    def save(self, env_steps):
      del env_steps

  learner = _learner(num_train=1, checkpointer=Resumed())
  for ended in (0, 0, 1, 0, 1):  # picked up mid-episode, then one whole
    learner._infer([step_batch([0], 5, 1.0, [ended], (2.0, 2))])
  assert learner.uncounted_episodes == 1
  assert learner.episodes.episodes == 1
  assert learner.episodes.recent_mean() == 2.0
  assert learner.episode_stat_mismatches == 0  # the unseen one: unchecked
  learner.shutdown()


def test_the_report_scalars_carry_the_integrity_counters():
  learner = _learner(num_train=1)
  learner._infer([step_batch([0], 5, 0.0)])
  learner._infer([step_batch([0], 5, 1.0, [1], (9.0, 9))])
  learner._infer([step_batch([0], 7, 0.0, [1], (1.0, 1))])  # a restart
  scalars = learner.reporter.interval_scalars(1.0, learner.counters())
  assert scalars["integrity/episode_stat_mismatches"] == 1
  assert scalars["integrity/uncounted_episodes"] == 1
  assert scalars["episode/return"] == 1.0
  learner.shutdown()
