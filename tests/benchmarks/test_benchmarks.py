"""The benchmark scripts users run: learn.py over seeds, plot_curves.py,
compare_reference.py."""

from tests.support import ROOT
import itertools
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")


def test_learn_over_two_seeds_prints_a_line_each_and_a_summary(tmp_path):
  overlay = tmp_path / "overlay.gin"  # --gin_config reaches the learner
  overlay.write_text("VtraceConfig.learning_rate = 0.00123\n")
  out = subprocess.run(
    [
      sys.executable,
      "benchmarks/learn.py",
      "classic",
      "vtrace",
      "--quiet",
      "--seeds",
      "0,1",
      "--max_minutes",
      "0.25",
      "--num_actors",
      "1",
      "--envs_per_actor",
      "4",
      "--logdir",
      str(tmp_path / "run"),
      "--gin_config",
      str(overlay),
    ],
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=240,
  )
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
  lines = [json.loads(s) for s in out.stdout.splitlines() if s.startswith("{")]
  assert [line.get("seed") for line in lines[:2]] == [0, 1]
  summary = lines[2]
  assert summary["summary"] and summary["seeds"] == [0, 1]
  assert set(summary["wall_s"]) == {"median", "min", "max"}
  assert [line["logdir"] for line in lines[:2]] == [
    str(tmp_path / "run-0"),
    str(tmp_path / "run-1"),
  ]
  assert all(os.path.exists(line["logdir"]) for line in lines[:2])
  assert lines[0]["gin_config"] == [str(overlay)]
  with open(os.path.join(lines[0]["logdir"], "operative_config.gin")) as f:
    assert "VtraceConfig.learning_rate = 0.00123" in f.read()


def _fake_run(logdir, slope, steps=20, tag="episode/return"):
  """Event files as the learner writes them: perf/env_steps and
  `tag` at the same learner steps."""
  import tensorflow as tf

  writer = tf.summary.create_file_writer(str(logdir))
  with writer.as_default():
    for step in range(1, steps + 1):
      tf.summary.scalar("perf/env_steps", 1000.0 * step, step=step)
      tf.summary.scalar(tag, slope * step, step=step)
  writer.close()


def test_plot_curves_draws_groups_from_several_logdirs(tmp_path):
  for name, slope in (("a0", 1.0), ("a1", 2.0), ("b0", -1.0)):
    _fake_run(tmp_path / name, slope)
  out = tmp_path / "curves.png"
  dirs = [str(tmp_path / n) for n in ("a0", "a1", "b0")]

  def plot(*flags):
    return subprocess.run(
      [sys.executable, "benchmarks/plot_curves.py", "--title", "t"]
      + ["--out", str(out), *flags]
      + dirs,
      cwd=ROOT,
      env=ENV,
      capture_output=True,
      text=True,
      timeout=120,
    )

  proc = plot("--labels", "A,A,B", "--x", "both", "--reference", "cleanrl:pong")
  assert proc.returncode == 0, proc.stderr[-2000:]
  import matplotlib.image

  image = matplotlib.image.imread(out)
  assert image.shape[0] > 300 and image.shape[1] > 1000  # two panels
  bad = plot("--labels", "A,B")
  assert bad.returncode == 2 and "--labels has 2 names" in bad.stderr
  # These runs predate episode/return_last100.
  untagged = plot("--tag", "episode/return_last100")
  assert untagged.returncode == 2
  assert "no logdir has episode/return_last100" in untagged.stderr


