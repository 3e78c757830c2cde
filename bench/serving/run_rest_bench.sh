#!/usr/bin/env bash
# REST predict throughput and latency of `kiln serve` at 1, 16 and 64 connections (wrk, bounded
# loopback runs). Usage: bench/serving/run_rest_bench.sh [BUILD_DIR] [SECONDS] [MODEL_BASE_PATH]
# [MODEL_NAME] [PLATFORM]. Prints one line per connection count.
set -euo pipefail
build=${1:-build}
seconds=${2:-10}
base=${3:-$(pwd)/examples/models/half_plus_two}
name=${4:-half_plus_two}
platform=${5:-onnx}
kiln="$build/tools/kiln/kiln"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; rm -rf "$work"' EXIT
cat > "$work/models.config" <<CONFIG
model_config_list { config { name: "$name" base_path: "$base" model_platform: "$platform" } }
CONFIG
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
grpc=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$kiln" serve --port="$grpc" --rest_api_port="$port" --model_config_file="$work/models.config" \
  ${KILN_SERVE_FLAGS:-} > "$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$port/v1/models/$name" > /dev/null && break
  sleep 0.1
done
url="http://127.0.0.1:$port/v1/models/$name:predict"
export KILN_BODY=${KILN_BODY:-'{"instances": [[1.0], [2.0], [5.0]]}'}
curl -s -d "$KILN_BODY" "$url"; echo
for connections in 1 16 64; do
  threads=$(( connections < 2 ? 1 : 2 ))
  printf "connections=%-3d " "$connections"
  wrk -t"$threads" -c"$connections" -d"${seconds}s" --latency -s "$here/predict.lua" "$url" \
    | grep '^requests='
done
kill -TERM $server
wait $server
