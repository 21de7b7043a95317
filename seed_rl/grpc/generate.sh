#!/usr/bin/env bash
# Regenerates seed_rl_pb2.py, seed_rl_pb2.pyi and seed_rl_pb2_grpc.py from
# seed_rl.proto. Run from anywhere; it works from the repository root so the
# generated code imports `from seed_rl.grpc import seed_rl_pb2`.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-.venv/bin/python}"
"$PYTHON" -m grpc_tools.protoc -I. \
  --python_out=. --pyi_out=. --grpc_python_out=. \
  seed_rl/grpc/seed_rl.proto
