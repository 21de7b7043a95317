"""seed_rl.export: the SavedModel reproduces the learner's greedy actions.

Each case builds an agent as the learner does (gin file of the pair,
LearnerConfig, specs from the env factory), saves a checkpoint, the
operative config and run.json into a logdir as the learner does, exports
that logdir, and records the learner-side greedy actions (the runtime's
EnvStateTable stacking frames and carrying recurrent state, then
`agent.act` with eval_mask) on a sequence of observations that starts
episodes at t=0 and again mid-sequence. A fresh Python process that
imports only TensorFlow and NumPy then runs the SavedModel's `policy`
signature on the raw (unstacked) observations and must give the same
actions.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from seed_rl import export as export_lib  # noqa: E402
from seed_rl import gin_utils  # noqa: E402
from seed_rl import registry  # noqa: E402
from seed_rl.common import learner as learner_lib  # noqa: E402
from seed_rl.common import saved_run  # noqa: E402
from seed_rl.common.agent_api import ActInputs  # noqa: E402
from seed_rl.common.checkpoints import Checkpointer  # noqa: E402
from seed_rl.common.env_state import EnvStateTable  # noqa: E402
from seed_rl.common.env_state import stacked_observation_spec  # noqa: E402

T, B = 12, 2
# Episode starts: every env at t=0, env 0 again at t=5, env 1 at t=8.
FIRST = np.zeros((T, B), bool)
FIRST[0] = True
FIRST[5, 0] = FIRST[8, 1] = True

CASES = {
  # CartPole, 2x64 MLP.
  "cartpole_vtrace": ("classic", "vtrace", []),
  # CartPole, recurrent: LSTM state, previous action and reward as inputs.
  "cartpole_r2d2": (
    "classic",
    "r2d2",
    ["R2D2Config.lstm_units = 16", "R2D2Config.eval_epsilon = 0.0"],
  ),
  "cartpole_dqn": ("classic", "dqn", []),
  # Continuous (tanh-squashed Gaussian mean) with observation normalisation.
  "pendulum_ppo": (
    "mujoco",
    "ppo",
    ["mujoco.create_environment.env_id = 'Pendulum-v1'"],
  ),
  # Pong frames, Nature conv torso, 4 frames stacked on the learner.
  "atari_vtrace": ("atari", "vtrace", []),
}

# Runs in a fresh interpreter: TensorFlow and NumPy only, no seed_rl.
LOADER = r"""
import json, sys
import numpy as np
import tensorflow as tf
assert not any(m.startswith("seed_rl") for m in sys.modules)
results = {}
for name, model_dir, data in json.loads(sys.argv[1]):
  d = np.load(data)
  loaded = tf.saved_model.load(model_dir)
  policy = loaded.signatures["policy"]
  if "initial_state" in loaded.signatures:
    state = loaded.signatures["initial_state"](
      batch_size=tf.constant(d["first"].shape[1]))
  else:
    state = {}
  actions = []
  for t in range(d["first"].shape[0]):
    out = policy(observation=tf.constant(d["observation"][t]),
                 first=tf.constant(d["first"][t]),
                 reward=tf.constant(d["reward"][t]), **state)
    actions.append(out.pop("action").numpy().tolist())
    state = out
  results[name] = actions
