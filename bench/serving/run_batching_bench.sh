#!/usr/bin/env bash
# Server-side batching against the offline runtime, in one run: the same model and batch size,
# first `kiln run --bench` (offline items/s), then `kiln serve` with batching driven by the
# gRPC load generator (one row per request, enough connections to keep batches full), then
# `kiln run --bench` again; prints the server's rows/s over the mean offline items/s.
#
# Usage: bench/serving/run_batching_bench.sh [BUILD_DIR] [SECONDS] [CONNECTIONS] [BATCH]
# Model: $KILN_BENCH_MODEL (an ONNX file; default light_squeezenet from the shared test data,
# made batchable by serving_bench_model dynamic-batch), input $KILN_BENCH_INPUT with row shape
# $KILN_BENCH_ROW_SHAPE. Extra `kiln serve` flags: $KILN_SERVE_FLAGS; batching parameters
# beyond max_batch_size/allowed_batch_sizes: $KILN_BATCHING_EXTRA (text proto lines).
set -euo pipefail
build=${1:-build}
seconds=${2:-20}
connections=${3:-64}
batch=${4:-32}
root=$(cd "$(dirname "$0")/../.." && pwd)
model=${KILN_BENCH_MODEL:-$root/../shared/testdata/models/onnx_light_zoo/light_squeezenet.onnx}
input=${KILN_BENCH_INPUT:-data_0}
row_shape=${KILN_BENCH_ROW_SHAPE:-3,224,224}
kiln="$build/tools/kiln/kiln"
work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$work"' EXIT

mkdir -p "$work/m/1"
"$build/bench/serving/serving_bench_model" dynamic-batch "$model" "$work/m/1/model.onnx"
cat > "$work/models.config" <<CONFIG
model_config_list { config { name: "m" base_path: "$work/m" model_platform: "onnx" } }
CONFIG
cat > "$work/batching.config" <<CONFIG
max_batch_size { value: $batch }
allowed_batch_sizes: $batch
batch_timeout_micros { value: ${KILN_BATCH_TIMEOUT_MICROS:-20000} }
num_batch_threads { value: ${KILN_NUM_BATCH_THREADS:-1} }
max_enqueued_batches { value: 1000 }
${KILN_BATCHING_EXTRA:-}
CONFIG

offline() {
  "$kiln" run "$work/m/1/model.onnx" --bench --batch "$batch" --seconds "$seconds" --json \
    | sed -n 's/.*"items_per_s": \([0-9.]*\).*/\1/p'
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)  cores: $(nproc)"
offline_1=$(offline)
echo "offline kiln run --bench --batch $batch: $offline_1 items/s"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$kiln" serve --port="$port" --model_config_file="$work/models.config" --enable_batching \
  --batching_parameters_file="$work/batching.config" ${KILN_SERVE_FLAGS:-} \
  > "$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 600); do
  grep -q "Running gRPC ModelServer" "$work/serve.log" && break
  sleep 0.1
done
# The first seconds (plan compilation for the batch size, connection setup) are not measured.
line=$("$build/bench/serving/serving_grpc_load" --target="127.0.0.1:$port" --model=m \
  --input="$input" --shape="$row_shape" --rows=1 --connections="$connections" \
  --warmup_seconds=5 --seconds="$seconds") || { echo "$line"; cat "$work/serve.log"; exit 1; }
echo "server (gRPC, 1 row/request, $connections connections): $line"
kill -TERM $server
wait $server
server=

offline_2=$(offline)
echo "offline kiln run --bench --batch $batch (again): $offline_2 items/s"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
rows_per_s=$(echo "$line" | sed -n 's/.*rows_per_s=\([0-9.]*\).*/\1/p')
python3 -c "
served = $rows_per_s
offline = ($offline_1 + $offline_2) / 2
print(f'served/offline = {served:.1f} / {offline:.1f} = {served / offline:.3f}')
"
