#!/usr/bin/env bash
# The manual: an MkDocs site (mkdocs.yml) built from the pages under docs/,
# with API pages generated from the docstrings in seed_rl/ (read from the
# source, nothing imported: no TensorFlow needed).
#
#   scripts/docs.sh build   # mkdocs build --strict into ./site (gitignored)
#   scripts/docs.sh serve   # live preview on http://127.0.0.1:8000
#
# Extra arguments go to mkdocs. The tools live in their own virtual
# environment, ./.docs-venv, created on first use (or when
# docs/requirements.txt changes) with PYTHON (default python3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=.docs-venv
STAMP=$VENV/.requirements.txt
if [[ ! -x $VENV/bin/mkdocs ]] || ! cmp -s docs/requirements.txt "$STAMP"; then
  echo "[docs] installing docs/requirements.txt into $VENV" >&2
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    -r docs/requirements.txt
  cp docs/requirements.txt "$STAMP"
fi

export NO_MKDOCS_2_WARNING=1  # Material's banner about its successor
cmd=${1:-build}
[[ $# -gt 0 ]] && shift
case $cmd in
  build) exec "$VENV/bin/mkdocs" build --strict --site-dir site "$@" ;;
  serve) exec "$VENV/bin/mkdocs" serve "$@" ;;
  *)
    echo "usage: scripts/docs.sh [build|serve] [mkdocs arguments]" >&2
    exit 2
    ;;
esac
