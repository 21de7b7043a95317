"""The agents' import rules: no agent package imports a sibling agent
package, no module of seed_rl/agents/ imports an environment domain, and
every agent package exports the same three names.

What two agents share lives in a module under seed_rl/agents/ named for
what it is (gae.py, actor_critic.py, continuous.py, exploration.py,
episode_ends.py, rewards.py, learning.py, ...), never in whichever agent had
it first. The check parses every module under seed_rl/agents/<a>/ with
`ast` (no imports run) and reports each import of seed_rl.agents.<b>, b != a:
`import x`, `from x import y`, `from seed_rl.agents import b`, relative
imports (`from ..b import y`) and `importlib.import_module('...')` with a
constant name. The domain check parses every module under seed_rl/agents/
(shared ones too) the same way and reports each import of seed_rl.atari,
seed_rl.classic, seed_rl.mujoco, seed_rl.football (and any other domain in
seed_rl/registry.py's ENVS): torsos come from seed_rl.networks.
"""

from __future__ import annotations

from tests.support import ROOT
import ast
import importlib
import os
from typing import Iterator, List, Optional, Sequence, Tuple

import pytest

AGENTS_DIR = os.path.join(ROOT, "seed_rl", "agents")
AGENTS_PACKAGE = "seed_rl.agents"


def agent_packages(agents_dir: str = AGENTS_DIR) -> List[str]:
  """The agent packages: folders of seed_rl/agents/ with an __init__.py."""
  return sorted(
    name
    for name in os.listdir(agents_dir)
    if os.path.isfile(os.path.join(agents_dir, name, "__init__.py"))
  )


def _module_files(package_dir: str) -> Iterator[str]:
  for root, dirs, files in os.walk(package_dir):
    dirs[:] = sorted(d for d in dirs if d != "__pycache__")
    for name in sorted(files):
      if name.endswith(".py"):
        yield os.path.join(root, name)


def _package_of(path: str, agents_dir: str) -> List[str]:
  """Dotted parts of the package holding `path` (seed_rl.agents.<a>[...])."""
  rel = os.path.relpath(os.path.dirname(path), agents_dir)
  return AGENTS_PACKAGE.split(".") + rel.split(os.sep)


def _resolve(package: List[str], level: int, module: Optional[str]) -> str:
  """The absolute name of `from <level dots><module> import ...`."""
  base = package[: len(package) - (level - 1)] if level else []
  return ".".join(base + ([module] if module else []))


def _imported_names(
  tree: ast.AST, package: List[str]
) -> Iterator[Tuple[int, str]]:
  """(line, absolute module name) of every import in `tree`; for
  `from P import n` both P and P.n (n may be a submodule)."""
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield node.lineno, alias.name
    elif isinstance(node, ast.ImportFrom):
      parent = _resolve(package, node.level, node.module)
      yield node.lineno, parent
      for alias in node.names:
        yield node.lineno, f"{parent}.{alias.name}"
    elif (
      isinstance(node, ast.Call)
      and node.args
      and isinstance(node.args[0], ast.Constant)
      and isinstance(node.args[0].value, str)
      and (
        (
          isinstance(node.func, ast.Attribute)
          and node.func.attr == "import_module"
        )
        or (isinstance(node.func, ast.Name) and node.func.id == "import_module")
      )
    ):
      yield node.lineno, node.args[0].value


def sibling_imports(
  source: str, path: str, agents: Sequence[str], agents_dir: str = AGENTS_DIR
) -> List[str]:
  """'path:line imports module' for each sibling-agent import in `source`
  (a module of seed_rl/agents/<a>/ at `path`)."""
  package = _package_of(path, agents_dir)
  own = package[2]
  found = []
  seen = set()
  for line, name in _imported_names(ast.parse(source, path), package):
    parts = name.split(".")
    if (
      parts[:2] == AGENTS_PACKAGE.split(".")
      and len(parts) > 2
      and parts[2] in agents
      and parts[2] != own
      and (line, parts[2]) not in seen
    ):
      seen.add((line, parts[2]))
      rel = os.path.relpath(path, ROOT)
      found.append(f"{rel}:{line} imports {name}")
  return found


