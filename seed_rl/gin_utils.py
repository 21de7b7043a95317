"""gin parsing with errors that say what is allowed. TensorFlow-free."""

from __future__ import annotations

import os
import re
import tempfile
import tokenize
from typing import Sequence

import gin


# Config parameters renamed to one vocabulary across agents (2026-11-23):
# old binding -> (new binding, how to translate the value). A gin file or
# --gin_bindings using an old name is refused with the new one, rather than
# gin's "no parameter" error or, where a parse skips unknown names, silence.
RENAMED = {
  "PPOConfig.gamma": ("PPOConfig.discount", ""),
  "PPOConfig.adam_epsilon": ("PPOConfig.optimizer_epsilon", ""),
  "PPOConfig.anneal_learning_rate": (
    "PPOConfig.lr_schedule",
    "True -> 'linear', False -> 'constant'",
  ),
  "DQNConfig.adam_epsilon": ("DQNConfig.optimizer_epsilon", ""),
  "DQNConfig.clip_rewards": (
    "DQNConfig.reward_clipping",
    "True -> 'abs_one', False -> 'none'",
  ),
  "DQNConfig.value_rescaling_eps": ("DQNConfig.value_rescaling_epsilon", ""),
  "R2D2Config.adam_epsilon": ("R2D2Config.optimizer_epsilon", ""),
  "VtraceConfig.lstm_size": ("VtraceConfig.lstm_units", ""),
  "VtraceConfig.baseline_cost": ("VtraceConfig.value_cost", ""),
}

# `[scope/][module.]Configurable.parameter =` at the start of a statement.
_BINDING = re.compile(r"^\s*(?:[\w.]+/)*(?:[\w.]+\.)?(\w+\.\w+)\s*=")


def check_renamed(config_files: Sequence[str], bindings: Sequence[str]) -> None:
  """Refuses bindings of renamed parameters, naming the new name.

  Raises:
    ValueError: e.g. "PPOConfig.gamma was renamed to PPOConfig.discount
      (in --gin_bindings 'PPOConfig.gamma = 0.99')".
  """
  sources = [("--gin_bindings", b) for b in bindings]
  for path in config_files:
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        sources.append((path, f.read()))
  for where, text in sources:
    for number, line in enumerate(text.splitlines(), 1):
      match = _BINDING.match(line.replace("__", "/"))
      if not match or match.group(1) not in RENAMED:
        continue
      old = match.group(1)
      new, values = RENAMED[old]
      place = (
        f"--gin_bindings {line.strip()!r}"
        if where == "--gin_bindings"
        else f"{where}:{number}"
      )
      raise ValueError(
        f"{old} was renamed to {new}"
        + (f" ({values})" if values else "")
        + f" (in {place})"
      )


def configurable_names() -> list:
  # gin 0.5 keeps its registry private; it is the only source for the list.
  # Module-path names shown by their last part, as bindings use them;
  # explicitly named ones ('classic.create_environment') in full.
  names = (name for name, _ in gin.config._REGISTRY.items())
  return sorted(
    {
      name.rsplit(".", 1)[-1] if name.startswith("seed_rl.") else name
      for name in names
      if not name.startswith("gin.")
    }
  )


def parse(
  config_files: Sequence[str],
  bindings: Sequence[str],
  skip_unknown: bool = False,
) -> None:
  """Parses gin files then bindings; `__` in bindings means `/` (as SEED).

  Raises:
    ValueError: naming the bad file or binding and the configurables known,
      or the new name of a renamed parameter (`RENAMED`).
  """
  for path in config_files:
    if not os.path.exists(path):
      raise ValueError(f"gin config file not found: {path}")
  bindings = [b.replace("__", "/") for b in bindings]
  check_renamed(config_files, bindings)
  try:
    gin.parse_config_files_and_bindings(
      list(config_files), bindings, skip_unknown=skip_unknown
    )
  except (ValueError, SyntaxError, tokenize.TokenError) as e:
    known = ", ".join(configurable_names())
    raise ValueError(
      f"bad gin configuration: {e}\nconfigurables you can bind: {known}"
    ) from None


def write_operative_config(logdir: str) -> str:
  """Writes gin's operative config to `<logdir>/operative_config.gin`."""
  os.makedirs(logdir, exist_ok=True)
  path = os.path.join(logdir, "operative_config.gin")
  fd, tmp = tempfile.mkstemp(dir=logdir, prefix=".operative_config.")
  with os.fdopen(fd, "w") as f:
    f.write(gin.operative_config_str())
  os.replace(tmp, path)
  return path
