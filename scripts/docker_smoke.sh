#!/usr/bin/env bash
# Builds the actor and learner images with a real Docker daemon and trains
# CartPole with the learner and an actor in separate containers, over TLS +
# token (until the mean return reaches 200); then runs the same images
# through docker/compose.yaml (learner + 4 actors, 100k env steps) if a
# compose is available (and, under vfs storage, the disk has room for it).
#   scripts/docker_smoke.sh            # exit 0 passed, 1 failed, 77 skipped
# Environment:
#   PYTHON_IMAGE   base image (default python:3.11-slim-bookworm); when it
#                  can be neither found nor pulled, a stand-in is built from
#                  Debian packages with debootstrap (seed-rl-base:bookworm)
#   SMOKE_TAG      tag of the images built (default smoke)
#   SMOKE_KEEP=1   keep the images and the work folder afterwards
# As root on Debian it installs what is missing (docker.io, debootstrap) and
# starts dockerd (overlay2 storage where the kernel allows, else vfs;
# DOCKER_STORAGE_DRIVER forces one) if no daemon answers; a daemon it started it
# stops again at the end, also on failure. When Docker cannot be had it says
# why and exits 77: a skip, never a pass.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAG="${SMOKE_TAG:-smoke}"
PYTHON_IMAGE="${PYTHON_IMAGE:-python:3.11-slim-bookworm}"
WORK="$(mktemp -d /tmp/seed_rl_docker_smoke.XXXXXX)"
LEARNER="seed-rl-smoke-learner-$$"
ACTOR="seed-rl-smoke-actor-$$"
T0=$(date +%s)

log() { echo "[docker_smoke $(( $(date +%s) - T0 ))s] $*"; }
skip() { log "SKIPPED: $*"; exit 77; }
fail() { log "FAILED: $*"; exit 1; }

# shellcheck source=scripts/docker_lib.sh
source "$ROOT/scripts/docker_lib.sh"

