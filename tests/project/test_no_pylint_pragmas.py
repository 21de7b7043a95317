"""No pylint pragmas: ruff is the project's linter (pyproject.toml)."""

import pathlib

from tests import support

ROOT = pathlib.Path(support.ROOT)
DIRS = ("seed_rl", "tests", "benchmarks", "scripts")
# Built so that this file does not contain the needle itself.
NEEDLE = "py" + "lint:"


def test_no_pylint_pragmas():
  found = []
  for d in DIRS:
    for path in sorted((ROOT / d).rglob("*.py")):
      text = path.read_text(encoding="utf-8", errors="replace")
      for n, line in enumerate(text.splitlines(), 1):
        if NEEDLE in line:
          found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
  assert not found, (
    "pylint pragmas (ruff is the linter; use `# noqa: CODE` if needed):\n"
    + "\n".join(found)
  )