def test_plot_curves_reference_points_parse_or_name_the_bad_point():
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  try:
    import plot_curves
  finally:
    sys.path.pop(0)
  name, xs, ys, game = plot_curves.parse_reference(
    "CleanRL PPO:4e6=660,2e6=530"
  )
  assert name == "CleanRL PPO" and game is None
  assert xs.tolist() == [2e6, 4e6] and ys.tolist() == [530.0, 660.0]
  # A built-in curve by name: CleanRL's PPO on BeamRider, ascending steps.
  built_in = plot_curves.parse_reference("cleanrl:beam_rider")
  assert built_in.game == "beam_rider"
  assert built_in.name == "CleanRL ppo_atari beam_rider"
  assert built_in.xs[0] == 0.5e6 and built_in.ys[0] == 535.0
  assert np.all(np.diff(built_in.xs) > 0)
  # Drawn up to the first point at or past the runs' last agent step.
  xs, ys = np.array([2e6, 4e6, 6e6]), np.array([1.0, 2.0, 3.0])
  assert plot_curves.reference_to(3e6, xs, ys)[0].tolist() == [2e6, 4e6]
  assert plot_curves.reference_to(4e6, xs, ys)[1].tolist() == [1.0, 2.0]
  assert plot_curves.reference_to(1e6, xs, ys)[0].tolist() == [2e6]
  assert plot_curves.reference_to(9e6, xs, ys)[0].tolist() == [2e6, 4e6, 6e6]
  for bad, words in (
    ("2e6=530", "expected NAME:X=Y"),
    ("ref:2e6=530,4e6", "'4e6' is not X=Y"),
    ("ref:a=b", "'a=b' is not X=Y"),
    (
      "cleanrl:BeamRider",
      "no built-in CleanRL curve for 'BeamRider'; "
      "there are: battle_zone, beam_rider, breakout, double_dunk, "
      "name_this_game, "
      "phoenix, pong, qbert, seaquest, space_invaders",
    ),
  ):
    with pytest.raises(ValueError, match=words):
      plot_curves.parse_reference(bad)


def _compare_reference():
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  try:
    import compare_reference
  finally:
    sys.path.pop(0)
  return compare_reference


def test_compare_reference_judges_seeds_at_agent_steps_and_minutes(
  tmp_path, capsys
):
  """A logdir (event files) and a console log are two seeds; the reference
  is y = x / 100 between 0 and 10,000 agent steps."""
  from seed_rl.common.metrics import progress_line

  _fake_run(tmp_path / "a", 10.0, steps=10, tag="episode/return_last100")
  import tensorflow as tf

  # The learner's clock, one minute per step, resumed after step 5 (a new
  # process counts from 0 again).
  writer = tf.summary.create_file_writer(str(tmp_path / "a"))
  with writer.as_default():
    for step in range(1, 11):
      tf.summary.scalar(
        "perf/elapsed_s", 60.0 * (step - 5 * (step > 5)), step=step
      )
  writer.close()
  console = tmp_path / "b.out"
  lines = [
    "actor 0: 500 env steps/s",
    progress_line(30, 1, 500, 50, None, 0, {}),
  ]
  for k in range(1, 9):  # one line a minute, 1,000 agent steps a minute
    lines.append(progress_line(60 * k, 10 * k, 1000 * k, 16.7, 20.0 * k, k, {}))
  console.write_text("\n".join(lines) + "\n")
  compare_reference = _compare_reference()
  args = [str(tmp_path / "a"), str(console), "--reference", "R:0=0,1e4=100"]
  assert (
    compare_reference.main(args + ["--at", "2500,9500", "--minutes", "5"]) == 0
  )
  out = json.loads(capsys.readouterr().out)
  first, second = out["at_agent_steps"]
  assert first["returns"] == [25.0, 50.0] and first["n"] == 2
  assert first["mean"] == 37.5 and first["reference"] == 25.0
  assert first["ratio"] == 1.5 and first["difference"] == 12.5
  # The console run ended at 8,000 agent steps: not in the mean at 9,500.
  assert second["returns"] == [95.0, None] and second["n"] == 1
  assert second["ratio"] == 1.0
  a, b = out["at_minutes"]["runs"]
  assert b["reached"] and b["minutes"] == 5.0 and b["agent_steps"] == 5000
  assert b["return_last100"] == 100.0 and b["reference"] == 50.0
  assert b["ratio"] == 2.0
  # The event files' run by its learner clock, not their wall times
  # (written within a second): minute 5 is step 5, across the resume.
  assert a["reached"] and a["minutes"] == 5.0 and a["agent_steps"] == 5000
  assert a["return_last100"] == 50.0 and a["ratio"] == 1.0
  assert out["at_minutes"]["at_or_above_reference"] == 2
  assert [r["source"] for r in out["runs"]] == ["event files", "console log"]
  # Without --at, the reference's own points; outside them, no reference.
  assert compare_reference.main(args) == 0
  out = json.loads(capsys.readouterr().out)
  assert [m["agent_steps"] for m in out["at_agent_steps"]] == [0.0, 1e4]


