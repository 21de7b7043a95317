#!/usr/bin/env bash
# Static checks, run by .ci/run before the tests: formatting, lint, types.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
ruff format --check seed_rl benchmarks tests scripts
ruff check seed_rl benchmarks tests scripts
mypy seed_rl tests benchmarks
