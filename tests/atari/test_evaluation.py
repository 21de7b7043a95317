"""Atari evaluation as in the papers (seed_rl.evaluate, seed_rl.atari:
its evaluation protocol, seed_rl/atari/evaluation.py).

- seed_rl.atari.scores: the 57 games' random and human scores under the
  names the env takes, and the human-normalised score against values
  worked out by hand;
- the protocol settings reach ALE: sticky actions (p = 1 turns every action
  into the previous one, so random actions play like NOOPs), the no-op
  start cap (envs with different seeds start at different frames only when
  it allows it), the frame cap (an episode is truncated at cap/4 agent
  steps);
- the colour video's twin env plays env 0's game (same frames under sticky
  actions and no-op starts) and a twin that drifts is caught;
- the protocol's flags are checked before a run loads, with the allowed
  values named, and refused for runs of other domains;
- `python -m seed_rl.evaluate` on a fabricated Pong checkpoint prints the
  game, the protocol played and the human-normalised score of its mean
  return, and records the game in colour (or the agent's input).
"""

from tests.support import ROOT
import inspect
import json
import os
import subprocess
import sys
import types

from tests.support.helpers import saved_logdir
from tests.support.video import read_video
import numpy as np
import pytest

from seed_rl import evaluate
from seed_rl.atari import env as atari_env
from seed_rl.atari import evaluation as atari_evaluation
from seed_rl.atari import scores
from seed_rl.common import evaluation
from seed_rl.common import saved_run


# --- reference scores ---------------------------------------------------------


def test_the_57_games_under_the_names_the_env_takes():
  assert len(scores.GAMES) == 57
  for game in scores.GAMES:
    atari_env.check_game(game)  # an ALE ROM id
    random, human = scores.reference_scores(game)
    assert human > random, game
  assert {"pong", "space_invaders", "seaquest", "beam_rider"} <= set(
    scores.GAMES
  )
  assert scores.reference_scores("pong") == (-20.7, 14.6)
  assert scores.reference_scores("video_pinball") == (0.0, 17667.9)


@pytest.mark.parametrize(
  "game,score,expected",
  [
    ("pong", 21.0, 1.181303),  # (21 + 20.7) / (14.6 + 20.7) = 41.7 / 35.3
    ("pong", -20.7, 0.0),  # random
    ("breakout", 30.5, 1.0),  # human
    ("space_invaders", 908.35, 0.5),  # 760.35 / (1668.7 - 148)
    ("seaquest", 1000.0, 0.022188),  # 931.6 / (42054.7 - 68.4)
    ("skiing", -17098.1 + 2 * 12761.2, 2.0),  # negative scores
  ],
)
def test_human_normalized_by_hand(game, score, expected):
  assert scores.human_normalized(game, score) == pytest.approx(
    expected, abs=1e-6
  )


def test_unknown_game_names_the_allowed_games():
  with pytest.raises(ValueError, match=r"close matches: \['space_invaders'\]"):
    scores.human_normalized("SpaceInvaders", 100.0)
  # A ROM ALE has but the tables do not.
  with pytest.raises(ValueError) as e:
    scores.human_normalized("adventure", 0.0)
  message = str(e.value)
  assert "no reference scores for Atari game 'adventure'" in message
  assert "alien, amidar" in message and "zaxxon" in message


# --- the protocol settings reach ALE -----------------------------------------


def _play(env, actions):
  """Observations [T + 1, K, 84, 84] of `actions` [T, K] from a reset."""
  frames = [env.reset()]
  for a in actions:
    frames.append(env.step(np.asarray(a, np.int32)).observation)
  return np.stack(frames)


def test_sticky_actions_reach_ale():
  actions = np.random.default_rng(0).integers(0, 6, (60, 1))
  noops = np.zeros_like(actions)

  def play(p, acts):
    with atari_env.create_environment(
      1, 0, noop_max=0, repeat_action_probability=p, num_threads=1
    ) as env:
      return _play(env, acts)

  free = play(0.0, actions)
  assert not np.array_equal(free, play(0.0, noops))  # actions matter
  # p = 1: every action repeats the previous one, from the reset's NOOP.
  np.testing.assert_array_equal(play(1.0, actions), play(0.0, noops))


