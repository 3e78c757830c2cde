#!/usr/bin/env bash
# `make serve`: serves the bundled example models (examples/) with `kiln serve`. Until the
# server is built, runs the pipeline benchmark instead.
set -euo pipefail
build=${1:-build}
grpc_port=${2:-8500}
rest_port=${3:-8501}
kiln="$build/tools/kiln/kiln"
if "$kiln" help 2>/dev/null | grep -q "^  serve "; then
  exec "$kiln" serve --port="$grpc_port" --rest_api_port="$rest_port" \
    --model_config_file=examples/models.config
fi
echo "kiln serve is not built yet; running the pipeline benchmark instead"
exec "$kiln" data bench --experiment=guide