def test_compare_reference_names_what_it_cannot_read(tmp_path, capsys):
  compare_reference = _compare_reference()
  _fake_run(tmp_path / "old", 1.0, steps=3)  # episode/return only
  back = tmp_path / "two_runs.out"
  from seed_rl.common.metrics import progress_line

  back.write_text(
    progress_line(60, 1, 10, 1, 1.0, 1, {})
    + "\n"
    + progress_line(5, 1, 10, 1, 1.0, 1, {})
    + "\n"
  )
  for run, words in (
    (tmp_path / "old", "no episode/return_last100 in its event files"),
    (back, "the learner's clock goes back"),
    (tmp_path / "missing", "neither a logdir nor a console log"),
  ):
    with pytest.raises(SystemExit) as e:
      compare_reference.main([str(run), "--reference", "R:0=0,1=1"])
    assert e.value.code == 2
    assert words in capsys.readouterr().err
  with pytest.raises(SystemExit):
    compare_reference.main([str(back), "--reference", "R:0=0", "--at", "x"])
  assert "--at 'x': expected comma-separated numbers" in capsys.readouterr().err


def test_compare_reference_scores_a_named_atari_curve_human_normalised(
  tmp_path, capsys
):
  """Seaquest: random 68.4, human 42,054.7 (seed_rl.atari.scores)."""
  from seed_rl.common.metrics import progress_line

  run = tmp_path / "seaquest.out"
  # 1M agent steps a minute; the return is 1,000 at 2M and 2,000 at 3M.
  run.write_text(
    "\n".join(
      progress_line(60 * k, k, 1_000_000 * k, 1.0, 1000.0 * (k - 1), k, {})
      for k in range(1, 4)
    )
    + "\n"
  )
  compare_reference = _compare_reference()
  args = [str(run), "--reference", "cleanrl:seaquest", "--at", "2e6"]
  assert compare_reference.main(args + ["--minutes", "3"]) == 0
  out = json.loads(capsys.readouterr().out)
  assert out["game"] == "seaquest"
  (row,) = out["at_agent_steps"]
  assert row["mean"] == 1000.0 and row["reference"] == 870.0
  assert row["hns_mean"] == round((1000.0 - 68.4) / (42054.7 - 68.4), 4)
  assert row["hns_reference"] == round((870.0 - 68.4) / (42054.7 - 68.4), 4)
  (after,) = out["at_minutes"]["runs"]
  assert after["agent_steps"] == 3_000_000 and after["reference"] == 875.0
  assert after["hns"] == round((2000.0 - 68.4) / (42054.7 - 68.4), 4)
  # Points given by hand carry no game: no normalised score unless named.
  custom = [str(run), "--reference", "R:2e6=870", "--at", "2e6"]
  assert compare_reference.main(custom) == 0
  out = json.loads(capsys.readouterr().out)
  assert out["game"] is None and out["at_agent_steps"][0]["hns_mean"] is None
  assert compare_reference.main(custom + ["--game", "seaquest"]) == 0
  assert json.loads(capsys.readouterr().out)["at_agent_steps"][0][
    "hns_reference"
  ] == round((870.0 - 68.4) / (42054.7 - 68.4), 4)
  with pytest.raises(SystemExit) as e:
    compare_reference.main(custom + ["--game", "Seaquest2"])
  assert e.value.code == 2
  assert "no reference scores for Atari game 'Seaquest2'" in (
    capsys.readouterr().err
  )


