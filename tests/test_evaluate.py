"""seed_rl.evaluate on the checkpoint of a short CartPole run of the launcher.

The launcher trains V-trace for 2,000 env steps; the learner leaves
run.json, operative_config.gin and a checkpoint in the logdir. evaluate
then plays 3 greedy episodes in one process and must print one JSON line
whose statistics agree with its per-episode lists, and write an mp4 of the
first episode: one 600x400 CartPole frame per step of that episode.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

imageio = pytest.importorskip("imageio.v2")
pytest.importorskip("imageio_ffmpeg")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
  reader = imageio.get_reader(video)
  frames = [frame for frame in reader]
  reader.close()
  assert len(frames) == result["video_frames"]
  assert len(frames) in result["episode_lengths"]
  assert frames[0].shape == (400, 600, 3)
  assert frames[0].std() > 0  # a picture, not a blank frame


def test_missing_video_extra_is_named(tmp_path, monkeypatch):
  from seed_rl import evaluate

  monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)
  with pytest.raises(RuntimeError, match=r"pip install -e '\.\[video\]'"):
    evaluate._video_writer(str(tmp_path / "x.mp4"), 30.0)


def test_image_observations_are_recognised_by_their_spec():
  """Specs hold dtypes by name ('uint8'): a frame observation can be shown
  in a video when the environment cannot render."""
  from seed_rl import evaluate
  from seed_rl.common.specs import ArraySpec

  assert evaluate.is_image(ArraySpec((84, 84), "uint8"))
  assert evaluate.is_image(ArraySpec((84, 84, 1), np.uint8))
  assert evaluate.is_image(ArraySpec((64, 64, 3), "uint8"))
  assert not evaluate.is_image(ArraySpec((84, 84, 4), "uint8"))
  assert not evaluate.is_image(ArraySpec((84, 84), "float32"))
