#!/usr/bin/env bash
# Installs Google Research Football (gfootball 2.10.2) into ./.venv for the
# optional `football` domain; `./run_local.sh football ...` runs it the first
# time. Idempotent: does nothing when gfootball already imports.
#
# What it does (on Debian/Ubuntu; other systems: install the same libraries
# and run the steps by hand):
#   1. the engine's build dependencies with apt (needs root; otherwise it
#      prints the apt-get command and stops): cmake, a C++ compiler, SDL2 and
#      its image/ttf/gfx add-ons, OpenGL/EGL (Mesa), Boost (thread, system,
#      filesystem, python) and the Python headers;
#   2. gfootball's source distribution from the package index, its C++
#      engine built with cmake and make (about 10 minutes on 2 cores);
#   3. the Python package with that engine, without its `gym` dependency
#      (gym 0.26 breaks on NumPy 2; seed_rl/football/gym_compat.py gives
#      gfootball the old gym API on gymnasium).
# Boost.Python is built for the system's Python; the engine loads into the
# venv only when both are the same minor version (checked below).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=2.10.2
# shellcheck source=scripts/setup_env.sh
source "$ROOT/scripts/setup_env.sh"
PY="$ROOT/.venv/bin/python"
say() { echo "[football] $*" >&2; }

# gfootball imports `gym`: only through seed_rl's compatibility layer.
installed() { "$PY" -c "from seed_rl.football import env; env.import_gfootball()" >/dev/null 2>&1; }
if installed; then
  say "gfootball is installed"
  exit 0
fi

APT_PACKAGES=(cmake g++ make python3-dev libgl1-mesa-dev libegl1-mesa-dev
  libsdl2-dev libsdl2-image-dev libsdl2-ttf-dev libsdl2-gfx-dev
  libboost-thread-dev libboost-system-dev libboost-filesystem-dev
  libboost-python-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ $EUID -ne 0 ]] || ! command -v apt-get >/dev/null; then
    say "the engine needs these packages; install them, then run this again:"
    say "  sudo apt-get install -y ${missing[*]}"
    exit 1
  fi
  say "installing the engine's build dependencies with apt: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2 \
    || { apt-get update -q >&2 \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2; }
fi

venv_py=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
system_py=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [[ "$venv_py" != "$system_py" ]]; then
  say "error: .venv runs Python $venv_py but Boost.Python is built for the"
  say "system's Python $system_py; recreate .venv with python$system_py"
  say "(rm -rf .venv; PYTHON=python$system_py bash scripts/setup_env.sh)"
  exit 1
fi

WORK="$(mktemp -d /tmp/seed_rl_football.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
say "downloading gfootball $VERSION (source) into $WORK"
"$PY" -m pip download -q --no-deps --no-binary :all: "gfootball==$VERSION" -d "$WORK" >&2
tar -C "$WORK" -xzf "$WORK/gfootball-$VERSION.tar.gz"
SRC="$WORK/gfootball-$VERSION"
ENGINE="$SRC/third_party/gfootball_engine"
say "building the engine (cmake + make -j$(nproc); log: $WORK/build.log)"
if ! (cd "$ENGINE" && cmake . && make -j"$(nproc)") >"$WORK/build.log" 2>&1; then
  tail -20 "$WORK/build.log" >&2
  trap - EXIT
  say "error: the engine build failed; full log: $WORK/build.log"
  exit 1
fi
mkdir -p "$ENGINE/lib"
cp "$ENGINE/libgame.so" "$ENGINE/lib/prebuilt_gameplayfootball.so"
say "installing the gfootball package with that engine"
GFOOTBALL_USE_PREBUILT_SO=1 "$PY" -m pip install -q --no-deps --no-build-isolation "$SRC" >&2
# gfootball's own imports, beyond seed_rl's pins (its `gym` is gym_compat).
"$PY" -m pip install -q -c "$ROOT/constraints.txt" six opencv-python-headless absl-py >&2
installed || { say "error: gfootball installed but does not import"; exit 1; }
say "gfootball $VERSION installed"