def test_noop_max_reaches_ale():
  """Pong's first frames look alike; 20 NOOP steps later, envs started
  after different numbers of no-op frames show different frames."""

  def distinct_starts(noop_max):
    with atari_env.create_environment(
      8, 0, noop_max=noop_max, num_threads=1
    ) as env:
      frames = _play(env, np.zeros((20, 8)))[-1]
    return len({f.tobytes() for f in frames})

  assert distinct_starts(0) == 1  # every seed starts at frame 0
  assert distinct_starts(2) <= 2  # 0 or 1 no-op frames
  assert distinct_starts(30) >= 3  # 0 to 29


def test_frame_cap_truncates_at_cap_over_frameskip_agent_steps():
  with atari_env.create_environment(
    2, 0, noop_max=30, max_num_frames_per_episode=400, num_threads=1
  ) as env:
    env.reset()
    assert env.settings["max_num_frames_per_episode"] == 400
    for t in range(1, 201):
      result = env.step(np.zeros(2, np.int32))
      ends = t % 100 == 0  # 400 frames / frameskip 4, after the no-ops
      assert not result.terminated.any(), t
      assert result.truncated.tolist() == [ends, ends], t
      assert result.final_observation.shape == ((2 if ends else 0), 84, 84)


def test_training_defaults_are_unchanged():
  defaults = {
    k: v.default
    for k, v in inspect.signature(
      atari_env.create_environment
    ).parameters.items()
  }
  assert defaults["game"] == "pong"
  assert defaults["noop_max"] == 30
  assert defaults["repeat_action_probability"] == 0.0
  assert defaults["max_num_frames_per_episode"] == 108_000
  assert defaults["use_fire_reset"] is False
  assert defaults["render_mode"] is None
  with atari_env.create_environment(1, 0, num_threads=1) as env:
    assert env._twin is None
    env.reset()
    assert env.render() is None
    assert env.settings["full_games"]


# --- the colour twin ----------------------------------------------------------

TWIN = dict(
  noop_max=30,
  repeat_action_probability=0.25,
  max_num_frames_per_episode=800,  # two episodes in 400 steps
  num_threads=1,
)


def test_env_0_depends_only_on_its_seed():
  """The premise of the twin: under sticky actions and no-op starts, env 0
  of K envs plays exactly the game of a one-env batch with its seed."""
  actions = np.random.default_rng(1).integers(0, 6, (400, 3))
  with atari_env.create_environment(3, 7, **TWIN) as env:
    three = _play(env, actions)
  with atari_env.create_environment(1, 7, **TWIN) as env:
    one = _play(env, actions[:, :1])
  np.testing.assert_array_equal(three[:, 0], one[:, 0])
  assert not np.array_equal(three[:, 0], three[:, 1])


def test_colour_twin_plays_env_0s_game_and_drift_is_caught():
  actions = np.random.default_rng(2).integers(0, 6, (400, 3))
  with atari_env.create_environment(
    3, 7, render_mode="rgb_array", **TWIN
  ) as env:
    env.reset()
    first = env.render()
    assert first.shape == (210, 160, 3) and first.dtype == np.uint8
    assert (first[..., 0] != first[..., 1]).any()  # colour, not gray
    ends, moved = 0, False
    for a in actions:  # the twin checks every step; two episodes end
      ends += int(env.step(a.astype(np.int32)).truncated[0])
      moved = moved or not np.array_equal(env.render(), first)
    assert ends == 2 and moved
    # A twin one step ahead is not env 0's game any more.
    env._twin.step(np.zeros(1, np.int32))
    with pytest.raises(RuntimeError, match="diverged"):
      env.step(np.zeros(3, np.int32))
  with pytest.raises(ValueError, match="'rgb_array' only"):
    atari_env.create_environment(1, 0, render_mode="human")


# --- seed_rl.evaluate ---------------------------------------------------------