def test_progress_lines_read_back_including_negative_returns():
  from seed_rl.common.metrics import parse_progress_line, progress_line

  line = progress_line(
    3599.6, 48428, 3_875_104, 1179.2, -20.5, 2300, {"a/b": 1}
  )
  assert parse_progress_line(line + " | 99% done, ETA 0m01s") == {
    "elapsed_s": 3600.0,
    "learner_steps": 48428.0,
    "env_steps": 3875104.0,
    "return_last100": -20.5,
    "episodes": 2300.0,
  }
  assert parse_progress_line(progress_line(1, 1, 1, 1, None, 0, {})) is None
  assert parse_progress_line("[learner] checkpoint in /x") is None


def test_a_resumed_learner_clock_runs_on():
  clock = _compare_reference().continuous_clock
  assert clock(np.array([5.0, 10.0, 2.0, 7.0, 1.0])).tolist() == [
    5.0,
    10.0,
    12.0,
    17.0,
    18.0,
  ]


def _benchmark_module(name):
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  try:
    return __import__(name)
  finally:
    sys.path.pop(0)


def test_atari5_regression_reproduces_its_published_reading_of_cleanrl():
  """CleanRL's 10M table scores through the Atari-5 regression give a
  57-game median of ~72.5% (the regression's own weights and human/random
  scores); a negative score counts as random play, and all five games are
  needed."""
  from seed_rl.atari.scores import human_normalized

  references = _benchmark_module("references")
  table = {"battle_zone": 20424.17, "double_dunk": -6.72}
  table.update(name_this_game=5939.28, phoenix=14847.46, qbert=17318.50)
  hns = {g: human_normalized(g, s) for g, s in table.items()}
  assert references.atari5_median(hns) == pytest.approx(0.725, abs=0.005)
  worse = dict.fromkeys(table, -0.5)
  assert references.atari5_median(worse) == 0.0
  with pytest.raises(ValueError, match="missing \\['qbert'\\]"):
    references.atari5_median({g: 1.0 for g in table if g != "qbert"})


def test_every_suite_game_has_a_cleanrl_curve_and_human_scores():
  """A suite game without CleanRL's curve or the human/random scores
  could be run but not judged; the curves' points rise in agent steps and
  end at the results table's 10M mean."""
  from seed_rl.atari import scores

  suite = _benchmark_module("atari_suite")
  refs = _benchmark_module("references").CLEANRL_PPO_ATARI
  games = [g for names in suite.SUITES.values() for g in names]
  assert len(games) == len(set(games)), "a game in two suites"
  for game in games:
    assert game in refs, game
    assert game in scores.GAMES, game
    steps = list(refs[game])
    assert steps == sorted(steps) and steps[0] <= 1e6, game
  assert refs["breakout"][10e6] == 465.90


