#!/usr/bin/env bash
# Creates ./.venv (Python 3.11) and installs seed_rl with the learner and test
# extras, once: reruns only when pyproject.toml changes. Sourced by
# run_local.sh and run_tests.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SEED_RL_VENV:-$ROOT/.venv}"
STAMP="$VENV/.seed_rl_installed"
want="$(cat "$ROOT/pyproject.toml" "$ROOT/constraints.txt" | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$want" ]]; then
  PY="${PYTHON:-}"
  if [[ -z "$PY" ]]; then
    for cand in python3.11 python3; do
      if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
        PY="$cand"; break
      fi
    done
  fi
  if [[ -z "$PY" ]]; then
    echo "error: seed_rl needs Python 3.11 (set PYTHON=/path/to/python3.11)" >&2
    exit 1
  fi
  echo "[setup] creating $VENV and installing seed_rl (first run only)..." >&2
  [[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >&2
  "$VENV/bin/python" -m pip install -q -c "$ROOT/constraints.txt" -e "$ROOT[learner,test]" >&2
  echo "$want" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
# 3 hides the "failed call to cuInit" error TF logs on every CPU-only machine;
# set TF_CPP_MIN_LOG_LEVEL=0 to debug TensorFlow itself.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"
export PYTHONUNBUFFERED=1
