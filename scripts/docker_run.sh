#!/usr/bin/env bash
# `./run_local.sh --docker [ENV] [AGENT] [NUM_ACTORS] [ENVS_PER_ACTOR] [flags]`:
# the run ./run_local.sh makes, with the learner and each actor in its own
# container (images seed-rl-{learner,actor}:local, built from this tree on
# first use and again whenever seed_rl/ or the pins changed), the logdir on
# the host (default runs/ENV-AGENT), Ctrl-C stopping every container.
# Containers share the host's network; the learner listens on localhost, so
# no TLS is needed (as in ./run_local.sh).
# Flags: those of ./run_local.sh (README.md); --gin_config files are mounted
# into the containers; --tensorboard starts TensorBoard in a container;
# --rebuild forces an image build. --num_eval_actors is not supported here.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAG="${SEED_RL_IMAGE_TAG:-local}"
WORK="$(mktemp -d /tmp/seed_rl_docker_run.XXXXXX)"
T0=$(date +%s)
log() { echo "[docker $(( $(date +%s) - T0 ))s] $*"; }
skip() { log "error: $*"; exit 1; }  # the user asked for Docker: no skip
fail() { log "error: $*"; exit 1; }
# shellcheck source=scripts/docker_lib.sh
source "$ROOT/scripts/docker_lib.sh"

prefix="seed-rl-$$"
containers=()
cleanup() {
  local rc=$?
  # A second Ctrl-C must not cut the cleanup short (containers left behind).
  trap '' INT TERM
  if [[ ${#containers[@]} -gt 0 ]]; then
    # The learner first, with time to write its final checkpoint.
    docker stop -t 60 "${containers[0]}" >/dev/null 2>&1
    docker rm -f "${containers[@]}" >/dev/null 2>&1
  fi
  stop_dockerd
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'log "stopping every container"; exit 130' INT TERM

# --- arguments ----------------------------------------------------------------
positional=()
while [[ $# -gt 0 && "$1" != -* && ${#positional[@]} -lt 4 ]]; do
  positional+=("$1"); shift
done
ENV="${positional[0]:-classic}"
AGENT="${positional[1]:-vtrace}"
NUM_ACTORS="${positional[2]:-2}"
ENVS_PER_ACTOR="${positional[3]:-16}"
LOGDIR="" TENSORBOARD=0 TB_PORT=6006 REBUILD=0 SEED=0
shared=()   # flags for the learner and every actor
learner_flags=()
mounts=()
n_gin=0
while [[ $# -gt 0 ]]; do
  flag="$1" value=""
  if [[ "$flag" == --*=* ]]; then value="${flag#*=}"; flag="${flag%%=*}"; shift
  else shift; fi
  case "$flag" in
    --tensorboard) TENSORBOARD=1 ;;
    --rebuild) REBUILD=1 ;;
    --logdir|--tensorboard_port|--seed|--gin_config|--gin_bindings|--machine_profile|--num_eval_actors)
      if [[ -z "$value" ]]; then value="${1:-}"; shift; fi
      case "$flag" in
        --logdir) LOGDIR="$value" ;;
        --tensorboard_port) TB_PORT="$value" ;;
        --seed) SEED="$value" ;;
        --num_eval_actors) [[ "$value" == 0 ]] || fail "--num_eval_actors is not supported with --docker" ;;
        --gin_config)
          [[ -f "$value" ]] || fail "gin config file not found: $value"
          n_gin=$((n_gin + 1))
          mounts+=(-v "$(cd "$(dirname "$value")" && pwd)/$(basename "$value"):/gin/$n_gin.gin:ro")
          shared+=(--gin_config "/gin/$n_gin.gin") ;;
        *) shared+=("$flag" "$value") ;;
      esac ;;
    *) if [[ -n "$value" ]]; then learner_flags+=("$flag=$value"); else learner_flags+=("$flag"); fi ;;
  esac