def test_atari_suite_reports_each_game_against_cleanrl_and_the_regression(
  tmp_path, capsys
):
  """Five fake runs of 50,000 agent steps a minute for 80 minutes, each
  holding CleanRL's 2M-step return throughout: after 60 minutes (3M agent
  steps) each is judged against CleanRL's 3M point."""
  import tensorflow as tf

  suite = _benchmark_module("atari_suite")
  refs = _benchmark_module("references").CLEANRL_PPO_ATARI
  for game in suite.SUITES["atari5"]:
    writer = tf.summary.create_file_writer(
      str(tmp_path / "2core" / f"{game}-s0")
    )
    with writer.as_default():
      for step in range(1, 81):  # 80 minutes, 4M agent steps
        tf.summary.scalar("perf/env_steps", 50_000.0 * step, step=step)
        tf.summary.scalar("perf/elapsed_s", 60.0 * step, step=step)
        tf.summary.scalar("episode/return_last100", refs[game][2e6], step=step)
        # A lag that grows by one update a minute: its median over the
        # first 60 minutes is 30.5, over all 80 it would be 40.5.
        tf.summary.scalar("perf/policy_lag", float(step), step=step)
    writer.close()
  with open(tmp_path / "2core" / "qbert-s0" / suite.EVAL_FILE, "w") as f:
    json.dump(
      {
        mode: {"mean_return": 250.0, "std_return": 5.0, "episodes": 10}
        | {"human_normalized_score": 0.0066}
        for mode in ("greedy", "sample")
      },
      f,
    )
  assert suite.main(["report", "--root", str(tmp_path), "--minutes", "60"]) == 0
  lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  games, summary = lines[:-1], lines[-1]
  assert [g["game"] for g in games] == suite.SUITES["atari5"]
  phoenix = games[3]
  (run,) = phoenix["runs"]
  # After 60 minutes: 3M agent steps, CleanRL's 3M point (5,540).
  assert run["agent_steps"] == 3_000_000 and run["reached"]
  assert run["return_last100"] == 4930.0 and run["cleanrl"] == 5540.0
  assert run["ratio"] == round(4930.0 / 5540.0, 3)
  assert run["hns"] == round((4930.0 - 761.4) / (7242.6 - 761.4), 4)
  assert run["policy_lag"] == 30.5
  # Double Dunk's scores are negative: a ratio of returns means nothing,
  # the ratio of human-normalised scores does.
  (dd,) = games[1]["runs"]
  assert dd["ratio"] is None
  assert dd["hns_ratio"] == round((-16.2 + 18.6) / (-16.8 + 18.6), 3)
  assert games[4]["runs"][0]["noop30"]["greedy"]["mean_return"] == 250.0
  assert summary["games"] == summary["of"] == 5
  hns = {g["game"]: g["mean_hns"] for g in games}
  assert summary["atari5_median"] == round(
    _benchmark_module("references").atari5_median(hns), 4
  )
  assert summary["atari5_median_cleanrl"] > 0
  # Every line names the emulator CleanRL's curve ran on; Battle Zone,
  # which learned differently on the two, says so and is listed.
  references = _benchmark_module("references")
  assert {g["cleanrl_emulator"] for g in games} == {references.ENVPOOL}
  assert "ale-py 0.12.1" in games[0]["emulator_effect"]
  assert all("emulator_effect" not in g for g in games[1:])
  assert summary["emulator_effects"] == ["battle_zone"]
  # Read at 2.5M agent steps instead (50 minutes of these runs' clocks),
  # against CleanRL's curve there; a step no run reached is not read.
  assert (
    suite.main(["report", "--root", str(tmp_path), "--agent_steps", "2.5e6"])
    == 0
  )
  lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  (run,), summary = lines[3]["runs"], lines[-1]
  curve = _benchmark_module("references").named("cleanrl:phoenix")
  assert run["agent_steps"] == 2_500_000 and run["reached"]
  assert run["minutes"] == 50.0 and run["return_last100"] == 4930.0
  assert run["cleanrl"] == round(float(np.interp(2.5e6, curve.xs, curve.ys)), 2)
  assert run["ratio"] == round(4930.0 / run["cleanrl"], 3)
  assert run["policy_lag"] == 25.5
  assert summary["agent_steps"] == 2.5e6 and summary["minutes"] is None
  assert (
    suite.main(["report", "--root", str(tmp_path), "--agent_steps", "5e6"]) == 0
  )
  lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  (run,) = lines[3]["runs"]
  assert not run["reached"] and run["return_last100"] is None
  assert run["minutes"] is None and run["ratio"] is None
  assert lines[-1]["games"] == 0 and "atari5_median" not in lines[-1]
  with pytest.raises(SystemExit):
    suite.main(["report", "--root", str(tmp_path), "--agent_steps", "0"])
  assert "--agent_steps 0: a positive step count" in capsys.readouterr().err
  out = tmp_path / "atari5.png"
  assert suite.main(["plot", "--root", str(tmp_path), "--out", str(out)]) == 0
  assert out.stat().st_size > 10_000


