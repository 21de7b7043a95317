#!/usr/bin/env bash
# Runs the test suite (sets up ./.venv on first use). Extra args go to pytest,
# e.g. ./run_tests.sh tests/agents/vtrace/test_vtrace.py -x, or ./run_tests.sh -m faults_slow.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source scripts/setup_env.sh
# --durations keeps the slowest cases in every CI log, so the 20-minute aim
# can be watched and the slowest end-to-end cases moved to benchmarks/.
exec python -m pytest -q -p no:cacheprovider --durations=15 "$@"
