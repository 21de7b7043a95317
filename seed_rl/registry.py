"""Which environments and agents exist, and which pairs have a gin file.

A pair (env, agent) is valid when `seed_rl/<env>/gin/<agent>.gin` exists.
TensorFlow-free, so actors can use it too.
"""

from __future__ import annotations

import difflib
import importlib
import os
from typing import List, Tuple

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

# env name -> module with a gin-configurable create_environment(num_envs, seed)
ENVS = {
  "classic": "seed_rl.classic.env",
  "atari": "seed_rl.atari.env",
  "mujoco": "seed_rl.mujoco.env",
  "synthetic": "seed_rl.synthetic.env",
}
# agent name -> module with create_agent(observation_spec, action_spec, n)
AGENTS = {
  "vtrace": "seed_rl.agents.vtrace.agent",
  "ppo": "seed_rl.agents.ppo.agent",
  "r2d2": "seed_rl.agents.r2d2.agent",
  "dqn": "seed_rl.agents.dqn.agent",
}
# Modules whose gin configurables a learner-side gin file may bind.
LEARNER_GIN_MODULES = (
  "seed_rl.common.learner",
  "seed_rl.classic.networks",
  "seed_rl.atari.networks",
)


def gin_file(env: str, agent: str) -> str:
  return os.path.join(PACKAGE_DIR, env, "gin", f"{agent}.gin")


def valid_pairs() -> List[Tuple[str, str]]:
  return [
    (e, a) for e in ENVS for a in AGENTS if os.path.exists(gin_file(e, a))
  ]


def _suggest(name: str, options) -> str:
  close = difflib.get_close_matches(name, list(options), n=1)
  return f" (did you mean '{close[0]}'?)" if close else ""


def check_pair(env: str, agent: str) -> None:
  """Raises ValueError naming what is valid unless (env, agent) is known."""
  pairs = ", ".join(f"{e} {a}" for e, a in valid_pairs())
  if env not in ENVS:
    raise ValueError(
      f"unknown environment '{env}'{_suggest(env, ENVS)}; "
      f"valid env/agent pairs: {pairs}"
    )
  if agent not in AGENTS:
    raise ValueError(
      f"unknown agent '{agent}'{_suggest(agent, AGENTS)}; "
      f"valid env/agent pairs: {pairs}"
    )
  if not os.path.exists(gin_file(env, agent)):
    raise ValueError(
      f"no configuration for agent '{agent}' on '{env}' "
      f"({gin_file(env, agent)} does not exist); valid "
      f"env/agent pairs: {pairs}"
    )


def env_module(env: str):
  return importlib.import_module(ENVS[env])


def agent_module(agent: str):
  return importlib.import_module(AGENTS[agent])