def test_protocol_settings():
  cap = 108_000
  assert atari_evaluation.atari_settings("run") == {}
  assert atari_evaluation.atari_settings("noop30") == {
    "noop_max": 30,
    "repeat_action_probability": 0.0,
    "max_num_frames_per_episode": cap,
  }
  assert atari_evaluation.atari_settings("sticky") == {
    "noop_max": 0,
    "repeat_action_probability": 0.25,
    "max_num_frames_per_episode": cap,
  }
  assert atari_evaluation.atari_settings(
    "sticky", noop_max=5, sticky_actions=0.5, max_episode_frames=400
  ) == {
    "noop_max": 5,
    "repeat_action_probability": 0.5,
    "max_num_frames_per_episode": 400,
  }
  assert atari_evaluation.atari_settings("run", sticky_actions=0.25) == {
    "repeat_action_probability": 0.25
  }
  for bad, match in (
    (dict(protocol="nature"), "unknown --protocol 'nature'"),
    (dict(noop_max=-1), "--noop_max must be >= 0"),
    (dict(sticky_actions=1.5), r"--sticky_actions must be in \[0, 1\]"),
    (dict(max_episode_frames=0), "--max_episode_frames must be >= 1"),
  ):
    with pytest.raises(ValueError, match=match):
      atari_evaluation.atari_settings(**bad)


# The JSON line's "protocol" of --protocol sticky --max_episode_frames 400.
STICKY_400 = {
  "name": "sticky",
  "noop_max": 0,
  "sticky_actions": 0.25,
  "max_episode_frames": 400,
  "frameskip": 4,
  "use_fire_reset": False,
  "full_games": True,
}


def _args(*flags):
  """The tool's flags (a logdir is required; these tests load none)."""
  return evaluate.build_parser().parse_args(["--logdir", "unused", *flags])


def test_atari_is_found_as_the_domains_protocol():
  protocol = atari_evaluation.EVALUATION_PROTOCOL
  assert evaluation.domain_protocol("atari") is protocol
  assert evaluation.builtin_protocols() == [protocol]
  # The tool's Atari flags, with their defaults as before.
  args = _args()
  assert [getattr(args, f) for f in protocol.flags] == ["run", None, None, None]
  assert protocol.env_overrides(args) == {}


def test_the_env_evaluate_builds_plays_the_protocol():
  protocol = atari_evaluation.EVALUATION_PROTOCOL
  run = types.SimpleNamespace(env="atari", env_module=atari_env)
  args = _args("--protocol", "sticky", "--max_episode_frames", "400")
  env = evaluate._create_env(run, 2, 0, protocol.env_overrides(args), False)
  try:
    assert protocol.extra_fields(args, env, 14.6) == {
      "game": "pong",
      "protocol": STICKY_400,
      "human_normalized_score": pytest.approx(1.0),
    }
    assert protocol.video_fps(env) == 15.0  # 60 Hz over frameskip 4
    env.reset()
    assert env.render() is None  # no video, no twin
  finally:
    env.close()
  for source, colour in (("game", True), ("agent", False)):
    args = _args("--video", "x.mp4", "--video_source", source)
    env = evaluate._create_env(
      run, 1, 0, protocol.env_overrides(args), source == "game"
    )
    try:
      env.reset()
      assert (env.render() is not None) == colour, source
    finally:
      env.close()


def _main(capsys, logdir, *flags):
  """`python -m seed_rl.evaluate --logdir logdir *flags` in this process:
  (exit status, stderr)."""
  with pytest.raises(SystemExit) as e:
    evaluate.main(["--logdir", logdir, *flags])
  return e.value.code, capsys.readouterr().err


def test_protocol_values_are_checked_before_the_run_loads(tmp_path, capsys):
  """A logdir with run.json and no checkpoint: the flags fail first, with
  what is allowed."""
  logdir = str(tmp_path)
  saved_run.write_run_spec(logdir, "atari", "vtrace", 4, 0, 0, [], [])
  for flags, allowed in (
    (["--protocol", "nature"], ["invalid choice", "run", "noop30", "sticky"]),
    (["--noop_max", "-1"], ["--noop_max must be >= 0, got -1"]),
    (["--sticky_actions", "1.5"], ["--sticky_actions must be in [0, 1]"]),
  ):
    code, err = _main(capsys, logdir, *flags)
    assert code == 2 and all(word in err for word in allowed), err
    assert "checkpoint" not in err
  args = _args()
  args.protocol = "nature"  # as a caller of evaluate() might set it
  with pytest.raises(ValueError, match="choose one of run, noop30, sticky"):
    atari_evaluation.EVALUATION_PROTOCOL.check(args)


