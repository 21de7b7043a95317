#!/usr/bin/env bash
# Trains locally: one learner and NUM_ACTORS actor processes on this machine.
#   ./run_local.sh [ENV] [AGENT] [NUM_ACTORS] [ENVS_PER_ACTOR] [flags...]
#   ./run_local.sh                       # CartPole with V-trace, stops when solved
#   ./run_local.sh atari vtrace 2 4      # Pong
#   ./run_local.sh football vtrace 2 4   # Football academy (installs gfootball first)
#   ./run_local.sh classic vtrace 2 16 --gin_bindings='VtraceConfig.learning_rate = 1e-3'
# Flags: --tensorboard, --logdir DIR, --max_seconds S, --target_return R,
# --num_eval_actors N, --gin_config F, --gin_bindings B (see README.md).
# First run creates ./.venv and installs dependencies.
#   ./run_local.sh --docker classic vtrace 2 16   # learner and actors in containers
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if [[ "${1:-}" == --docker ]]; then
  shift
  exec bash scripts/docker_run.sh "$@"  # scripts/docker_run.sh: Docker only, no .venv
fi
source scripts/setup_env.sh
if [[ "${1:-}" == football ]]; then
  # Optional domain: builds Google Research Football's engine the first time.
  bash scripts/install_football.sh
fi
exec python -m seed_rl.train "$@"