def test_no_agent_imports_a_sibling_agent():
  agents = agent_packages()
  assert {"a2c", "acer", "dqn", "ppo", "r2d2", "sac", "td3", "vtrace"} <= set(
    agents
  )
  found = []
  for agent in agents:
    for path in _module_files(os.path.join(AGENTS_DIR, agent)):
      with open(path, encoding="utf-8") as f:
        found += sibling_imports(f.read(), path, agents)
  assert not found, (
    "agent packages import sibling agents (move what they share to a "
    "module of seed_rl/agents/ named for what it is):\n" + "\n".join(found)
  )


@pytest.mark.parametrize(
  "source,line,expected",
  [
    ("import seed_rl.agents.ppo.gae\n", 1, "seed_rl.agents.ppo.gae"),
    ("import seed_rl.agents.ppo as p\n", 1, "seed_rl.agents.ppo"),
    ("from seed_rl.agents.ppo import gae\n", 1, "seed_rl.agents.ppo"),
    ("from seed_rl.agents.ppo.gae import gae\n", 1, "seed_rl.agents.ppo.gae"),
    ("from seed_rl.agents import ppo\n", 1, "seed_rl.agents.ppo"),
    ("from .. import ppo\n", 1, "seed_rl.agents.ppo"),
    ("from ..ppo import gae\n", 1, "seed_rl.agents.ppo"),
    ("from ..ppo.networks import X\n", 1, "seed_rl.agents.ppo.networks"),
    (
      "def f():\n  from seed_rl.agents.ppo import gae\n",
      2,
      "seed_rl.agents.ppo",
    ),
    (
      "import importlib\nimportlib.import_module('seed_rl.agents.ppo.gae')\n",
      2,
      "seed_rl.agents.ppo.gae",
    ),
  ],
)
def test_the_check_sees_every_import_form(source, line, expected):
  path = os.path.join(AGENTS_DIR, "a2c", "loss.py")
  assert sibling_imports(source, path, ["a2c", "ppo"]) == [
    f"seed_rl/agents/a2c/loss.py:{line} imports {expected}"
  ]


@pytest.mark.parametrize(
  "source",
  [
    "from seed_rl.agents import gae, learning\n",
    "from seed_rl.agents.a2c import networks\n",
    "from . import networks\n",
    "from .networks import make_network\n",
    "from .. import rewards\n",
    "from ..continuous import QNetwork\n",
    "import seed_rl.common.agent_api\n",
    "from seed_rl.agents.a2c.config import A2CConfig\n",
  ],
)
def test_own_package_and_shared_modules_are_allowed(source):
  path = os.path.join(AGENTS_DIR, "a2c", "agent.py")
  assert sibling_imports(source, path, ["a2c", "ppo"]) == []


def test_a_subpackage_resolves_relative_imports_from_its_own_folder():
  path = os.path.join(AGENTS_DIR, "a2c", "sub", "m.py")
  agents = ["a2c", "ppo"]
  assert sibling_imports("from .. import networks\n", path, agents) == []
  assert sibling_imports("from ...ppo import gae\n", path, agents) == [
    "seed_rl/agents/a2c/sub/m.py:1 imports seed_rl.agents.ppo"
  ]


DOMAINS = (
  "seed_rl.atari",
  "seed_rl.classic",
  "seed_rl.mujoco",
  "seed_rl.football",
)


def _package_parts(path: str) -> List[str]:
  """Dotted parts of the package holding the module at `path`."""
  return os.path.relpath(os.path.dirname(path), ROOT).split(os.sep)


def domain_imports(
  source: str, path: str, domains: Sequence[str] = DOMAINS
) -> List[str]:
  """'path:line imports module' for each import in `source` (a module of
  seed_rl/agents/ at `path`) of an environment domain in `domains`."""
  found = []
  seen = set()
  for line, name in _imported_names(
    ast.parse(source, path), _package_parts(path)
  ):
    parts = name.split(".")
    for domain in domains:
      if parts[: len(domain.split("."))] == domain.split(".") and (
        (line, domain) not in seen
      ):
        seen.add((line, domain))
        found.append(f"{os.path.relpath(path, ROOT)}:{line} imports {name}")
  return found


def test_no_agent_module_imports_a_domain():
  """Agents are built from specs, never from an environment's package:
  torsos come from seed_rl.networks, shared math from seed_rl/agents/."""
  from seed_rl import registry

  domains = sorted(set(DOMAINS) | set(registry.ENVS.values()))
  found = []
  for path in _module_files(AGENTS_DIR):
    with open(path, encoding="utf-8") as f:
      found += domain_imports(f.read(), path, domains)
  assert not found, (
    "modules of seed_rl/agents/ import environment domains:\n"
    + "\n".join(found)
  )