def test_atari_suite_trains_the_accelerator_overlay_as_a_keeping_up_learner():
  """The accelerator configuration's runs: its overlay, one actor of a
  round's 32 envs, synchronous; CleanRL's update: its overlay on CleanRL's
  8 envs; the 2-core default's: the pair's gin file alone."""
  import argparse

  suite = _benchmark_module("atari_suite")

  def command(config, binding=(), agent_steps=None):
    args = argparse.Namespace(
      agent="vtrace",
      minutes=60.0,
      agent_steps=agent_steps,
      seed=0,
      config=config,
      binding=[*binding],
    )
    return suite.train_command(args, "qbert", "/runs/qbert-s0")

  fast = command("accelerator", ["VtraceConfig.entropy_cost = 0.02"])
  overlay = fast[fast.index("--gin_config") + 1]
  assert overlay.endswith("vtrace_accelerator.gin") and os.path.exists(overlay)
  assert fast[fast.index("--envs_per_actor") + 1] == "32"
  assert fast[fast.index("--num_actors") + 1] == "1"
  assert fast[-2:] == [
    "LearnerConfig.synchronous = True",
    "VtraceConfig.entropy_cost = 0.02",
  ]
  cleanrl = command("cleanrl")
  overlay = cleanrl[cleanrl.index("--gin_config") + 1]
  assert overlay.endswith("vtrace_cleanrl.gin") and os.path.exists(overlay)
  assert cleanrl[cleanrl.index("--envs_per_actor") + 1] == "8"
  assert cleanrl[-1] == "LearnerConfig.synchronous = True"
  assert "--max_env_steps" not in fast
  capped = command("accelerator", agent_steps=3.1e6)
  assert capped[capped.index("--max_env_steps") + 1] == "3100000"
  assert capped[capped.index("--max_minutes") + 1] == "60"
  small = command("2core")
  assert "--gin_config" not in small and "--envs_per_actor" not in small
  assert small[-1] == "atari.create_environment.game = 'qbert'"
  earlier = command("nips")
  overlay = earlier[earlier.index("--gin_config") + 1]
  assert overlay.endswith("vtrace_nips.gin") and os.path.exists(overlay)
  assert "--envs_per_actor" not in earlier  # 2 x 16, as the 2-core default


def _peer_scalars(logdir, rows):
  """Event files as benchmarks/peer_sb3.py's SummaryWriter writes them:
  plain scalars (simple_value) at x = agent steps."""
  from tensorboard.compat.proto import event_pb2, summary_pb2
  from tensorboard.summary.writer.event_file_writer import EventFileWriter

  writer = EventFileWriter(str(logdir))
  for step, tag, value in rows:
    summary = summary_pb2.Summary(
      value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]
    )
    writer.add_event(
      event_pb2.Event(wall_time=float(step), step=step, summary=summary)
    )
  writer.close()


def test_wallclock_reads_both_sides_at_the_same_minute(tmp_path):
  """Ours: 1,000 agent steps/s, return = minutes; the peer: 250 agent
  steps/s, return = -minutes, its last clock point past the window."""
  import tensorflow as tf

  wallclock = _benchmark_module("wallclock")
  ours, peer = tmp_path / "ours", tmp_path / "peer"
  writer = tf.summary.create_file_writer(str(ours))
  with writer.as_default():
    for minute in range(1, 31):
      tf.summary.scalar("perf/env_steps", 60_000.0 * minute, step=minute)
      tf.summary.scalar("perf/elapsed_s", 60.0 * minute, step=minute)
      tf.summary.scalar("episode/return_last100", float(minute), step=minute)
  writer.close()
  rows = []
  for minute in range(1, 31):
    steps = 15_000 * minute
    rows.append((steps, "episode/return_last100", -float(minute)))
    rows.append((steps, "perf/elapsed_s", 60.0 * minute))
  _peer_scalars(peer, rows)
  out = wallclock.compare("pong", str(ours), str(peer), 20.0)
  assert out["ours"]["agent_steps"] == 1_200_000
  assert out["ours"]["return_last100"] == 20.0
  assert out["peer"]["agent_steps"] == 300_000
  assert out["peer"]["agent_steps_per_s"] == 250.0
  assert out["peer"]["return_last100"] == -20.0
  assert out["ours_ahead"] and out["agent_steps_ratio"] == 4.0
  with pytest.raises(ValueError, match="short of --minutes 45"):
    wallclock.compare("pong", str(ours), str(peer), 45.0)


def test_replay_checkpoint_prints_what_keeping_replay_costs(capsys):
  bench = _benchmark_module("replay_checkpoint")
  assert bench.main(["--only", "r2d2_cartpole_4k"]) == 0
  (line,) = capsys.readouterr().out.splitlines()
  row = json.loads(line)
  assert row["items"] == 4000 and row["archive_mib"] > 0
  assert row["save_s"] > 0 and row["restore_s"] > 0


