"""A run's logdir as a policy: the env and agent it trained, its newest
checkpoint. Used by `seed_rl.evaluate` and `seed_rl.export`.

The learner writes `<logdir>/run.json` at start (env and agent names, env
counts, seed, gin files and bindings) next to `operative_config.gin` (every
gin value it used). `load_run` rebuilds the agent from the operative config
(a snapshot, immune to later edits of the gin files), restores the newest
readable checkpoint and changes nothing in the logdir, so it is safe while
the run still trains. TensorFlow is imported only by `load_run`.
`tool_parser` and `run_tool` are the command-line side both tools share.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Type

from seed_rl import gin_utils
from seed_rl import registry
from seed_rl.common.specs import ArraySpec

RUN_FILE = "run.json"


def write_run_spec(
  logdir: str,
  env: str,
  agent: str,
  num_train_envs: int,
  num_eval_envs: int,
  seed: int,
  gin_config: Sequence[str],
  gin_bindings: Sequence[str],
) -> str:
  """Writes `<logdir>/run.json` (atomically); returns its path."""
  os.makedirs(logdir, exist_ok=True)
  spec = {
    "env": env,
    "agent": agent,
    "num_train_envs": int(num_train_envs),
    "num_eval_envs": int(num_eval_envs),
    "seed": int(seed),
    "gin_config": [os.path.abspath(p) for p in gin_config],
    "gin_bindings": list(gin_bindings),
  }
  path = os.path.join(logdir, RUN_FILE)
  tmp = os.path.join(logdir, f".{RUN_FILE}.tmp")
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(spec, f, indent=1)
  os.replace(tmp, path)
  return path


def read_run_spec(logdir: str) -> Dict[str, Any]:
  """The logdir's run.json, or {} when it has none (older runs)."""
  path = os.path.join(logdir, RUN_FILE)
  if not os.path.exists(path):
    return {}
  with open(path, encoding="utf-8") as f:
    return json.load(f)


@dataclasses.dataclass
class LoadedRun:
  """An agent with a run's weights, and what is needed to feed it.

  observation_spec: the env's (wire) observation, before frame stacking.
  frame_stack: k, as the learner stacked (LearnerConfig.frame_stack).
  checkpoint: path of the restored checkpoint.
  learner_step / env_steps: the counters saved with it.
  """

  env: str
  agent_name: str
  agent: Any
  env_module: Any
  observation_spec: ArraySpec
  action_spec: ArraySpec
  frame_stack: int
  checkpoint: str
  learner_step: int
  env_steps: int
  spec: Dict[str, Any]


def load_run(
  logdir: str, env: Optional[str] = None, agent: Optional[str] = None
) -> LoadedRun:
  """Builds the run's agent and restores its newest readable checkpoint.

  Args:
    logdir: the run's --logdir.
    env, agent: override (or, for runs without run.json, give) the names.

  Raises:
    ValueError: no run.json and no names given, no checkpoint, or a
      checkpoint that does not fit the agent.
  """
  import tensorflow as tf

  from seed_rl.common import checkpoints
  from seed_rl.common import learner as learner_lib
  from seed_rl.common.env_state import stacked_observation_spec

  env, agent, spec = _run_names(logdir, env, agent)
  directory = os.path.join(logdir, "checkpoints")
  paths = checkpoints.checkpoint_paths(directory)
  if not paths:
    raise ValueError(f"no checkpoint in {directory}")
  env_module, agent_module = _configure(logdir, env, agent, spec)
  config = learner_lib.LearnerConfig()
  probe = env_module.create_environment(num_envs=1, seed=0)
  observation_spec, action_spec = probe.observation_spec, probe.action_spec
  probe.close()
  the_agent = agent_module.create_agent(
    stacked_observation_spec(observation_spec, config.frame_stack),
    action_spec,
    int(spec.get("num_train_envs", 1)),
  )
  env_steps = tf.Variable(0, dtype=tf.int64, trainable=False)
  checkpoint = tf.train.Checkpoint(
    env_steps=env_steps, **the_agent.checkpoint_objects()
  )
  found = checkpoints.restore_newest(checkpoint, paths)
  if found is None:
    raise ValueError(f"no readable checkpoint in {directory}")
  restored, status = found
  try:
    status.assert_existing_objects_matched()
  except AssertionError as e:
    raise ValueError(
      f"checkpoint {restored} does not fit the {agent} agent built from "
      f"{logdir}'s configuration: {str(e).splitlines()[0]}"
    ) from None
  status.expect_partial()  # e.g. the save counter
  return LoadedRun(
    env=env,
    agent_name=agent,
    agent=the_agent,
    env_module=env_module,
    observation_spec=observation_spec,
    action_spec=action_spec,
    frame_stack=config.frame_stack,
    checkpoint=restored,
    learner_step=int(the_agent.step_counter.numpy()),
    env_steps=int(env_steps.numpy()),
    spec=spec,
  )


def _run_names(
  logdir: str, env: Optional[str], agent: Optional[str]
) -> Tuple[str, str, Dict[str, Any]]:
  """(env, agent, run.json) of the run: the names given, else run.json's."""
  if not os.path.isdir(logdir):
    raise ValueError(f"logdir {logdir} does not exist")
  spec = read_run_spec(logdir)
  env = env or spec.get("env")
  agent = agent or spec.get("agent")
  if not env or not agent:
    raise ValueError(
      f"{logdir} has no {RUN_FILE} (learners write it at start; older "
      "runs lack it): pass --env and --agent"
    )
  registry.check_pair(env, agent)
  return env, agent, spec


def _configure(
  logdir: str, env: str, agent: str, spec: Dict[str, Any]
) -> Tuple[Any, Any]:
  """Imports the run's env and agent modules and parses the run's gin
  configuration: operative_config.gin where the learner wrote it, else the
  pair's gin file with run.json's files and bindings.

  Returns:
    (env module, agent module).
  """
  import gin

  gin.clear_config()
  with gin.unlock_config():  # a parse in this process locked it
    env_module = registry.env_module(env)
    agent_module = registry.agent_module(agent)
    for name in registry.learner_gin_modules(env):
      importlib.import_module(name)
  operative = os.path.join(logdir, "operative_config.gin")
  if os.path.exists(operative):
    gin_utils.parse([operative], [])
  else:
    gin_utils.parse(
      [registry.gin_file(env, agent)] + list(spec.get("gin_config", [])),
      spec.get("gin_bindings", []),
    )
  return env_module, agent_module


def tool_parser(prog: str, description: str) -> argparse.ArgumentParser:
  """The parser of a tool that reads a run (seed_rl.evaluate, seed_rl.export):
  --logdir, and --env/--agent for logdirs without run.json."""
  p = argparse.ArgumentParser(
    prog=prog,
    description=description,
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  p.add_argument("--logdir", required=True, help="the run's --logdir")
  p.add_argument("--env", default=None, help="for logdirs without run.json")
  p.add_argument("--agent", default=None, help="for logdirs without run.json")
  return p


def run_tool(
  args: argparse.Namespace,
  use: Callable[[LoadedRun], Dict[str, Any]],
  errors: Tuple[Type[Exception], ...] = (ValueError,),
) -> int:
  """A tool's main: loads the run of `args` (tool_parser's flags), prints
  `use(run)` as one JSON line and returns 0; or prints 'error: ...' for
  `errors` and returns 2."""
  try:
    result = use(load_run(args.logdir, args.env, args.agent))
  except errors as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(json.dumps(result), flush=True)
  return 0
