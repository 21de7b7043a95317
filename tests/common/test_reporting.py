"""The progress line's goal part: percent done and ETA toward the nearest
stop condition, and the best mean return against a target."""

from seed_rl.common import metrics as metrics_lib
from seed_rl.common.learner_config import LearnerConfig
from seed_rl.common.reporting import Counters, Reporter


def _goal(config, elapsed, env_steps, learner_steps, best=None, start=(0, 0)):
  reporter = Reporter(config, metrics_lib.EpisodeTracker())
  reporter.start(0.0, Counters(env_steps=start[0], learner_steps=start[1]))
  reporter.best_return = best
  counters = Counters(env_steps=env_steps, learner_steps=learner_steps)
  return reporter.goal(elapsed, counters)


def test_env_steps_percent_and_eta():
  # 25% of 4,000 env steps in 10 s: 30 s to go.
  line = _goal(LearnerConfig(max_env_steps=4000), 10.0, 1000, 5)
  assert line == "25% done, ETA 0m30s"


def test_nearest_condition_sets_the_eta_and_resumed_steps_count_as_done():
  # Resumed at 2,000 env steps: 1,000 new ones in 100 s -> 1,000 s left,
  # but max_seconds 160 ends the run in 60 s.
  config = LearnerConfig(max_env_steps=4000, max_seconds=160)
  line = _goal(config, 100.0, 3000, 0, start=(2000, 0))
  assert line == "75% done, ETA 1m00s"


def test_target_shows_best_mean_without_eta():
  config = LearnerConfig(target_return=475)
  assert _goal(config, 10.0, 100, 1) == "best n/a / target 475"
  assert _goal(config, 10.0, 100, 1, best=312.44) == "best 312.4 / target 475"


def test_no_stop_condition_no_goal():
  assert _goal(LearnerConfig(), 10.0, 100, 1) == ""
