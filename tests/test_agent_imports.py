"""No agent package imports a sibling agent package.

What two agents share lives in a module under seed_rl/agents/ named for
what it is (gae.py, actor_critic.py, continuous.py, exploration.py,
episode_ends.py, rewards.py, learning.py, ...), never in whichever agent had
it first. The check parses every module under seed_rl/agents/<a>/ with
`ast` (no imports run) and reports each import of seed_rl.agents.<b>, b != a:
`import x`, `from x import y`, `from seed_rl.agents import b`, relative
imports (`from ..b import y`) and `importlib.import_module('...')` with a
constant name.
"""

from __future__ import annotations

import ast
import importlib
import os
from typing import Iterator, List, Optional, Sequence, Tuple

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGENTS_DIR = os.path.join(REPO, "seed_rl", "agents")
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
      rel = os.path.relpath(path, REPO)
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


# Names that moved to shared modules stay importable where tests and users
# imported them from: (old module, old name, new module, new name).
MOVED = [
  ("ppo.gae", "gae", "gae", "gae"),
  ("ppo.gae", "unroll_gae", "gae", "unroll_gae"),
  ("ppo.networks", "PPONetwork", "actor_critic", "FeedForwardActorCritic"),
  ("ppo.networks", "build_network", "actor_critic", "build_network"),
  ("ppo.networks", "default_torso", "actor_critic", "default_torso"),
  ("a2c.networks", "PPONetwork", "actor_critic", "FeedForwardActorCritic"),
  ("r2d2.exploration", "per_env_epsilons", "exploration", "per_env_epsilons"),
  ("r2d2.exploration", "env_epsilons", "exploration", "env_epsilons"),
  ("r2d2.exploration", "epsilon_greedy", "exploration", "epsilon_greedy"),
  ("vtrace.loss", "transition_inputs", "episode_ends", "transition_inputs"),
  ("vtrace.loss", "clip_rewards", "rewards", "clip_rewards"),
  ("sac.config", "check_off_policy", "off_policy", "check_off_policy"),
  ("sac.networks", "BoxScaling", "continuous", "BoxScaling"),
  ("sac.networks", "QNetwork", "continuous", "QNetwork"),
  ("sac.networks", "build", "continuous", "build"),
  ("sac.networks", "dense_stack", "continuous", "dense_stack"),
  ("td3.networks", "BoxScaling", "continuous", "BoxScaling"),
  ("td3.networks", "QNetwork", "continuous", "QNetwork"),
  ("td3.networks", "build", "continuous", "build"),
]


@pytest.mark.parametrize("old,old_name,new,new_name", MOVED)
def test_moved_names_stay_importable_from_their_agent(
  old, old_name, new, new_name
):
  moved = getattr(importlib.import_module(f"{AGENTS_PACKAGE}.{new}"), new_name)
  kept = getattr(importlib.import_module(f"{AGENTS_PACKAGE}.{old}"), old_name)
  assert kept is moved
