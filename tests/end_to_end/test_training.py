"""End to end: the real launcher, one learner process, two actor processes,
real gRPC on localhost, real CartPole, real TensorFlow training."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.support import launch

ROOT, ENV = launch.ROOT, launch.ENV


def _alive(pid):
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().split()[2] != "Z"
  except FileNotFoundError:
    return False


def test_cartpole_vtrace_trains_checkpoints_and_resumes(tmp_path):
  logdir = str(tmp_path / "run")
  first = launch.train(
    [
      "classic",
      "vtrace",
      "2",
      "4",
      "--logdir",
      logdir,
      "--max_learner_steps",
      "200",
    ]
  )
  assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
  with open(os.path.join(logdir, "result.json")) as f:
    result = json.load(f)
  assert result["learner_steps"] >= 200
  assert result["env_steps"] >= 200 * 20  # unroll 20+ per learner step
  assert result["episodes"] > 0
  assert any(n.startswith("events.out.tfevents") for n in os.listdir(logdir))
  assert os.path.exists(os.path.join(logdir, "checkpoints", "checkpoint"))
  assert os.path.exists(os.path.join(logdir, "operative_config.gin"))
  assert "[learner] step" in first.stdout or "step" in first.stdout

  second = launch.train(
    [
      "classic",
      "vtrace",
      "2",
      "4",
      "--logdir",
      logdir,
      "--max_learner_steps",
      str(result["learner_steps"] + 50),
    ]
  )
  assert second.returncode == 0, second.stderr[-3000:]
  match = re.search(r"resumed from \S+: learner step (\d+)", second.stdout)
  assert match, second.stdout[-2000:]
  assert int(match.group(1)) >= result["learner_steps"]
  with open(os.path.join(logdir, "result.json")) as f:
    resumed = json.load(f)
  assert resumed["learner_steps"] >= result["learner_steps"] + 50
  assert resumed["env_steps"] > result["env_steps"]


def test_run_local_prints_no_tensorflow_startup_line(tmp_path):
  # What TensorFlow's libraries write while they load, before absl logging.
  startup = ("oneDNN", "cuda drivers", "absl::InitializeLog", "cpu_feature")
  done = subprocess.run(
    ["bash", "run_local.sh", "classic", "vtrace", "1", "4"]
    + ["--logdir", str(tmp_path / "run"), "--max_learner_steps", "20"],
    cwd=launch.ROOT,
    env=launch.env_without("TF_CPP_MIN_LOG_LEVEL"),
    capture_output=True,
    text=True,
    timeout=240,
  )
  console = done.stdout + done.stderr
  assert done.returncode == 0, console[-3000:]
  assert "[learner" in console  # the learner did print its own lines
  printed = [
    line for line in console.splitlines() if any(s in line for s in startup)
  ]
  assert not printed, printed


def test_ctrl_c_leaves_no_process_behind(tmp_path):
  proc = subprocess.Popen(
    [
      sys.executable,
      "-m",
      "seed_rl.train",
      "classic",
      "vtrace",
      "2",
      "4",
      "--logdir",
      str(tmp_path / "run"),
    ],
    cwd=ROOT,
    env=ENV,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
    start_new_session=True,
  )
  pids, deadline = [], time.monotonic() + 120
  for line in proc.stdout:
    m = re.search(r"started .* \(pid (\d+)\)", line)
    if m:
      pids.append(int(m.group(1)))
    if "[learner" in line and "step" in line:
      break
    assert time.monotonic() < deadline, "learner never reported progress"
  assert len(pids) == 3  # learner + 2 actors
  os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
  proc.communicate(timeout=60)
  time.sleep(0.5)
  assert not [p for p in pids + [proc.pid] if _alive(p)]


@pytest.mark.parametrize(
  "args,expected",
  [
    (["classic", "nosuchagent"], "valid env/agent pairs"),
    (["nosuchenv", "vtrace"], "valid env/agent pairs"),
  ],
)
def test_unknown_env_agent_pair_is_refused(args, expected):
  out = launch.train(args, timeout=60)
  assert out.returncode == 2
  assert expected in out.stderr and "classic vtrace" in out.stderr


def test_bad_gin_binding_is_refused_with_what_is_bindable(tmp_path):
  out = subprocess.run(
    [
      sys.executable,
      "-m",
      "seed_rl.learner_main",
      "--logdir",
      str(tmp_path),
      "--gin_bindings",
      "VtraceConfig.no_such_param = 3",
    ],
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert out.returncode == 2
  assert "no_such_param" in out.stderr
  assert "VtraceConfig" in out.stderr


def _train_with_faulty_env(tmp_path, marker_var, factory, *flags):
  """CartPole V-trace for 150 learner steps with a faulty env factory from
  tests/support/crashing_env.py that misbehaves once (a marker file records it)."""
  marker = tmp_path / "fault"
  env = dict(
    ENV,
    **{marker_var: str(marker)},
    PYTHONPATH=ROOT + os.pathsep + ENV.get("PYTHONPATH", ""),
  )
  out = launch.train(
    [
      "classic",
      "vtrace",
      "2",
      "4",
      "--logdir",
      str(tmp_path / "run"),
      "--max_learner_steps",
      "150",
      "--gin_bindings",
      f"classic.create_environment.env_id = 'tests.support.crashing_env:{factory}'",
      *flags,
    ],
    env=env,
  )
  return out, marker


def test_crashing_environment_costs_only_its_actor(tmp_path):
  """An env raises in one actor: the launcher restarts that actor, the learner
  keeps serving the other one and the run finishes normally."""
  out, marker = _train_with_faulty_env(
    tmp_path, "SEED_RL_TEST_CRASH_MARKER", "make"
  )
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
  assert marker.exists()  # the crash happened
  assert "simulated environment crash" in out.stderr
  assert "restarting it" in out.stderr
  assert re.search(r"restarted actor \d \(pid \d+\)", out.stdout)
  with open(tmp_path / "run" / "result.json") as f:
    assert json.load(f)["learner_steps"] >= 150


@pytest.mark.parametrize(
  "env,agent,bindings,steps",
  [
    # Continuous actions end to end: Box specs in the handshake, float32
    # actions on the wire, clipping on the actor, Gaussian PPO on the learner.
    (
      "mujoco",
      "ppo",
      [
        "mujoco.create_environment.env_id = 'Pendulum-v1'",
        "PPOConfig.unroll_length = 16",
        "PPOConfig.batch_size = 8",
        "PPOConfig.num_minibatches = 2",
      ],
      10,
    ),
    ("classic", "ppo", [], 10),
    ("classic", "vtrace", [], 30),
    ("classic", "dqn", ["DQNConfig.min_replay_size = 200"], 50),
    ("classic", "r2d2", ["R2D2Config.min_replay_size = 16"], 10),
  ],
)
def test_every_agent_runs_end_to_end(tmp_path, env, agent, bindings, steps):
  """Every agent trains through the real system and writes the learning
  diagnostics of docs/METRICS.md to TensorBoard."""
  args = [
    env,
    agent,
    "2",
    "4",
    "--logdir",
    str(tmp_path / "run"),
    "--max_learner_steps",
    str(steps),
    "--gin_bindings",
    "LearnerConfig.log_every_s = 1.0",
  ]
  for b in bindings:
    args += ["--gin_bindings", b]
  out = launch.train(args)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  with open(tmp_path / "run" / "result.json") as f:
    result = json.load(f)
  assert result["learner_steps"] >= steps
  assert os.path.exists(tmp_path / "run" / "checkpoints" / "checkpoint")
  tags = launch.event_tags(tmp_path / "run")
  missing = sorted((COMMON_DIAGNOSTICS | AGENT_DIAGNOSTICS[agent]) - tags)
  assert not missing, f"{agent} wrote no {missing}; it wrote {sorted(tags)}"
  assert not tags & RETIRED_NAMES, sorted(tags & RETIRED_NAMES)
  # The console line shows whether a run moves.
  progress = [s for s in out.stdout.splitlines() if s.startswith("[learner")]
  marker = "q " if agent in ("dqn", "r2d2") else "entropy "
  assert any(marker in s for s in progress), progress[-3:]


# Diagnostics every agent writes (names: docs/METRICS.md).
COMMON_DIAGNOSTICS = {
  "loss/total",
  "grad/norm",
  "grad/norm_torso",
  "grad/norm_head",
  "opt/learning_rate",
  "perf/updates_per_s",
  "perf/samples_per_env_step",
  "perf/policy_lag",
  "perf/env_steps_per_s",
  "system/rss_mib",
  "system/malloc_in_use_mib",
  "system/malloc_free_mib",
  "system/python_blocks",
}
AGENT_DIAGNOSTICS = {
  "vtrace": {
    "loss/policy",
    "loss/value",
    "loss/entropy",
    "policy/entropy",
    "value/explained_variance",
    "advantage/mean",
    "advantage/std",
    "vtrace/rho_mean",
    "vtrace/rho_clipped_fraction",
    "perf/queue_fill",
    "perf/train_data_wait",
  },
  "ppo": {
    "loss/policy",
    "loss/value",
    "loss/entropy",
    "policy/entropy",
    "value/explained_variance",
    "advantage/mean",
    "advantage/std",
    "policy/approx_kl",
    "policy/clip_fraction",
    "perf/queue_fill",
    "perf/train_data_wait",
  },
  "dqn": {
    "loss/td",
    "q/mean",
    "q/td_error",
    "policy/epsilon",
    "replay/importance_sampling_exponent",
  },
  "r2d2": {
    "loss/td",
    "q/mean",
    "q/td_error",
    "replay/importance_sampling_exponent",
  },
}
# Names of the same quantities before the scheme was unified (METRICS.md).
RETIRED_NAMES = {"loss/baseline", "ppo/entropy", "replay/beta"}


def test_eval_actors_log_eval_returns(tmp_path):
  logdir = tmp_path / "run"
  out = launch.train(
    [
      "classic",
      "ppo",
      "2",
      "4",
      "--num_eval_actors",
      "1",
      "--logdir",
      str(logdir),
      "--max_learner_steps",
      "15",
      "--gin_bindings",
      "LearnerConfig.log_every_s = 1.0",
    ]
  )
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  assert len(re.findall(r"started actor \d", out.stdout)) == 3
  tags = launch.event_tags(logdir)
  # That eval envs make no unrolls and no env steps is checked exactly in
  # test_learner_runtime.py; here: the whole path, flags to TensorBoard.
  assert "eval/return" in tags and "episode/return" in tags


def test_typo_in_env_id_fails_once_with_close_matches(tmp_path):
  start = time.monotonic()
  out = launch.train(
    [
      "classic",
      "vtrace",
      "2",
      "4",
      "--logdir",
      str(tmp_path / "run"),
      "--gin_bindings",
      "classic.create_environment.env_id='CartPol-v1'",
    ],
    timeout=60,
  )
  assert out.returncode != 0
  assert time.monotonic() - start < 30
  assert out.stderr.count("unknown gymnasium env id 'CartPol-v1'") == 1
  assert "CartPole-v1" in out.stderr and "Traceback" not in out.stderr
  assert "restart" not in out.stdout + out.stderr


def test_actor_that_cannot_build_its_env_exits_with_a_config_error():
  out = subprocess.run(
    [
      sys.executable,
      "-m",
      "seed_rl.actors.main",
      "--env",
      "classic",
      "--actor_id",
      "0",
      "--gin_bindings",
      "classic.create_environment.env_id='CartPol-v1'",
    ],
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert out.returncode == 4  # the launcher stops instead of restarting
  assert "cannot create the environment" in out.stderr
  assert "Traceback" not in out.stderr


@pytest.mark.parametrize("env_groups", [1, 2])
def test_actors_exit_0_when_the_learner_finishes(tmp_path, env_groups):
  """What lets a Kubernetes Job or Vertex AI job complete: the learner stops
  at --max_seconds and its actors, told so, exit 0 within seconds; with env
  groups, each group's stream is told."""
  port = launch.free_port()
  gin_file = os.path.join(ROOT, "seed_rl", "classic", "gin", "vtrace.gin")
  learner = subprocess.Popen(
    [
      sys.executable,
      "-m",
      "seed_rl.learner_main",
      "--env",
      "classic",
      "--agent",
      "vtrace",
      "--num_actors",
      "2",
      "--envs_per_actor",
      "4",
      "--env_groups",
      str(env_groups),
      "--logdir",
      str(tmp_path / "run"),
      "--server_address",
      f"localhost:{port}",
      "--max_seconds",
      "10",
    ],
    cwd=ROOT,
    env=ENV,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )
  actors = [
    subprocess.Popen(
      [
        sys.executable,
        "-m",
        "seed_rl.actors.main",
        "--env",
        "classic",
        "--actor_id",
        str(i),
        "--num_envs",
        "4",
        "--env_groups",
        str(env_groups),
        "--server_address",
        f"localhost:{port}",
        "--gin_config",
        gin_file,
        "--stats_file",
        str(tmp_path / f"actor{i}.json"),
      ],
      cwd=ROOT,
      env=ENV,
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
    )
    for i in range(2)
  ]
  try:
    learner_out, _ = learner.communicate(timeout=180)
    assert learner.returncode == 0, learner_out[-3000:]
    done = time.monotonic()
    for actor in actors:
      out, _ = actor.communicate(timeout=30)
      assert actor.returncode == 0, out[-3000:]
      assert "the learner finished training" in out
    assert time.monotonic() - done < 30
    # Every env of every actor was stepped: all groups were served.
    with open(tmp_path / "run" / "result.json") as f:
      result = json.load(f)
    assert result["episodes"] > 0, result
    for i in range(2):
      with open(tmp_path / f"actor{i}.json") as f:
        assert json.load(f)["env_steps"] > 0
  finally:
    for p in [learner] + actors:
      if p.poll() is None:
        p.kill()


def test_hanging_environment_is_reported_and_its_actor_restarted(tmp_path):
  out, marker = _train_with_faulty_env(
    tmp_path,
    "SEED_RL_TEST_HANG_MARKER",
    "make_hanging",
    "--env_step_timeout_s",
    "3",
  )
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
  assert marker.exists()  # the hang happened
  assert "an environment step has not returned after 3 s" in out.stderr
  assert re.search(r"restarted actor \d \(pid \d+\)", out.stdout)