def test_protocol_flags_refused_for_other_envs(tmp_path, capsys):
  logdir = str(tmp_path)
  saved_run.write_run_spec(logdir, "classic", "vtrace", 4, 0, 0, [], [])
  code, err = _main(capsys, logdir, "--protocol", "noop30")
  assert code == 2
  assert (
    "--protocol, --noop_max, --sticky_actions and --max_episode_frames "
    "apply to Atari runs; this run's env is classic"
  ) in err


@pytest.fixture(scope="module")
def pong_logdir(tmp_path_factory):
  """A logdir as the learner leaves it: an untrained V-trace Pong agent's
  checkpoint, operative_config.gin and run.json."""
  pytest.importorskip("tensorflow")
  logdir = str(tmp_path_factory.mktemp("pong_run"))
  return saved_logdir(logdir, "atari", "vtrace", env_steps=4321)


def _evaluate_cli(logdir, *flags):
  """`python -m seed_rl.evaluate --logdir logdir *flags` in its own
  process (so its ffmpeg child, if any, is forked from a process without
  gRPC: tests/support/video.py): its one JSON line, parsed."""
  proc = subprocess.run(
    [sys.executable, "-m", "seed_rl.evaluate", "--logdir", logdir, *flags],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=180,
    env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = [s for s in proc.stdout.splitlines() if s.startswith("{")]
  assert len(lines) == 1, proc.stdout
  return json.loads(lines[0])


def test_evaluate_prints_the_human_normalized_score(pong_logdir):
  result = _evaluate_cli(
    pong_logdir,
    "--episodes",
    "3",
    "--num_envs",
    "2",
    "--protocol",
    "sticky",
    "--max_episode_frames",
    "400",
    "--seed",
    "3",
  )
  assert result["env"] == "atari" and result["game"] == "pong"
  assert result["episodes"] == 3
  assert result["env_steps"] == 4321
  # The run's own environment otherwise: the Atari V-trace gin file's fire
  # reset is played too.
  assert result["protocol"] == dict(STICKY_400, use_fire_reset=True)
  # Cut at the cap: 400 frames = 100 agent steps (no no-op start).
  assert result["episode_lengths"] == [100, 100, 100]
  mean = np.mean(result["returns"])
  assert result["mean_return"] == pytest.approx(mean, abs=1e-3)
  assert result["human_normalized_score"] == pytest.approx(
    (mean + 20.7) / (14.6 + 20.7), abs=1e-4
  )


def test_video_records_the_scored_game_in_colour(pong_logdir, tmp_path):
  pytest.importorskip(
    "imageio.v2", reason="the video extra: pip install -e '.[video]'"
  )
  pytest.importorskip(
    "imageio_ffmpeg", reason="the video extra: pip install -e '.[video]'"
  )
  frames = {}
  for source in ("game", "agent"):
    path = str(tmp_path / f"{source}.mp4")
    result = _evaluate_cli(
      pong_logdir,
      "--episodes",
      "2",
      "--seed",
      "5",
      "--video",
      path,
      "--protocol",
      "noop30",
      "--max_episode_frames",
      "200",
      "--video_source",
      source,
    )
    assert result["video_source"] == source
    assert result["protocol"]["noop_max"] == 30
    # The recorded episode is env 0's first, the first one scored.
    assert result["episode_lengths"] == [50, 50]
    assert result["video_frames"] == 50
    frames[source], fps = read_video(path)
    assert fps == pytest.approx(15.0)  # real time
    assert len(frames[source]) == 50
  game, agent = frames["game"].astype(int), frames["agent"].astype(int)
  assert game.shape[1:] == (420, 320, 3)  # ALE's 210x160 screen, x2
  assert agent.shape[1:] == (336, 336, 3)  # the 84x84 input, x4
  # Pong's orange and green survive H.264; the agent's input is gray.
  assert np.abs(game[..., 0] - game[..., 1]).max() > 40
  assert np.abs(agent[..., 0] - agent[..., 1]).max() < 20
  assert game.std(axis=0).max() > 0  # it moves
