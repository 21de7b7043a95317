"""gin parsing with errors that say what is allowed. TensorFlow-free."""

from __future__ import annotations

import os
import tempfile
import tokenize
from typing import Sequence

import gin


def configurable_names() -> list:
  # gin 0.5 keeps its registry private; it is the only source for the list.
  # Module-path names shown by their last part, as bindings use them;
  # explicitly named ones ('classic.create_environment') in full.
  names = (name for name, _ in gin.config._REGISTRY.items())  # pylint: disable=protected-access
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
    ValueError: naming the bad file or binding and the configurables known.
  """
  for path in config_files:
    if not os.path.exists(path):
      raise ValueError(f"gin config file not found: {path}")
  bindings = [b.replace("__", "/") for b in bindings]
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
