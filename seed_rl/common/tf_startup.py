"""TensorFlow without its start-up lines on the console.

TensorFlow's shared libraries write a few lines to stderr while they load,
before absl's logging starts, so TF_CPP_MIN_LOG_LEVEL cannot hold them back:
"All log messages before absl::InitializeLog() ...", "oneDNN custom
operations are on ...", "Could not find cuda drivers ..." (twice each, one
per library). `import_tensorflow()` imports TensorFlow with file
descriptor 2 captured, then writes back every captured line that is not one
of those, so a real error (or an import that fails) still reaches the
console. Entry points call it before anything imports TensorFlow;
TF_CPP_MIN_LOG_LEVEL=0 (debugging TensorFlow itself) keeps every line.

TensorFlow-free until called: the launcher and tools import it.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from types import ModuleType

STARTUP_LINE = re.compile(
  r"All log messages before absl::InitializeLog\(\)"
  r"|\] oneDNN custom operations are on"
  r"|\] Could not find cuda drivers on your machine"
  r"|\] This TensorFlow binary is optimized to use available CPU"
  r"|^To enable the following instructions: .* rebuild TensorFlow"
)


def import_tensorflow() -> ModuleType:
  """`import tensorflow`, its start-up lines dropped (see above)."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  if "tensorflow" in sys.modules or os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0":
    import tensorflow

    return tensorflow
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as captured:
    os.dup2(captured.fileno(), 2)
    try:
      import tensorflow
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      captured.seek(0)
      text = captured.read().decode(errors="replace")
      kept = [
        line
        for line in text.splitlines(keepends=True)
        if not STARTUP_LINE.search(line)
      ]
      sys.stderr.write("".join(kept))
      sys.stderr.flush()
  return tensorflow
