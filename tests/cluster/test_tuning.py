"""Hyperparameter tuning on Vertex AI: the study spec validates against the
aiplatform types, a trial's `--hp_...` flags become gin bindings in the
learner and the actors, and the learner reports its metric in the file the
tuning service reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from seed_rl import learner_main
from seed_rl.actors import main as actor_main
from seed_rl.cluster import tuning
from tests.support import ROOT
from tests.support.vertex import SAMPLE_CLUSTER_SPEC
from tests.support.recording_agent import RecordingAgent, step_batch

PARAMS = [
  "VtraceConfig.learning_rate=double:1e-4:1e-3:log",
  "VtraceConfig.batch_size=int:8:32",
  "VtraceConfig.entropy_cost=discrete:0.03,0.003,0.01",
  "VtraceConfig.optimizer=categorical:adam,rmsprop",
]
# A value Vertex might pick for each, and the gin binding it must become.
TRIAL = {
  "hp_VtraceConfig__learning_rate": (
    "0.00031",
    "VtraceConfig.learning_rate = 0.00031",
  ),
  "hp_VtraceConfig__batch_size": ("16", "VtraceConfig.batch_size = 16"),
  "hp_VtraceConfig__entropy_cost": ("0.01", "VtraceConfig.entropy_cost = 0.01"),
  "hp_VtraceConfig__optimizer": ("adam", "VtraceConfig.optimizer = 'adam'"),
}


def _tune_dry_run(*flags):
  tune = ["--tune", "--max_trial_count", "12", "--parallel_trial_count", "3"]
  for p in PARAMS:
    tune += ["--tune_param", p]
  proc = subprocess.run(
    ["bash", os.path.join(ROOT, "gcp", "train_classic.sh")]
    + ["--project", "p", "--bucket", "gs://b/seed_rl"]
    + ["--image_repo", "us-central1-docker.pkg.dev/p/seed-rl"]
    + ["--display_name", "tune-run", "--dry_run", "--agent", "vtrace"]
    + tune
    + list(flags),
    env=dict(os.environ, PYTHON=sys.executable),
    capture_output=True,
    text=True,
    timeout=120,
  )
  return proc


def test_tuning_job_validates_as_a_hyperparameter_tuning_job():
  from google.cloud.aiplatform_v1.types import hyperparameter_tuning_job
  from google.protobuf import json_format

  proc = _tune_dry_run()
  assert proc.returncode == 0, proc.stderr
  job = json.loads(proc.stdout)
  # REST field names, as the issue asks, then the types (unknown = error).
  assert set(job) >= {
    "studySpec",
    "trialJobSpec",
    "maxTrialCount",
    "parallelTrialCount",
  }
  pb = json_format.ParseDict(
    job, hyperparameter_tuning_job.HyperparameterTuningJob.pb()()
  )
  assert (pb.max_trial_count, pb.parallel_trial_count) == (12, 3)
  (metric,) = pb.study_spec.metrics
  assert metric.metric_id == "episode_return" and metric.goal == 1  # MAXIMIZE
  params = {p.parameter_id: p for p in pb.study_spec.parameters}
  assert set(params) == set(TRIAL)
  lr = params["hp_VtraceConfig__learning_rate"]
  assert (lr.double_value_spec.min_value, lr.double_value_spec.max_value) == (
    1e-4,
    1e-3,
  )
  assert lr.scale_type == 2  # UNIT_LOG_SCALE
  assert list(
    params["hp_VtraceConfig__entropy_cost"].discrete_value_spec.values
  ) == [
    0.003,
    0.01,
    0.03,
  ]
  learner_pool, actor_pool = pb.trial_job_spec.worker_pool_specs
  learner_args = list(learner_pool.container_spec.args)
  assert learner_args[-2:] == ["--hypertune_metric", "episode/return"]


def test_a_trials_flags_become_gin_bindings_in_learner_and_actors(monkeypatch):
  job = json.loads(_tune_dry_run().stdout)
  learner_pool, actor_pool = job["trialJobSpec"]["workerPoolSpecs"]
  # Vertex appends the trial's values to every replica's arguments.
  trial_flags = []
  for i, (pid, (value, _)) in enumerate(sorted(TRIAL.items())):
    trial_flags += [f"--{pid}={value}"] if i % 2 else [f"--{pid}", value]
  expected = [binding for _, (_, binding) in sorted(TRIAL.items())]
  argv, tuned = tuning.extract_hyperparameters(
    learner_pool["containerSpec"]["args"] + trial_flags
  )
  assert tuned == expected
  largs = learner_main.build_parser().parse_args(argv)
  assert largs.hypertune_metric == "episode/return"
  monkeypatch.setenv("CLUSTER_SPEC", json.dumps(SAMPLE_CLUSTER_SPEC))
  a = actor_main.parse_args(actor_pool["containerSpec"]["args"] + trial_flags)
  assert a.gin_bindings[-len(expected) :] == expected
  # Each trial writes its own logdir.
  monkeypatch.setenv("CLOUD_ML_TRIAL_ID", "7")
  assert learner_main._logdir(largs) == "/gcs/b/seed_rl/tune-run/trial-7"


@pytest.mark.parametrize(
  "param, message",
  [
    ("VtraceConfig.learning_rate=double:1e-3:1e-4", "need MIN < MAX"),
    ("VtraceConfig.learning_rate=double:0:1:log", "MIN > 0 on a log scale"),
    ("VtraceConfig.batch_size=int:8.5:32", "int bounds must be integers"),
    ("VtraceConfig.learning_rate=uniform:0:1", "KIND one of double, int"),
    ("learning_rate=double:0:1", "expected a gin binding name"),
    ("scope/VtraceConfig.lr=double:0:1", "expected a gin binding name"),
    ("Config_.rate=double:0:1", "expected a gin binding name"),
    ("atari.create_environment.noop_max=int:0:30", "expected a gin binding"),
    ("VtraceConfig.entropy_cost=discrete:a,b", "are not all numbers"),
  ],
)
def test_bad_parameter_specs_are_refused_by_name(param, message):
  with pytest.raises(ValueError, match=message):
    tuning.parameter_spec(param)


def test_bad_tuning_arguments_fail_before_anything_is_submitted():
  proc = _tune_dry_run("--parallel_trial_count", "20")
  assert proc.returncode == 2
  assert "--parallel_trial_count <= --max_trial_count" in proc.stderr
  proc = _tune_dry_run("--tune_metric", "loss/total")
  assert proc.returncode == 2 and "--tune_metric 'loss/total'" in proc.stderr
  with pytest.raises(ValueError, match="not a tuned parameter id"):
    tuning.extract_hyperparameters(["--hp_lr=3"])


def test_learner_reports_the_mean_of_the_last_100_episodes(tmp_path):
  from seed_rl.common.learner import Learner, LearnerConfig
  from seed_rl.common.specs import ArraySpec

  path = str(tmp_path / "hypertune" / "output.metrics")
  obs_spec = ArraySpec((1,), "float32")
  act_spec = ArraySpec((), "int32", num_values=2)
  agent = RecordingAgent(obs_spec, act_spec, 1)
  config = LearnerConfig(max_seconds=0.6, log_every_s=0.2)
  learner = Learner(agent, obs_spec, act_spec, 1, 0, config)
  learner.reporter.hypertune = tuning.HypertuneReporter("episode/return", path)
  for reward, term in [(0.0, False), (2.0, False), (3.0, True), (1.0, False)]:
    b = step_batch([0], [1], [[0]], reward=[reward], terminated=[term])
    if term:
      b.episode_return = np.array([5.0], np.float32)
      b.episode_length = np.array([2], np.int32)
    learner._infer([b])
  assert learner.run() == "max_seconds 0.6 reached"
  with open(path) as f:
    lines = f.read().splitlines()
  assert len(lines) >= 2  # one per report (every 0.2 s and at the end)
  entry = json.loads(lines[-1])
  assert entry["episode_return"] == "5.0"
  assert entry["global_step"] == str(learner.env_steps)
  assert set(entry) == {"episode_return", "global_step", "timestamp", "trial"}
  reporter = tuning.HypertuneReporter("episode/return", path)
  for i in range(150):
    reporter.report(float(i), i)
  with open(path) as f:
    lines = f.read().splitlines()
  assert (
    len(lines) == 100 and json.loads(lines[-1])["episode_return"] == "149.0"
  )
