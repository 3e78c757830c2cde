#!/usr/bin/env bash
# First-request latency with and without model warmup. For each setting, starts `kiln serve`
# on a model whose version folder has assets.extra/tf_serving_warmup_requests, connects one
# gRPC client, times its first Predict, then the p50 of the next N (sequential) requests.
# Target (issue 5): with warmup, first <= 2 x p50.
#
# Usage: bench/serving/run_warmup_bench.sh [BUILD_DIR] [N]
# Model: $KILN_BENCH_MODEL (ONNX; default light_squeezenet from the shared test data), input
# $KILN_BENCH_INPUT, row shape $KILN_BENCH_ROW_SHAPE; the warmup file holds one request of one
# row, the same shape the client sends.
set -euo pipefail
build=${1:-build}
requests=${2:-1000}
root=$(cd "$(dirname "$0")/../.." && pwd)
model=${KILN_BENCH_MODEL:-$root/../shared/testdata/models/onnx_light_zoo/light_squeezenet.onnx}
input=${KILN_BENCH_INPUT:-data_0}
row_shape=${KILN_BENCH_ROW_SHAPE:-3,224,224}
kiln="$build/tools/kiln/kiln"
work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$work"' EXIT

mkdir -p "$work/m/1/assets.extra"
"$build/bench/serving/serving_bench_model" dynamic-batch "$model" "$work/m/1/model.onnx"
"$build/bench/serving/serving_bench_model" warmup \
  "$work/m/1/assets.extra/tf_serving_warmup_requests" --model=m --input="$input" \
  --shape="1,$row_shape"
cat > "$work/models.config" <<CONFIG
model_config_list { config { name: "m" base_path: "$work/m" model_platform: "onnx" } }
CONFIG

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)  cores: $(nproc)"
for warmup in true false; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$kiln" serve --port="$port" --model_config_file="$work/models.config" \
    --enable_model_warmup=$warmup ${KILN_SERVE_FLAGS:-} > "$work/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 1 600); do
    grep -q "Running gRPC ModelServer" "$work/serve.log" && break
    sleep 0.1
  done
  line=$("$build/bench/serving/serving_grpc_load" --target="127.0.0.1:$port" --model=m \
    --input="$input" --shape="$row_shape" --rows=1 --sequential="$requests") \
    || { echo "$line"; cat "$work/serve.log"; exit 1; }
  echo "enable_model_warmup=$warmup: $line"
  kill -TERM $server
  wait $server
  server=
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
