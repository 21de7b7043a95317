#!/usr/bin/env bash
# Creates ./.venv and installs seed_rl with the learner, test and video
# extras, once: reruns pip only when pyproject.toml, constraints.txt,
# setup.py or the C extension's source change. Sourced by run_local.sh and run_tests.sh.
# Python: $PYTHON if set, else the newest of python3.13 ... python3.10,
# python3 on PATH that TensorFlow 2.21 supports (3.10 to 3.13). An existing
# venv keeps its Python. SEED_RL_PICK_PYTHON_ONLY=1 prints the choice and
# exits (tests/project/test_setup_env.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SEED_RL_VENV:-$ROOT/.venv}"
STAMP="$VENV/.seed_rl_installed"

# Prints the interpreter to build the venv with, or fails naming what fits.
seed_rl_pick_python() {
  local cand version
  for cand in ${PYTHON:-python3.13 python3.12 python3.11 python3.10 python3}; do
    command -v "$cand" >/dev/null 2>&1 || continue
    version="$("$cand" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || continue
    case "$version" in
      3.10|3.11|3.12|3.13) echo "$cand $version"; return 0 ;;
    esac
    [[ -n "${PYTHON:-}" ]] && echo "error: PYTHON=$PYTHON is Python $version; seed_rl needs 3.10 to 3.13 (TensorFlow 2.21)" >&2 && return 1
  done
  echo "error: seed_rl needs Python 3.10 to 3.13 (TensorFlow 2.21's range); none of python3.13, python3.12, python3.11, python3.10, python3 on PATH is one (set PYTHON=/path/to/python3.x)" >&2
  return 1
}

if [[ -n "${SEED_RL_PICK_PYTHON_ONLY:-}" ]]; then
  seed_rl_pick_python
  exit $?
fi

EXTRAS="learner,test,video,bench"
# setup.py and the C source of its optional extension are in the stamp: an
# editable install rebuilds the extension only when pip runs again.
want="$( (cat "$ROOT/pyproject.toml" "$ROOT/constraints.txt" "$ROOT/setup.py" \
  "$ROOT/seed_rl/common/_frame_push.c"; echo "$EXTRAS") | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$want" ]]; then
  if [[ -x "$VENV/bin/python" ]]; then
    echo "[setup] updating $VENV ($("$VENV/bin/python" -V 2>&1))..." >&2
  else
    picked="$(seed_rl_pick_python)" || exit 1
    echo "[setup] creating $VENV with ${picked% *} (Python ${picked##* }) and installing seed_rl (first run only)..." >&2
    "${picked% *}" -m venv "$VENV"
  fi
  "$VENV/bin/python" -m pip install -q --upgrade pip >&2
  # setuptools' "Editable installation ... folders with the same name"
  # notice is informational (seed_rl is a flat layout); no banner.
  PYTHONWARNINGS="ignore:Editable installation" \
    "$VENV/bin/python" -m pip install -q -c "$ROOT/constraints.txt" -e "$ROOT[$EXTRAS]" >&2
  echo "$want" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
# 3 hides the "failed call to cuInit" error TF logs on every CPU-only machine;
# set TF_CPP_MIN_LOG_LEVEL=0 to debug TensorFlow itself.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"
export PYTHONUNBUFFERED=1
