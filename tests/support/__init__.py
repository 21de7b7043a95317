"""What the tests share: builders of specs, unrolls and agents (`helpers`),
processes started for real (`launch`) and an environment that misbehaves on
purpose (`crashing_env`). Imported as `from tests.support import ...`."""

import os

# The repository's root, whatever the depth of the test importing it.
ROOT = os.path.dirname(
  os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
