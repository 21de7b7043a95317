"""A domain's evaluation protocol: what `python -m seed_rl.evaluate` lets a
domain decide about the episodes it scores.

A domain package may have a module `evaluation.py` (found without running
it, as its `networks.py` is: `registry.evaluation_module`) whose
`EVALUATION_PROTOCOL` is an instance of a subclass of `EvaluationProtocol`.
The tool then

1. adds the protocol's flags to its command line (`add_flags`): a built-in
   domain's (`registry.ENVS`) for every run, so that `--help` lists them;
   a plugin domain's once the logdir's run.json (or `--env`) names the
   domain. The names must differ from the tool's and the built-in
   protocols' flags (argparse refuses a second `--protocol`);
2. checks them before the run loads (`check`), and refuses the flags of
   another domain's protocol given for this run (`check_flags`);
3. builds the envs that play the episodes with `env_overrides(args)`:
   keyword arguments of the domain's `create_environment`, which win over
   the run's gin bindings;
4. adds `extra_fields(args, env, mean_return)` to its JSON line.

A domain without one is evaluated as the run trained (its own settings, no
extra flags or fields): the defaults of `EvaluationProtocol`, `PLAIN`.
seed_rl/atari/evaluation.py is the built-in example (`--protocol
noop30|sticky`, human-normalised scores), tests/plugins/toy_domain/evaluation.py a
plugin's. TensorFlow-free: the tool reads its command line before it
loads TensorFlow.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any, Dict, List, Optional, Tuple

from seed_rl import registry

ATTRIBUTE = "EVALUATION_PROTOCOL"  # what a domain's evaluation.py defines
DEFAULT_FPS = 30.0  # video frame rate of envs without a natural one


class EvaluationProtocol:
  """How a domain's runs are evaluated; this base class is the plain
  behaviour, and a domain overrides what it needs.

  Attributes:
    name: the domain as messages name it ('Atari').
    flags: the dests of the flags `add_flags` adds ('protocol', ...); a
      flag given with a value other than its default is refused for other
      domains' runs.
    render_scale: how much rendered video frames are upscaled.
  """

  name: str = "plain"
  flags: Tuple[str, ...] = ()
  render_scale: int = 1

  def add_flags(self, parser: argparse.ArgumentParser) -> None:
    """Adds the protocol's flags to the tool's parser."""

  def check(self, args: argparse.Namespace) -> None:
    """Raises ValueError naming what is wrong with the protocol's flags
    in `args` and what is allowed (before the run loads)."""

  def env_overrides(self, args: argparse.Namespace) -> Dict[str, Any]:
    """Keyword arguments of the domain's `create_environment` for the envs
    that play the episodes ({}: the run's own settings). `args` holds
    every flag of the command line (--video, --video_source, ... too)."""
    return {}

  def extra_fields(
    self, args: argparse.Namespace, env, mean_return: float
  ) -> Dict[str, Any]:
    """Fields the JSON line adds, given the `BatchedEnv` that played the
    episodes and their mean return."""
    return {}

  def video_fps(self, env) -> float:
    """The video's frame rate when --fps is not given."""
    return DEFAULT_FPS


PLAIN = EvaluationProtocol()


def domain_protocol(env: str) -> EvaluationProtocol:
  """The evaluation protocol of domain `env` (a short name or a dotted
  path): its `evaluation` module's EVALUATION_PROTOCOL, else PLAIN.

  Raises:
    ValueError: the domain's evaluation module defines none.
  """
  name = registry.evaluation_module(env)
  if name is None:
    return PLAIN
  protocol = getattr(importlib.import_module(name), ATTRIBUTE, None)
  if not isinstance(protocol, EvaluationProtocol):
    raise ValueError(
      f"{name} has no {ATTRIBUTE} (an instance of "
      "seed_rl.common.evaluation.EvaluationProtocol)"
    )
  return protocol


def builtin_protocols() -> List[EvaluationProtocol]:
  """The evaluation protocols of the built-in domains (registry.ENVS)."""
  found: List[EvaluationProtocol] = []
  for env in registry.ENVS:
    protocol = domain_protocol(env)
    if protocol is not PLAIN and protocol not in found:
      found.append(protocol)
  return found


def _listing(names: List[str]) -> str:
  """'a', 'a and b', 'a, b and c'."""
  return " and ".join(filter(None, [", ".join(names[:-1]), names[-1]]))


def check_flags(
  parser: argparse.ArgumentParser,
  args: argparse.Namespace,
  protocols: List[EvaluationProtocol],
  env: Optional[str],
) -> None:
  """Runs the `check` of every protocol whose flags `parser` has and, for
  a run of domain `env` (None: not known yet), refuses the flags of the
  others that were given (a value other than the default).

  Raises:
    ValueError: a bad value, or another domain's flag.
  """
  own = domain_protocol(env) if env else None
  for protocol in protocols:
    protocol.check(args)
    if env is None or protocol is own:
      continue
    if any(getattr(args, f) != parser.get_default(f) for f in protocol.flags):
      names = _listing([f"--{f}" for f in protocol.flags])
      raise ValueError(
        f"{names} apply to {protocol.name} runs; this run's env is {env}"
      )
