"""seed_rl.evaluate on the checkpoint of a short CartPole run of the launcher.

The launcher trains V-trace for 2,000 env steps; the learner leaves
run.json, operative_config.gin and a checkpoint in the logdir. evaluate
then plays 3 greedy episodes in one process and must print one JSON line
whose statistics agree with its per-episode lists, and write an mp4 of the
first episode: one 600x400 CartPole frame per step of that episode.
classic has no evaluation protocol, so the run's own settings play and
the JSON line has the plain fields only.

A plugin domain brings its own protocol (tests/plugins/toy_domain/evaluation.py):
its flag exists for its runs, is checked before the run loads, reaches
the envs that play and adds its field to the JSON line.
"""

from tests.support import ROOT
import json
import os
import subprocess
import sys

from tests.support.helpers import saved_logdir
from tests.support.video import read_video
import numpy as np
import pytest

from seed_rl import evaluate
from seed_rl.common import evaluation
from seed_rl.common import saved_run

pytest.importorskip("imageio.v2")
pytest.importorskip("imageio_ffmpeg")


PLAIN_FIELDS = (
  "env",
  "agent",
  "episodes",
  "mode",
  "mean_return",
  "std_return",
  "min_return",
  "max_return",
  "mean_length",
  "returns",
  "episode_lengths",
  "learner_step",
  "env_steps",
  "checkpoint",
  "seed",
  "seconds",
)


def _run(args, timeout):
  return subprocess.run(
    [sys.executable, "-m"] + args,
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=timeout,
    env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
  )


