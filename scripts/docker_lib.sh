# Shared by scripts/docker_smoke.sh and scripts/docker_run.sh (sourced):
# a Docker daemon, a base image, and the actor and learner images.
# The caller defines log, skip and fail, and sets ROOT and WORK; a dockerd
# started here has its pid in DOCKERD_PID (the caller stops it).

DOCKERD_PID=""

apt_install() {  # packages...: installs them as root with apt, or returns 1
  [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null || return 1
  log "installing $* with apt"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >"$WORK/apt.log" 2>&1 \
    || { apt-get update -q >>"$WORK/apt.log" 2>&1 \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >>"$WORK/apt.log" 2>&1; }
}

ensure_docker() {  # a client and an answering daemon, or skip
  command -v docker >/dev/null || apt_install docker.io \
    || skip "no docker client, and it cannot be installed (not root, or no apt)"
  if ! docker info >/dev/null 2>&1; then
    command -v dockerd >/dev/null || apt_install docker.io \
      || skip "no Docker daemon answers and dockerd cannot be installed"
    [[ $EUID -eq 0 ]] || skip "no Docker daemon answers and starting one needs root"
    local driver
    for driver in $(storage_drivers); do
      start_dockerd "$driver" && break
    done
    docker info >/dev/null 2>&1 \
      || skip "dockerd did not start: $(tail -3 "$WORK/dockerd.log" | tr '\n' ' ')"
  fi
  log "docker: $(docker version --format 'client {{.Client.Version}}, server {{.Server.Version}}' 2>/dev/null)"
  local root
  root="$(docker info --format '{{.DockerRootDir}}' 2>/dev/null)"
  log "docker storage: $(docker info --format '{{.Driver}}' 2>/dev/null) in $root," \
      "$(df -h --output=avail "$root" 2>/dev/null | tail -1 | tr -d ' ') free"
}

storage_drivers() {  # the drivers to try, best first
  # DOCKER_STORAGE_DRIVER forces one. Otherwise overlay2 where this kernel
  # can mount an overlay on the filesystem that holds /var/lib/docker, then
  # vfs. vfs copies every layer in full, and every container twice (its
  # init layer and its own): the smoke's learner + 4 actors alone took
  # ~10 GB, and a CI machine ran out of disk in the compose step.
  if [[ -n "${DOCKER_STORAGE_DRIVER:-}" ]]; then echo "$DOCKER_STORAGE_DRIVER"; return; fi
  local probe
  mkdir -p /var/lib/docker
  probe="$(mktemp -d /var/lib/docker/.overlay-probe.XXXXXX)" || { echo vfs; return; }
  mkdir -p "$probe"/{lower,upper,work,merged}
  if mount -t overlay overlay \
      -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" \
      "$probe/merged" 2>/dev/null; then
    umount "$probe/merged"
    echo overlay2 vfs
  else
    echo vfs
  fi
  rm -rf "$probe"
}

start_dockerd() {  # DRIVER: starts dockerd with it; 0 when it answers
  log "starting dockerd ($1 storage; log: $WORK/dockerd.log)"
  # In its own session: a script's background jobs share its process
  # group, so the terminal's Ctrl-C reached dockerd too, which then
  # stopped every container and exited before the script could remove
  # them (they were left behind, stopped).
  setsid dockerd --storage-driver="$1" >>"$WORK/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && return 0
    kill -0 "$DOCKERD_PID" 2>/dev/null || break
    sleep 1
  done
  log "dockerd with $1 storage did not start: $(tail -2 "$WORK/dockerd.log" | tr '\n' ' ')"
  stop_dockerd
  return 1
}

stop_dockerd() {  # the daemon ensure_docker started, if any
  [[ -n "$DOCKERD_PID" ]] || return 0
  log "stopping the dockerd this script started (pid $DOCKERD_PID)"
  kill "$DOCKERD_PID" 2>/dev/null
  for _ in $(seq 30); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 1; done
  kill -9 "$DOCKERD_PID" 2>/dev/null
  DOCKERD_PID=""
}

ensure_base_image() {  # sets PYTHON_IMAGE to a base image that exists
  PYTHON_IMAGE="${PYTHON_IMAGE:-python:3.11-slim-bookworm}"
  if docker image inspect "$PYTHON_IMAGE" >/dev/null 2>&1 \
    || timeout 120 docker pull -q "$PYTHON_IMAGE" >/dev/null 2>&1; then
    log "base image: $PYTHON_IMAGE"
    return
  fi
  log "$PYTHON_IMAGE cannot be pulled: a stand-in from Debian packages"
  local wanted="$PYTHON_IMAGE"
  PYTHON_IMAGE="seed-rl-base:bookworm"
  if ! docker image inspect "$PYTHON_IMAGE" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null || apt_install debootstrap \
      || skip "no base image and no debootstrap to build one"
    local mirror rootfs="$WORK/rootfs"
    mirror="$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)"
    mirror="${mirror:-http://deb.debian.org/debian}"
    log "debootstrap bookworm from $mirror (log: $WORK/debootstrap.log)"
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
      bookworm "$rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1 \
      || skip "no base image: $wanted cannot be pulled and debootstrap could not fetch Debian from $mirror ($(tail -2 "$WORK/debootstrap.log" | tr '\n' ' '))"
    # What the python image offers: `python` and `pip` on PATH, pip allowed
    # to install into the system Python (PEP 668's marker removed).
    ln -sf python3 "$rootfs/usr/bin/python"
    ln -sf pip3 "$rootfs/usr/bin/pip"
    rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
    # A host behind a TLS-intercepting proxy trusts extra CAs (Debian keeps
    # local ones in /usr/local/share/ca-certificates): the stand-in trusts
    # them too, and pip uses the system store, or no package installs.
    if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
      log "stand-in trusts the host's local CAs: $(cd /usr/local/share/ca-certificates && echo *.crt)"
      cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
      chroot "$rootfs" update-ca-certificates >>"$WORK/debootstrap.log" 2>&1 \
        || fail "update-ca-certificates in the stand-in"
      printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/etc/pip.conf"
    fi
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import - "$PYTHON_IMAGE" >/dev/null \
      || fail "docker import of the stand-in base"
    rm -rf "$rootfs"
  fi
  log "base image: $PYTHON_IMAGE (stand-in)"
}

build_images() {  # TAG: builds seed-rl-actor:TAG and seed-rl-learner:TAG
  local tag="$1" ctx="$WORK/context" target size
  # The context holds only what docker/Dockerfile.dockerignore lets
  # through, so the legacy builder (which reads no per-Dockerfile ignore
  # file) sends no .venv/ or runs/. BuildKit is off: its `# syntax=` line
  # would pull a frontend image from the registry.
  rm -rf "$ctx" && mkdir -p "$ctx/docker"
  cp "$ROOT"/pyproject.toml "$ROOT"/setup.py "$ROOT"/constraints.txt "$ROOT"/README.md "$ctx/"
  cp "$ROOT"/docker/Dockerfile "$ROOT"/docker/constraints-gpu.txt "$ROOT"/docker/compose.yaml "$ctx/docker/"
  (cd "$ROOT" && tar -c --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' --exclude='*.so' seed_rl) \
    | tar -C "$ctx" -x
  for target in actor learner; do
    log "building seed-rl-$target:$tag (log: $WORK/build-$target.log)"
    DOCKER_BUILDKIT=0 docker build --network host --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" \
      ${BUILD_LABEL:+--label "$BUILD_LABEL"} \
      -f "$ctx/docker/Dockerfile" --target "$target" -t "seed-rl-$target:$tag" "$ctx" \
      >"$WORK/build-$target.log" 2>&1 \
      || fail "building $target: $(tail -5 "$WORK/build-$target.log" | tr '\n' ' ')"
    size=$(docker image inspect "seed-rl-$target:$tag" --format '{{.Size}}')
    log "image seed-rl-$target:$tag: $(( size / 1000000 )) MB"
  done
}
