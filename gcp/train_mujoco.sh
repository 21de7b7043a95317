#!/usr/bin/env bash
# mujoco on Vertex AI: one custom job, the learner in worker pool 0 (CPU only),
# the actors in worker pool 1. Defaults below; any flag given overrides them:
#   gcp/train_mujoco.sh --project P --bucket gs://B/seed_rl \
#       --image_repo us-central1-docker.pkg.dev/P/seed-rl \
#       [--learner_machine_type M] [--accelerator_type T|none] [--accelerator_count N] \
#       [--num_actors N] [--envs_per_actor K] [--actor_machine_type M] \
#       [--agent A] [--gin_bindings B ...] [learner flags] [--dry_run]
#       [--tune --tune_param NAME=KIND:... ...]  (a tuning study, README.md)
# --dry_run prints the job spec (JSON) instead of submitting it with
# `gcloud ai custom-jobs create`. See seed_rl/cluster/vertex.py and README.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
cd "$ROOT"  # seed_rl.cluster.vertex needs only the standard library
exec "$PYTHON" -m seed_rl.cluster.vertex \
  --env mujoco --agent ppo \
  --learner_machine_type n2-standard-8 --accelerator_type none --accelerator_count 1 \
  --num_actors 8 --envs_per_actor 16 --actor_machine_type n2-standard-8 \
  "$@"