cleanup() {
  local rc=$?
  docker rm -f "$LEARNER" "$ACTOR" >/dev/null 2>&1
  if [[ -n "${COMPOSE:-}" ]]; then
    (cd "$WORK/context" && $COMPOSE -p seed-rl-smoke -f docker/compose.yaml \
      down -v --remove-orphans >/dev/null 2>&1)
  fi
  if [[ "${SMOKE_KEEP:-0}" != 1 ]]; then
    docker rmi -f "seed-rl-actor:$TAG" "seed-rl-learner:$TAG" >/dev/null 2>&1
    if [[ $rc == 0 || $rc == 77 ]]; then
      rm -rf "$WORK"
    else
      rm -rf "$WORK/context" "$WORK/rootfs"
      log "logs kept in $WORK"
    fi
  fi
  stop_dockerd
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ensure_docker
ensure_base_image
build_images "$TAG"
ctx="$WORK/context"
docker run --rm --entrypoint python "seed-rl-actor:$TAG" -c \
  'import importlib.util as u, sys; sys.exit(u.find_spec("tensorflow") is not None)' \
  || fail "the actor image has TensorFlow"
# The learner runs from the source tree in its WORKDIR: the compiled frame
# push must be there, or Atari learners push frames with NumPy: allowed
# only where the build could not fetch a compiler with apt.
push=$(docker run --rm --entrypoint python "seed-rl-learner:$TAG" -c \
  'from seed_rl.common import env_state; print("compiled" if env_state._NATIVE else "numpy")') \
  || fail "the learner image cannot import seed_rl.common.env_state"
log "learner image frame push: $push"
if [[ "$push" != compiled ]] && ! grep -qx "frame push: no compiler (apt failed), NumPy instead" "$WORK/build-learner.log"; then
  fail "the learner image pushes frames with NumPy although its build reached a compiler: $(grep '^frame push:' "$WORK/build-learner.log" | tail -1)"
fi

# --- two containers, TLS + token ---------------------------------------------
bash "$ROOT/scripts/make_certs.sh" "$WORK/certs" learner >/dev/null
mkdir -p "$WORK/logdir"
chmod 0755 "$WORK/certs" && chmod 0644 "$WORK"/certs/*
chmod 0777 "$WORK/logdir"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
user="$(id -u):$(id -g)"
log "training CartPole: learner and actor containers (host network, port $port, TLS + token)"
docker run -d --name "$LEARNER" --network host --user "$user" -e HOME=/tmp \
  -v "$WORK/certs:/certs:ro" -v "$WORK/logdir:/logdir" "seed-rl-learner:$TAG" \
  --env classic --agent vtrace --num_actors 1 --envs_per_actor 16 \
  --server_address "[::]:$port" --tls_cert /certs/learner.pem \
  --tls_key /certs/learner.key --token_file /certs/token \
  --machine_profile cluster --logdir /logdir/run \
  --target_return 200 --max_seconds 600 >/dev/null || fail "starting the learner container"
docker run -d --name "$ACTOR" --network host --user "$user" -e HOME=/tmp --shm-size=256m \
  -v "$WORK/certs:/certs:ro" "seed-rl-actor:$TAG" \
  --env classic --actor_id 0 --num_envs 16 --server_address "localhost:$port" \
  --tls_server_name learner --tls_ca /certs/ca.pem --token_file /certs/token \
  --machine_profile cluster --gin_config seed_rl/classic/gin/vtrace.gin \
  --connect_timeout_s 120 >/dev/null || fail "starting the actor container"
learner_rc=$(timeout 900 docker wait "$LEARNER") || learner_rc="no exit within 900 s"
docker logs "$LEARNER" >"$WORK/learner.log" 2>&1
[[ "$learner_rc" == 0 ]] || fail "learner: $learner_rc: $(tail -5 "$WORK/learner.log" | tr '\n' ' ')"
actor_rc=$(timeout 120 docker wait "$ACTOR") || actor_rc="no exit within 120 s of the learner"
docker logs "$ACTOR" >"$WORK/actor.log" 2>&1
[[ "$actor_rc" == 0 ]] || fail "actor: $actor_rc: $(tail -5 "$WORK/actor.log" | tr '\n' ' ')"
result="$WORK/logdir/run/result.json"
[[ -f "$result" ]] || fail "no result.json in the learner's logdir"
python3 - "$result" <<'EOF' || fail "result.json: the run did not reach its target"
import json, sys
r = json.load(open(sys.argv[1]))
print("[docker_smoke] result:", json.dumps({k: r.get(k) for k in ("reason", "solved", "solved_at_s", "env_steps", "final_return")}))
sys.exit(0 if r.get("reason") == "target reached" and r.get("solved") else 1)
EOF
log "two containers: passed (learner exit 0, actor exit 0)"
# Their disk goes before compose starts five more (under vfs each
# container is two full copies of its image).
docker rm -f "$LEARNER" "$ACTOR" >/dev/null 2>&1

# --- compose ----------------------------------------------------------------
COMPOSE=""
if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"
elif command -v docker-compose >/dev/null || apt_install docker-compose; then COMPOSE="docker-compose"
fi
compose_skip=""
[[ -n "$COMPOSE" ]] || compose_skip="neither the compose plugin nor docker-compose is available"
if [[ -z "$compose_skip" && "$(docker info --format '{{.Driver}}')" == vfs ]]; then
  # vfs gives each container two full copies of its image (its init layer
  # and its own): the learner + 4 actors need ~10 GB, which a CI machine
  # did not have (compose failed there with "no space left on device").
  need=0
  for image in learner actor actor actor actor; do
    need=$(( need + 2 * $(docker image inspect "seed-rl-$image:$TAG" --format '{{.Size}}') ))
  done
  need=$(( need + need / 10 ))
  avail=$(df -B1 --output=avail "$(docker info --format '{{.DockerRootDir}}')" | tail -1)
  if (( avail < need )); then
    compose_skip="vfs storage needs ~$(( need / 1000000000 )) GB for learner + 4 actor containers, $(( avail / 1000000000 )) GB free"
  fi
fi
if [[ -n "$compose_skip" ]]; then
  log "compose: SKIPPED ($compose_skip)"
else
  log "compose: $($COMPOSE version 2>/dev/null | head -1)"
  mkdir -p "$ctx/certs" && cp "$WORK"/certs/* "$ctx/certs/"
  export SEED_RL_IMAGE_TAG="$TAG" SEED_RL_ENV=classic SEED_RL_AGENT=vtrace SEED_RL_ENVS_PER_ACTOR=8
  export SEED_RL_UID="$(id -u)" SEED_RL_GID="$(id -g)"
  # compose.yaml as users run it, but the learner stops after 100k env
  # steps: CartPole's gin decays the learning rate to 0 over 2,000 updates,
  # so a run that has not solved by then never does (seen with 4 x 8 envs).
  cat >"$WORK/compose.smoke.yaml" <<'YAML'
services:
  learner:
    command:
      - --env=classic
      - --agent=vtrace
      - --num_actors=4
      - --envs_per_actor=8
      - --server_address=[::]:8686
      - --tls_cert=/run/secrets/learner_cert
      - --tls_key=/run/secrets/learner_key
      - --token_file=/run/secrets/token
      - --machine_profile=cluster
      - --logdir=/opt/seed_rl/runs/smoke
      - --max_env_steps=100000
YAML
  (cd "$ctx" && timeout 900 $COMPOSE -p seed-rl-smoke -f docker/compose.yaml \
     -f "$WORK/compose.smoke.yaml" up --no-build \
     --abort-on-container-exit --exit-code-from learner) >"$WORK/compose.log" 2>&1
  rc=$?
  [[ $rc == 0 ]] || fail "compose up: exit $rc: $(tail -8 "$WORK/compose.log" | tr '\n' ' ')"
  # The learner's own log, whole: `up` stops following it once an actor,
  # told that training is over, exits (--abort-on-container-exit), which
  # can be before the learner's last lines. 4 x 8 envs sometimes solve
  # CartPole (the gin file's target) before 100k env steps: either end is
  # the run reaching its stop condition.
  (cd "$ctx" && $COMPOSE -p seed-rl-smoke -f docker/compose.yaml \
     -f "$WORK/compose.smoke.yaml" logs --no-color learner) >"$WORK/compose-learner.log" 2>&1
  stop_line=$(grep -oE "finished \((max_env_steps 100000 reached|target reached)\)" "$WORK/compose-learner.log" | head -1)
  [[ -n "$stop_line" ]] \
    || fail "compose: the learner did not reach its stop condition (log: $WORK/compose-learner.log)"
  log "compose: passed (learner + 4 actors served until the learner $stop_line, learner exit 0)"
fi
log "PASSED in $(( $(date +%s) - T0 )) s${compose_skip:+ (compose skipped: $compose_skip)}"
