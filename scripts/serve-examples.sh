#!/usr/bin/env bash
# `make serve`: serves the bundled example models (examples/models.config) with `kiln serve`:
# gRPC on $2 (8500), REST on $3 (8501). Try:
#   curl -d '{"instances": [[1.0], [2.0], [5.0]]}' \
#     http://localhost:8501/v1/models/half_plus_two:predict
set -euo pipefail
build=${1:-build}
grpc_port=${2:-8500}
rest_port=${3:-8501}
cd "$(dirname "$0")/.."
exec "$build/tools/kiln/kiln" serve --port="$grpc_port" --rest_api_port="$rest_port" \
  --model_config_file=examples/models.config