done
gin_file="seed_rl/$ENV/gin/$AGENT.gin"
[[ -f "$ROOT/$gin_file" ]] || fail "no gin file $gin_file: --docker runs the built-in ENV/AGENT pairs (./run_local.sh lists them)"
LOGDIR="${LOGDIR:-runs/$ENV-$AGENT}"
mkdir -p "$LOGDIR" && LOGDIR="$(cd "$LOGDIR" && pwd)"
chmod 0777 "$LOGDIR" 2>/dev/null

# --- images -------------------------------------------------------------------
ensure_docker
# The images carry the hash of what they were built from.
source_hash=$(cd "$ROOT" && { find seed_rl -name '*.py' -o -name '*.gin' -o -name '*.proto'; \
  echo pyproject.toml constraints.txt docker/Dockerfile; } | sort | xargs cat | sha256sum | cut -c1-16)
have=$(docker image inspect "seed-rl-learner:$TAG" --format '{{index .Config.Labels "seed_rl.source"}}' 2>/dev/null)
have_actor=$(docker image inspect "seed-rl-actor:$TAG" --format '{{index .Config.Labels "seed_rl.source"}}' 2>/dev/null)
if [[ $REBUILD == 1 || "$have" != "$source_hash" || "$have_actor" != "$source_hash" ]]; then
  log "building the images from this tree (first time: minutes)"
  ensure_base_image
  BUILD_LABEL="seed_rl.source=$source_hash" build_images "$TAG"
else
  log "images seed-rl-{learner,actor}:$TAG are up to date"
fi

# --- containers -----------------------------------------------------------------
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
common=(--network host --user "$(id -u):$(id -g)" -e HOME=/tmp --shm-size=1g "${mounts[@]}")
docker run -d --name "$prefix-learner" "${common[@]}" -v "$LOGDIR:/logdir" \
  "seed-rl-learner:$TAG" --env "$ENV" --agent "$AGENT" --num_actors "$NUM_ACTORS" \
  --envs_per_actor "$ENVS_PER_ACTOR" --server_address "localhost:$port" \
  --logdir /logdir --seed "$SEED" "${shared[@]}" "${learner_flags[@]}" >/dev/null \
  || fail "starting the learner container"
containers+=("$prefix-learner")
for ((i = 0; i < NUM_ACTORS; i++)); do
  docker run -d --name "$prefix-actor-$i" "${common[@]}" "seed-rl-actor:$TAG" \
    --env "$ENV" --actor_id "$i" --num_envs "$ENVS_PER_ACTOR" \
    --server_address "localhost:$port" --seed "$SEED" --gin_config "$gin_file" \
    "${shared[@]}" >/dev/null || fail "starting actor $i"
  containers+=("$prefix-actor-$i")
done
if [[ $TENSORBOARD == 1 ]]; then
  docker run -d --name "$prefix-tensorboard" --network host -v "$LOGDIR:/logdir:ro" \
    --entrypoint python "seed-rl-learner:$TAG" -m tensorboard.main --logdir /logdir \
    --port "$TB_PORT" --bind_all >/dev/null && containers+=("$prefix-tensorboard")
  log "TensorBoard: http://localhost:$TB_PORT"
fi
log "learner + $NUM_ACTORS actor containers ($prefix-*), logdir $LOGDIR; Ctrl-C stops them"
docker logs -f "$prefix-learner" &
logs_pid=$!
rc=$(docker wait "$prefix-learner")
wait "$logs_pid" 2>/dev/null
if [[ -z "$rc" ]]; then  # Ctrl-C interrupted `docker wait` itself
  log "interrupted: stopping every container"
  exit 130
fi
if [[ "$rc" != 0 ]]; then  # actors would wait for a learner that is gone
  log "learner exit $rc: stopping the actors"
  exit "$rc"
fi
for ((i = 0; i < NUM_ACTORS; i++)); do
  actor_rc=$(timeout 90 docker wait "$prefix-actor-$i") || actor_rc="still running after 90 s"
  [[ "$actor_rc" == 0 ]] || log "actor $i: exit $actor_rc"
done
log "learner exit $rc; result: $LOGDIR/result.json"
exit "$rc"