def test_frame_push_times_every_layout_per_env(capsys):
  _benchmark_module("frame_push").main(["--envs", "4", "--repeats", "3"])
  row = json.loads(capsys.readouterr().out)
  assert row["benchmark"] == "frame_push" and row["envs"] == 4
  assert row["push_kind"] in ("compiled", "numpy")
  assert {"runtime_push", "ring_push_transpose", "ring_push_channels"} <= set(
    row["us_per_env"]
  )
  assert all(us > 0 for us in row["us_per_env"].values())


def test_frame_push_native_checks_and_times_both_native_pushes(capsys):
  bench = _benchmark_module("frame_push_native")
  args = ["--envs", "4", "--table_envs", "8", "--repeats", "2", "--rounds", "1"]
  rc = bench.main(args)
  if rc == 77:
    pytest.skip(f"no C compiler: {capsys.readouterr().err.strip()}")
  assert rc == 0  # the native results equal NumPy's (asserted inside)
  row = json.loads(capsys.readouterr().out)
  assert row["envs"] == 4 and row["table_envs"] == 8
  arms = {"numpy", "native_fused", "native_ring"}
  from seed_rl.common import env_state

  if env_state._NATIVE is not None:  # the package's own push, also checked
    arms.add("runtime")
  assert set(row["us_per_env"]) == arms
  assert all(us > 0 for us in row["us_per_env"].values())


def test_frame_push_native_skips_naming_the_compiler_that_failed(capsys):
  bench = _benchmark_module("frame_push_native")
  assert bench.main(["--cc", "/nonexistent/cc", "--repeats", "1"]) == 77
  err = capsys.readouterr().err
  assert "no working C compiler" in err and "/nonexistent/cc" in err


def test_grpc_aio_floor_counts_messages_and_server_cpu(capsys):
  bench = _benchmark_module("grpc_aio_floor")
  assert bench.main(["--streams", "2", "--seconds", "1", "--warmup", "1"]) == 0
  row = json.loads(capsys.readouterr().out)
  assert row["streams"] == 2 and row["envs_per_message"] == 32
  assert row["message_bytes"] > 32 * 84 * 84
  assert row["messages_per_s"] > 0 and row["server_cpu_us_per_message"] > 0


def test_grpc_aio_floor_measures_the_thread_pool_server_too(capsys):
  bench = _benchmark_module("grpc_aio_floor")
  args = ["--streams", "2", "--seconds", "1", "--warmup", "1"]
  assert bench.main([*args, "--server", "sync"]) == 0
  row = json.loads(capsys.readouterr().out)
  assert row["server"] == "sync" and row["streams"] == 2
  assert row["messages_per_s"] > 0 and row["server_cpu_us_per_message"] > 0


def test_grpc_aio_floor_measures_grpcs_cpp_server(capsys):
  bench = _benchmark_module("grpc_aio_floor")
  args = ["--streams", "2", "--seconds", "1", "--warmup", "1"]
  rc = bench.main([*args, "--server", "cpp"])
  if rc == 77:
    pytest.skip(capsys.readouterr().err.strip())
  assert rc == 0
  row = json.loads(capsys.readouterr().out)
  assert row["server"] == "cpp" and row["streams"] == 2
  assert row["messages_per_s"] > 0 and row["server_cpu_us_per_message"] > 0


def test_grpc_aio_floor_skips_naming_what_the_cpp_server_needs(capsys):
  bench = _benchmark_module("grpc_aio_floor")
  rc = bench.main(["--server", "cpp", "--cxx", "/nonexistent/c++"])
  assert rc == 77
  err = capsys.readouterr().err
  assert "/nonexistent/c++" in err or "libgrpc++-dev" in err


