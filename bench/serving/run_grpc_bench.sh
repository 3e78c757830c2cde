#!/usr/bin/env bash
# gRPC predict throughput and latency of `kiln serve` at 1, 16 and 64 connections (the gRPC
# load generator, bounded loopback runs), half_plus_two (ONNX) with 3 rows per request.
# Usage: bench/serving/run_grpc_bench.sh [BUILD_DIR] [SECONDS]. Extra serve flags:
# $KILN_SERVE_FLAGS. Prints one line per connection count.
set -euo pipefail
build=${1:-build}
seconds=${2:-10}
root=$(cd "$(dirname "$0")/../.." && pwd)
kiln="$build/tools/kiln/kiln"
work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$work"' EXIT
cat > "$work/models.config" <<CONFIG
model_config_list { config { name: "half_plus_two"
  base_path: "$root/examples/models/half_plus_two" model_platform: "onnx" } }
CONFIG
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
: > "$work/serve.log"
"$kiln" serve --port="$port" --model_config_file="$work/models.config" ${KILN_SERVE_FLAGS:-} \
  > "$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 300); do
  grep -q "Running gRPC ModelServer" "$work/serve.log" && break
  sleep 0.1
done
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)  cores: $(nproc)"
for connections in 1 16 64; do
  "$build/bench/serving/serving_grpc_load" --target="127.0.0.1:$port" --model=half_plus_two \
    --input=x --shape=1 --rows=3 --connections="$connections" --warmup_seconds=1 \
    --seconds="$seconds"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
kill -TERM $server
wait $server
server=