@pytest.mark.parametrize(
  "source,relpath,line,expected",
  [
    (
      "import seed_rl.atari.networks\n",
      "a2c/loss.py",
      1,
      "seed_rl.atari.networks",
    ),
    ("import seed_rl.classic as c\n", "gae.py", 1, "seed_rl.classic"),
    (
      "from seed_rl.classic.networks import mlp_torso\n",
      "dqn/config.py",
      1,
      "seed_rl.classic.networks",
    ),
    ("from seed_rl import mujoco\n", "gae.py", 1, "seed_rl.mujoco"),
    ("from .. import football\n", "gae.py", 1, "seed_rl.football"),
    ("from ..atari import env\n", "rewards.py", 1, "seed_rl.atari"),
    ("from ...classic import networks\n", "a2c/loss.py", 1, "seed_rl.classic"),
    (
      "from ...atari.networks import t\n",
      "a2c/loss.py",
      1,
      "seed_rl.atari.networks",
    ),
    (
      "def f():\n  from seed_rl.mujoco import env\n",
      "sac/agent.py",
      2,
      "seed_rl.mujoco",
    ),
    (
      "import importlib\nimportlib.import_module('seed_rl.football.env')\n",
      "ppo/agent.py",
      2,
      "seed_rl.football.env",
    ),
    (
      "from importlib import import_module\nimport_module('seed_rl.atari')\n",
      "exploration.py",
      2,
      "seed_rl.atari",
    ),
  ],
)
def test_the_domain_check_sees_every_import_form(
  source, relpath, line, expected
):
  path = os.path.join(AGENTS_DIR, *relpath.split("/"))
  assert domain_imports(source, path) == [
    f"seed_rl/agents/{relpath}:{line} imports {expected}"
  ]


@pytest.mark.parametrize(
  "source",
  [
    "from seed_rl.networks import atari_torso, mlp_torso\n",
    "import seed_rl.networks.conv\n",
    "from seed_rl.common import specs\n",
    "from seed_rl import registry\n",
    "from . import networks\n",
    "from .. import rewards\n",
    "import seed_rl.atarix\n",
    "importlib.import_module(name)\n",
  ],
)
def test_the_domain_check_allows_torsos_runtime_and_shared_modules(source):
  path = os.path.join(AGENTS_DIR, "a2c", "agent.py")
  assert domain_imports(source, path) == []


def _agent_package_names() -> List[str]:
  from seed_rl import registry

  return sorted(set(registry.AGENTS.values()))


@pytest.mark.parametrize("package", _agent_package_names())
def test_agent_package_exports_its_agent_config_and_create_agent(package):
  module = importlib.import_module(package)
  exported = getattr(module, "__all__", None)
  assert exported is not None, f"{package} has no __all__"
  agents = [n for n in exported if n.endswith("Agent")]
  configs = [n for n in exported if n.endswith("Config")]
  assert len(agents) == 1 and len(configs) == 1, (
    f"{package}.__all__ = {exported}: one *Agent and one *Config expected"
  )
  assert sorted(exported) == sorted(agents + configs + ["create_agent"]), (
    f"{package}.__all__ = {exported}: exactly <X>Agent, <X>Config and "
    "create_agent expected"
  )
  prefix = agents[0][: -len("Agent")]
  assert configs[0] == f"{prefix}Config", exported
  agent_module = importlib.import_module(f"{package}.agent")
  config_module = importlib.import_module(f"{package}.config")
  agent_cls, config_cls = (
    getattr(module, agents[0]),
    getattr(module, configs[0]),
  )
  assert isinstance(agent_cls, type) and isinstance(config_cls, type)
  assert agent_cls is getattr(agent_module, agents[0])
  assert config_cls is getattr(config_module, configs[0])
  assert agent_cls.__module__ == agent_module.__name__
  assert config_cls.__module__ == config_module.__name__
  assert module.create_agent is agent_module.create_agent
  assert module.create_agent.__module__ == agent_module.__name__


def test_registry_lists_every_agent_package():
  listed = {p.rsplit(".", 1)[-1] for p in _agent_package_names()}
  assert listed == set(agent_packages())