@pytest.mark.parametrize("obs", ["atari", "cartpole"])
def test_wire_decode_times_both_readings_of_the_same_messages(capsys, obs):
  bench = _benchmark_module("wire_decode")
  args = ["--obs", obs, "--envs", "1", "4", "--repeats", "20", "--rounds", "1"]
  assert bench.main(args) == 0
  rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  assert [row["envs_per_message"] for row in rows] == [1, 4]
  for row in rows:
    assert set(row["us_per_message"]) == {
      "parse",
      "template",
      "response_serialized",
      "response_prefix",
    }
    assert all(us > 0 for us in row["us_per_message"].values())


def test_emulator_parity_sees_one_emulator_agree_with_itself_only():
  bench = _benchmark_module("emulator_parity")
  actions = bench.action_sequence("random", 6, 500, seed=3)
  assert actions == bench.action_sequence("random", 6, 500, seed=3)
  assert len(actions) == 500 and set(actions) == set(range(6))
  runs = [len(list(group)) for _, group in itertools.groupby(actions)]
  # Held 1..MAX_HOLD steps each (holds of one action can join into a run).
  assert max(runs) > 1 and len(runs) >= 500 // bench.MAX_HOLD // 2
  assert bench.action_sequence("noop", 6, 7, seed=3) == [0] * 7
  # ale-py against itself: the same game is the same frames throughout.
  same = bench.compare(
    [bench.AlePy("pong", 0), bench.AlePy("pong", 0)],
    bench.action_sequence("random", 6, 200, seed=0),
  )
  assert same["reset_frames_equal"] and same["first_differing_step"] is None
  assert same["differing_fraction"] == 0.0 and same["agent_steps"] == 200
  assert same["returns"][0] == same["returns"][1]
  # Two games that share an action set differ from the first frame.
  other = bench.compare(
    [bench.AlePy("pong", 0), bench.AlePy("breakout", 0)], [0, 1, 2, 3] * 20
  )
  assert not other["reset_frames_equal"]
  assert (
    other["first_differing_step"] == 1 and other["differing_fraction"] == 1.0
  )


def test_stack_replay_covers_its_cases_and_flags_stacks_built_otherwise(
  tmp_path,
):
  bench = _benchmark_module("stack_replay")
  calls = bench.script(60)
  rows = [r for step in calls for call in step for r in call]
  train = [r for r in rows if r["env_ids"][0] != bench.NUM_TRAIN]
  for event in ("terminated", "truncated", "life_lost"):
    assert sum(r[event].sum() for r in train) >= 2, event
  assert sum(len(r["final_observation"]) for r in rows) == sum(
    r["truncated"].sum() for r in rows
  )
  assert {tuple(r["run_ids"]) for r in train if len(r["env_ids"]) == 4} >= {
    (11, 12, 13, 14),
    (11, 99, 13, 14),
    (11, 99, 101, 102),
  }
  assert any(len(step[0]) == 2 for step in calls)  # merged actors
  # A copy of this tree whose training-step stacks keep frames from
  # before an episode start: the same act inputs, other unrolls.
  for part in ("seed_rl", os.path.join("benchmarks", "null_agent")):
    shutil.copytree(
      os.path.join(ROOT, part),
      tmp_path / part,
      ignore=shutil.ignore_patterns("__pycache__"),
    )
  stacks = tmp_path / "seed_rl" / "agents" / "frame_stacks.py"
  masked = "  word = tf.cond(tf.reduce_any(starts[1:]), masked, lambda: word)"
  assert masked in stacks.read_text()
  stacks.write_text(stacks.read_text().replace(masked, "  word = word"))
  out = subprocess.run(
    [sys.executable, "benchmarks/stack_replay.py", "--before", str(tmp_path)]
    + ["--steps", "40"],
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert out.returncode == 1, out.stderr
  result = json.loads(out.stdout.strip().splitlines()[-1])
  assert result["same"] is False
  for name, after in result["after"]["configs"].items():
    before = result["before"]["configs"][name]
    assert after["handed_as"] == {"frames": after["unrolls"], "stacks": 0}
    assert after["unrolls"] == before["unrolls"] > 10
    assert after["acts_sha256"] == before["acts_sha256"]
    assert after["unrolls_sha256"] != before["unrolls_sha256"]