assert not any(m.startswith("seed_rl") for m in sys.modules)
print("RESULT " + json.dumps(results))
"""


def _observations(spec, rng):
  if spec.dtype == np.uint8:
    return rng.integers(0, 256, (T, B) + spec.shape, dtype=np.uint8)
  return rng.normal(0.0, 1.0, (T, B) + spec.shape).astype(spec.dtype)


def _make_logdir(logdir, env, agent_name, bindings, rng):
  """Agent, checkpoint, operative config and run.json as learner_main."""
  import gin  # pylint: disable=g-import-not-at-top
  import importlib  # pylint: disable=g-import-not-at-top

  gin.clear_config()
  with gin.unlock_config():
    env_module = registry.env_module(env)
    agent_module = registry.agent_module(agent_name)
    for name in registry.LEARNER_GIN_MODULES:
      importlib.import_module(name)
  gin_utils.parse([registry.gin_file(env, agent_name)], bindings)
  config = learner_lib.LearnerConfig()
  probe = env_module.create_environment(num_envs=1, seed=0)
  obs_spec, action_spec = probe.observation_spec, probe.action_spec
  probe.close()
  agent = agent_module.create_agent(
    stacked_observation_spec(obs_spec, config.frame_stack), action_spec, 4
  )
  if getattr(agent, "observation_normalizer", None) is not None:
    # Statistics far from (0, 1), so a missing normalisation shows.
    agent.observation_normalizer.update(
      rng.normal(3.0, 2.0, (64,) + obs_spec.shape)
    )
  checkpointer = Checkpointer(
    os.path.join(logdir, "checkpoints"), agent.checkpoint_objects()
  )
  checkpointer.save(env_steps=1234)
  gin_utils.write_operative_config(logdir)
  saved_run.write_run_spec(logdir, env, agent_name, 4, 0, 0, [], list(bindings))
  gin.clear_config()
  return agent, obs_spec, action_spec, config.frame_stack


def _learner_actions(agent, obs_spec, action_spec, frame_stack, data):
  """Greedy actions as the learner runtime computes them."""
  state = EnvStateTable(
    B, obs_spec, action_spec, agent.initial_core_state, frame_stack
  )
  ids = np.arange(B)
  actions = []
  for t in range(T):
    state.reset(ids[data["first"][t]])
    core, prev_action = state.gather(ids)
    out = agent.act(
      ActInputs(
        env_ids=ids.astype(np.int32),
        observation=state.stacked(ids, data["observation"][t]),
        prev_action=prev_action,
        reward=data["reward"][t],
        done=data["first"][t],
        core_state=core,
        eval_mask=np.ones(B, bool),
      )
    )
    action = np.asarray(out.action, action_spec.dtype)
    state.scatter(ids, tuple(out.core_state), action)
    actions.append(action)
  return np.stack(actions)


def test_saved_model_reproduces_greedy_actions_in_a_fresh_process(tmp_path):
  rng = np.random.default_rng(0)
  jobs, expected = [], {}
  for name, (env, agent_name, bindings) in CASES.items():
    logdir = str(tmp_path / name)
    agent, obs_spec, action_spec, k = _make_logdir(
      logdir, env, agent_name, bindings, rng
    )
    data = {
      "observation": _observations(obs_spec, rng),
      "first": FIRST,
      "reward": rng.normal(0, 1, (T, B)).astype(np.float32),
    }
    expected[name] = _learner_actions(agent, obs_spec, action_spec, k, data)
    if action_spec.is_discrete and name != "cartpole_r2d2":
      # The comparison means something only if actions vary.
      assert len(np.unique(expected[name])) > 1, name
    out_dir = str(tmp_path / f"{name}_export")
    description = export_lib.export(saved_run.load_run(logdir), out_dir)
    assert description["env_steps"] == 1234
    assert description["frame_stack"] == k
    with open(os.path.join(out_dir, "seed_rl_export.json")) as f:
      assert json.load(f)["agent"] == agent_name
    path = str(tmp_path / f"{name}.npz")
    np.savez(path, **data)
    jobs.append((name, out_dir, path))
  # The recurrent and stacked cases carry state through the signature.
  proc = subprocess.run(
    [sys.executable, "-c", LOADER, json.dumps(jobs)],
    capture_output=True,
    text=True,
    timeout=240,
    env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  line = [s for s in proc.stdout.splitlines() if s.startswith("RESULT ")][-1]
  results = json.loads(line[len("RESULT ") :])
  for name, want in expected.items():
    got = np.asarray(results[name], want.dtype)
    if want.dtype.kind == "f":
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)
    else:
      np.testing.assert_array_equal(got, want, err_msg=name)


def test_unsupported_agent_is_refused(tmp_path):
  rng = np.random.default_rng(1)
  logdir = str(tmp_path / "sac")
  _make_logdir(logdir, "classic", "sac", [], rng)
  with pytest.raises(ValueError, match="supports the agents vtrace, ppo"):
    export_lib.export(saved_run.load_run(logdir), str(tmp_path / "out"))
