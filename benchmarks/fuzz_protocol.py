"""Fuzzes the learner's message validation with many cases (default 10,000).

    python benchmarks/fuzz_protocol.py [--examples 10000]

Runs tests/faults/test_fuzz_protocol.py (a real server, real channels; random and
mutated Step messages must be served or refused with INVALID_ARGUMENT naming
a field, and a well-behaved actor must be served throughout) with
SEED_RL_FUZZ_EXAMPLES set, and prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--examples", type=int, default=10_000)
  args = p.parse_args()
  env = dict(os.environ, SEED_RL_FUZZ_EXAMPLES=str(args.examples))
  start = time.monotonic()
  out = subprocess.run(
    [
      sys.executable,
      "-m",
      "pytest",
      "-q",
      "-p",
      "no:cacheprovider",
      "tests/faults/test_fuzz_protocol.py",
      "-o",
      "addopts=",
      "--timeout",
      "0",
    ],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
  )
  print(
    json.dumps(
      {
        "benchmark": "fuzz_protocol",
        "examples": args.examples,
        "passed": out.returncode == 0,
        "wall_s": round(time.monotonic() - start, 1),
        "summary": (out.stdout.strip().splitlines() or [""])[-1],
      }
    )
  )
  return out.returncode


if __name__ == "__main__":
  sys.exit(main())