def test_evaluate_prints_json_and_writes_video(tmp_path):
  logdir = str(tmp_path / "run")
  train = _run(
    [
      "seed_rl.train",
      "classic",
      "vtrace",
      "1",
      "4",
      "--logdir",
      logdir,
      "--max_env_steps",
      "2000",
    ],
    timeout=240,
  )
  assert train.returncode == 0, train.stdout[-2000:] + train.stderr[-2000:]
  # Progress toward the stop conditions, then the end-of-run summary.
  assert "% done, ETA " in train.stdout or "100% done" in train.stdout
  assert " / target 475" in train.stdout  # the gin file's target_return
  assert "[learner] finished (max_env_steps 2000 reached) after" in train.stdout
  assert f"checkpoint in {os.path.join(logdir, 'checkpoints')}" in train.stdout
  with open(os.path.join(logdir, "run.json")) as f:
    spec = json.load(f)
  assert (spec["env"], spec["agent"], spec["num_train_envs"]) == (
    "classic",
    "vtrace",
    4,
  )

  video = str(tmp_path / "cartpole.mp4")
  proc = _run(
    [
      "seed_rl.evaluate",
      "--logdir",
      logdir,
      "--episodes",
      "3",
      "--video",
      video,
      "--seed",
      "1",
    ],
    timeout=180,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = [s for s in proc.stdout.splitlines() if s.startswith("{")]
  assert len(lines) == 1, proc.stdout
  result = json.loads(lines[0])
  # No protocol: the plain fields (no "game", "protocol", ...).
  assert evaluation.domain_protocol("classic") is evaluation.PLAIN
  assert set(result) == set(PLAIN_FIELDS) | {
    "video",
    "video_source",
    "video_frames",
  }
  returns = np.asarray(result["returns"])
  assert result["episodes"] == len(returns) == 3
  assert result["mode"] == "greedy"
  # CartPole pays 1 per step: a return is its episode's length.
  assert result["episode_lengths"] == [int(r) for r in returns]
  assert result["mean_return"] == pytest.approx(returns.mean(), abs=1e-3)
  assert result["std_return"] == pytest.approx(returns.std(), abs=1e-3)
  assert result["min_return"] == returns.min()
  assert result["max_return"] == returns.max()
  # The checkpoint's counters: the final checkpoint is written once training
  # has stopped, so it holds the learner steps the run ended with.
  with open(os.path.join(logdir, "result.json")) as f:
    trained = json.load(f)
  assert result["env_steps"] >= 2000
  assert result["learner_step"] == trained["learner_steps"] > 0
  assert result["checkpoint"].startswith(os.path.join(logdir, "checkpoints"))

  # One episode of env 0 (the first to end), one frame per step.
  frames, _ = read_video(video)
  assert len(frames) == result["video_frames"]
  assert len(frames) in result["episode_lengths"]
  assert frames[0].shape == (400, 600, 3)
  assert frames[0].std() > 0  # a picture, not a blank frame


@pytest.fixture(scope="module")
def toy_logdir(tmp_path_factory):
  """An untrained V-trace agent's run of the plugin domain."""
  pytest.importorskip("tensorflow")
  logdir = str(tmp_path_factory.mktemp("toy_run"))
  return saved_logdir(logdir, "tests.plugins.toy_domain", "vtrace", num_envs=2)


def _main(capsys, *argv):
  """`python -m seed_rl.evaluate *argv` in this process: (exit status,
  stdout, stderr)."""
  try:
    code = evaluate.main(list(argv))
  except SystemExit as e:  # the parser refused the command line
    code = e.code
  out, err = capsys.readouterr()
  return code, out, err


def test_a_plugin_domain_brings_its_protocol(toy_logdir, capsys, tmp_path):
  code, out, err = _main(
    capsys, "--logdir", toy_logdir, "--episodes", "3", "--time_limit", "3"
  )
  assert code == 0, err
  result = json.loads(out.strip().splitlines()[-1])
  assert set(result) == set(PLAIN_FIELDS) | {"time_limit"}
  assert result["time_limit"] == 3
  # The goal is 4 steps away: every episode is cut at the protocol's limit.
  assert result["episode_lengths"] == [3, 3, 3]
  assert result["returns"] == pytest.approx([-0.03] * 3)
  # Without the flag, the run's own settings (4L = 20 steps at most).
  code, out, err = _main(capsys, "--logdir", toy_logdir, "--episodes", "2")
  assert code == 0, err
  result = json.loads(out.strip().splitlines()[-1])
  assert result["time_limit"] == 20
  assert max(result["episode_lengths"]) <= 20
  # Checked before the run loads; Atari's flags are not for this run.
  code, _, err = _main(capsys, "--logdir", toy_logdir, "--time_limit", "0")
  assert code == 2 and "--time_limit must be >= 1, got 0" in err
  code, _, err = _main(capsys, "--logdir", toy_logdir, "--noop_max", "5")
  assert code == 2
  assert (
    "apply to Atari runs; this run's env is tests.plugins.toy_domain" in err
  )
  # Other domains' runs do not have its flag.
  saved_run.write_run_spec(str(tmp_path), "classic", "vtrace", 4, 0, 0, [], [])
  code, _, err = _main(capsys, "--logdir", str(tmp_path), "--time_limit", "3")
  assert code == 2 and "unrecognized arguments: --time_limit 3" in err


def test_missing_video_extra_is_named(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)
  with pytest.raises(RuntimeError, match=r"pip install -e '\.\[video\]'"):
    evaluate._video_writer(str(tmp_path / "x.mp4"), 30.0)


def test_image_observations_are_recognised_by_their_spec():
  """Specs hold dtypes by name ('uint8'): a frame observation can be shown
  in a video when the environment cannot render."""
  from seed_rl.common.specs import ArraySpec

  assert evaluate.is_image(ArraySpec((84, 84), "uint8"))
  assert evaluate.is_image(ArraySpec((84, 84, 1), np.uint8))
  assert evaluate.is_image(ArraySpec((64, 64, 3), "uint8"))
  assert not evaluate.is_image(ArraySpec((84, 84, 4), "uint8"))
  assert not evaluate.is_image(ArraySpec((84, 84), "float32"))
