"""Which environment domains and agents exist; both sides read this one.

A domain is a package with `env.py` (a gin-configurable
`create_environment(num_envs, seed)`) and a `gin/` folder; an agent is a
package with `agent.py` (`create_agent(observation_spec, action_spec,
num_envs)`). The built-in ones have short names below. Any other package
works by its dotted path, with nothing here to edit:

    ./run_local.sh my_pkg.my_domain vtrace          # your domain
    ./run_local.sh classic my_pkg.my_agent          # your agent

The gin file of a pair is `<domain>/gin/<agent>.gin`, else
`<agent>/gin/<domain>.gin` (an agent package may bring its own configs for
existing domains), with the short name (last component) of the other side.
TensorFlow-free: actors and the launcher use it too.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
from typing import List, Optional, Tuple

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

# short name -> domain package (env.py with create_environment, gin/)
ENVS = {
  "classic": "seed_rl.classic",
  "atari": "seed_rl.atari",
  "mujoco": "seed_rl.mujoco",
  "synthetic": "seed_rl.synthetic",
  # Optional: scripts/install_football.sh installs gfootball.
  "football": "seed_rl.football",
}
# short name -> agent package (agent.py with create_agent)
AGENTS = {
  "vtrace": "seed_rl.agents.vtrace",
  "ppo": "seed_rl.agents.ppo",
  "r2d2": "seed_rl.agents.r2d2",
  "dqn": "seed_rl.agents.dqn",
  "sac": "seed_rl.agents.sac",
  "td3": "seed_rl.agents.td3",
  # DDPG is TD3 with twin critics, target smoothing and delay off, set by
  # the <domain>/gin/ddpg.gin files.
  "ddpg": "seed_rl.agents.td3",
  "a2c": "seed_rl.agents.a2c",
  "acer": "seed_rl.agents.acer",
}
# Modules whose gin configurables a learner-side gin file may bind.
LEARNER_GIN_MODULES = (
  "seed_rl.common.learner",
  "seed_rl.networks.mlp",
  "seed_rl.networks.conv",
)


def _package(name: str, table) -> Optional[str]:
  if name in table:
    return table[name]
  return name if "." in name else None


def short_name(name: str) -> str:
  """'classic' -> 'classic'; 'my_pkg.my_domain' -> 'my_domain'."""
  return name.rsplit(".", 1)[-1]


def _package_dir(package: str) -> Optional[str]:
  """The folder of `package` without running its code (None if missing)."""
  try:
    spec = importlib.util.find_spec(package)
  except (ImportError, ValueError):
    return None
  if spec is None or not spec.submodule_search_locations:
    return None
  return list(spec.submodule_search_locations)[0]


def gin_file(env: str, agent: str) -> str:
  """The pair's gin file (see the module docstring); may not exist."""
  env_dir = _package_dir(_package(env, ENVS) or env)
  agent_dir = _package_dir(_package(agent, AGENTS) or agent)
  candidates = []
  if env_dir:
    candidates.append(os.path.join(env_dir, "gin", f"{short_name(agent)}.gin"))
  if agent_dir:
    candidates.append(os.path.join(agent_dir, "gin", f"{short_name(env)}.gin"))
  for path in candidates:
    if os.path.exists(path):
      return path
  return (
    candidates[0]
    if candidates
    else os.path.join(
      PACKAGE_DIR, short_name(env), "gin", f"{short_name(agent)}.gin"
    )
  )


def valid_pairs() -> List[Tuple[str, str]]:
  """The built-in pairs that have a gin file."""
  return [
    (e, a) for e in ENVS for a in AGENTS if os.path.exists(gin_file(e, a))
  ]


def _suggest(name: str, options) -> str:
  close = difflib.get_close_matches(name, list(options), n=1)
  return f" (did you mean '{close[0]}'?)" if close else ""


def _check_package(name: str, table, kind: str, module: str) -> None:
  pairs = ", ".join(f"{e} {a}" for e, a in valid_pairs())
  package = _package(name, table)
  if package is None:
    raise ValueError(
      f"unknown {kind} '{name}'{_suggest(name, table)}; valid env/agent "
      f"pairs: {pairs}; or give your own {kind} package by its dotted path"
    )
  if _package_dir(package) is None:
    raise ValueError(
      f"{kind} package '{package}' cannot be found (is it on PYTHONPATH?); "
      f"valid env/agent pairs: {pairs}"
    )
  if not os.path.exists(
    os.path.join(_package_dir(package) or "", f"{module}.py")
  ):
    raise ValueError(f"{kind} package '{package}' has no {module}.py")


def check_pair(env: str, agent: str) -> None:
  """Raises ValueError naming what is valid unless (env, agent) is usable."""
  _check_package(env, ENVS, "environment", "env")
  _check_package(agent, AGENTS, "agent", "agent")
  path = gin_file(env, agent)
  if not os.path.exists(path):
    pairs = ", ".join(f"{e} {a}" for e, a in valid_pairs())
    raise ValueError(
      f"no configuration for agent '{agent}' on '{env}' ({path} does not "
      f"exist); valid env/agent pairs: {pairs}"
    )


def check_env(env: str) -> None:
  """Raises ValueError unless `env` names a domain package (actors)."""
  _check_package(env, ENVS, "environment", "env")


def env_module(env: str):
  """The domain's env module (imports it; TensorFlow-free for built-ins)."""
  return importlib.import_module(f"{_package(env, ENVS) or env}.env")


def _domain_module(env: str, module: str) -> Optional[str]:
  """`<domain package>.<module>` if the domain has it (found without
  running it), else None."""
  name = f"{_package(env, ENVS) or env}.{module}"
  try:
    return name if importlib.util.find_spec(name) is not None else None
  except (ImportError, ValueError):
    return None


def networks_module(env: str) -> Optional[str]:
  """The name of the domain's `networks` module if it has one (found
  without running it): the learner imports it before parsing gin, so a
  plugin domain's own torsos are gin-configurable there; actors never
  import it (it may import TensorFlow)."""
  return _domain_module(env, "networks")


def evaluation_module(env: str) -> Optional[str]:
  """The name of the domain's `evaluation` module if it has one (found
  without running it): its evaluation protocol for `seed_rl.evaluate`
  (see seed_rl.common.evaluation)."""
  return _domain_module(env, "evaluation")


def learner_gin_modules(env: str) -> List[str]:
  """What a process that builds agents imports before parsing gin:
  LEARNER_GIN_MODULES and the domain's networks module, if any."""
  networks = networks_module(env)
  return list(LEARNER_GIN_MODULES) + ([networks] if networks else [])


def agent_module(agent: str):
  return importlib.import_module(f"{_package(agent, AGENTS) or agent}.agent")
