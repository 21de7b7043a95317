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
actions. Every built-in agent has a case; the selected cases share one
fresh process (`reproduced`).
"""

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

from seed_rl import export as export_lib  # noqa: E402
from seed_rl import gin_utils  # noqa: E402
from seed_rl import registry  # noqa: E402
from seed_rl.common import learner as learner_lib  # noqa: E402
from seed_rl.common import saved_run  # noqa: E402
from seed_rl.common import agent_api  # noqa: E402
from seed_rl.common.agent_api import ActInputs  # noqa: E402
from seed_rl.common.checkpoints import Checkpointer  # noqa: E402
from seed_rl.common.env_state import EnvStateTable  # noqa: E402
from seed_rl.common.env_state import stacked_observation_spec  # noqa: E402
from seed_rl.common.specs import ArraySpec  # noqa: E402

T, B = 12, 2
# Episode starts: every env at t=0, env 0 again at t=5, env 1 at t=8.
FIRST = np.zeros((T, B), bool)
FIRST[0] = True
FIRST[5, 0] = FIRST[8, 1] = True

PENDULUM = ["classic.create_environment.env_id = 'Pendulum-v1'"]
# name -> (env, agent, gin bindings): every built-in agent, small networks
# (the classic gin files' 2x64 MLPs unless said).
CASES = {
  "cartpole_vtrace": ("classic", "vtrace", []),
  # Recurrent: LSTM state, previous action and reward as inputs.
  "cartpole_r2d2": (
    "classic",
    "r2d2",
    ["R2D2Config.lstm_units = 16", "R2D2Config.eval_epsilon = 0.0"],
  ),
  "cartpole_dqn": ("classic", "dqn", []),
  "cartpole_a2c": ("classic", "a2c", []),
  "cartpole_acer": ("classic", "acer", []),
  # Continuous (tanh-squashed Gaussian mean) with observation normalisation.
  "pendulum_ppo": (
    "mujoco",
    "ppo",
    ["mujoco.create_environment.env_id = 'Pendulum-v1'"],
  ),
  # Continuous, the Gaussian mean clipped into the Box.
  "pendulum_a2c": ("classic", "a2c", PENDULUM),
  # The tanh of the mean, scaled to the Box.
  "pendulum_sac": ("classic", "sac", []),
  # The deterministic actor, scaled to the Box (DDPG: one critic).
  "pendulum_td3": ("classic", "td3", []),
  "pendulum_ddpg": ("classic", "ddpg", []),
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
  import gin
  import importlib

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


def _selected_cases(request):
  """The CASES the session runs (-k or node ids may select a few)."""
  selected = set()
  for item in request.session.items:
    callspec = getattr(item, "callspec", None)
    if getattr(item, "module", None) is request.module and callspec:
      selected.add(callspec.params.get("case"))
  return [name for name in CASES if name in selected] or list(CASES)


def _export_case(name, tmp_path, rng):
  """Logdir, learner-side greedy actions and export of one case."""
  env, agent_name, bindings = CASES[name]
  logdir = str(tmp_path / name)
  agent, obs_spec, action_spec, k = _make_logdir(
    logdir, env, agent_name, bindings, rng
  )
  data = {
    "observation": _observations(obs_spec, rng),
    "first": FIRST,
    "reward": rng.normal(0, 1, (T, B)).astype(np.float32),
  }
  want = _learner_actions(agent, obs_spec, action_spec, k, data)
  out_dir = str(tmp_path / f"{name}_export")
  description = export_lib.export(saved_run.load_run(logdir), out_dir)
  with open(os.path.join(out_dir, "seed_rl_export.json")) as f:
    written = json.load(f)
  path = str(tmp_path / f"{name}.npz")
  np.savez(path, **data)
  case = {"want": want, "description": description, "written": written}
  case["k"], case["agent"] = k, agent_name
  return case, (name, out_dir, path)


@pytest.fixture(scope="module")
def reproduced(request, tmp_path_factory):
  """name -> the case's learner-side greedy actions ("want"), export
  descriptions and the actions a fresh process without seed_rl got from
  the SavedModel ("got"), for the selected cases (one process for all)."""
  tmp_path = tmp_path_factory.mktemp("export")
  keras.utils.set_random_seed(0)  # module scope: before conftest's seeding
  rng = np.random.default_rng(0)
  cases, jobs = {}, []
  try:
    for name in _selected_cases(request):
      cases[name], job = _export_case(name, tmp_path, rng)
      jobs.append(job)
  finally:
    # load_run parses each run's gin config: later test modules must not
    # build networks under the last case's bindings (e.g. Atari's
    # `atari_torso.compute_dtype = 'auto'`, bfloat16 on this CPU).
    import gin

    gin.clear_config()
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
  for name, got in json.loads(line[len("RESULT ") :]).items():
    cases[name]["got"] = got
  return cases


# The first selected case builds and exports all of them.
@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", list(CASES))
def test_saved_model_reproduces_greedy_actions_in_a_fresh_process(
  case, reproduced
):
  result = reproduced[case]
  want = result["want"]
  assert result["description"]["env_steps"] == 1234
  assert result["description"]["frame_stack"] == result["k"]
  assert result["written"]["agent"] == result["agent"]
  # The comparison means something only if actions vary.
  if want.dtype.kind == "f":
    assert np.std(want) > 0, case
  elif case != "cartpole_r2d2":
    assert len(np.unique(want)) > 1, case
  got = np.asarray(result["got"], want.dtype)
  if want.dtype.kind == "f":
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=case)
  else:
    np.testing.assert_array_equal(got, want, err_msg=case)


def test_every_builtin_agent_has_a_case():
  assert {agent for _, agent, _ in CASES.values()} == set(registry.AGENTS)


class _NoGreedyPolicy(agent_api.Agent):
  """An agent that trains but has no greedy_policy."""

  unroll_length = 1

  @property
  def step_counter(self):
    return None

  def act(self, inputs):
    raise NotImplementedError

  def add_unrolls(self, unrolls):
    raise NotImplementedError

  def train_step(self):
    return {}

  def checkpoint_objects(self):
    return {}


_SPEC = ArraySpec((4,), "float32")


@pytest.mark.parametrize("agent", [_NoGreedyPolicy(_SPEC, _SPEC, 1), object()])
def test_agent_without_greedy_policy_is_refused(agent, tmp_path):
  run = types.SimpleNamespace(agent=agent)
  with pytest.raises(ValueError, match=r"does not implement greedy_policy"):
    export_lib.export(run, str(tmp_path / "out"))
