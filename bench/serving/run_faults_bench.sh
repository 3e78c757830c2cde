#!/usr/bin/env bash
# Version transitions and config reloads under load: zero failed requests expected.
# `kiln serve` (batching on, polling every second) serves half_plus_two (ONNX) while the gRPC
# load generator and wrk (REST) send predictions; meanwhile a new version appears (t=3 s), the
# config file gains a model (t=6 s), another version appears (t=9 s) and the config drops the
# added model again (t=12 s). Prints both load generators' counts and the server's log of the
# transitions; exits 1 when any request failed.
#
# Usage: bench/serving/run_faults_bench.sh [BUILD_DIR] [SECONDS>=15] [CONNECTIONS]
# With $KILN_BENCH_MODEL (an ONNX file, made batchable by serving_bench_model dynamic-batch;
# input $KILN_BENCH_INPUT, row shape $KILN_BENCH_ROW_SHAPE) that model is served instead, to
# gRPC only (one row per request), so that loads and unloads take real time under load.
set -euo pipefail
build=${1:-build}
seconds=${2:-15}
connections=${3:-16}
root=$(cd "$(dirname "$0")/../.." && pwd)
kiln="$build/tools/kiln/kiln"
work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$work"' EXIT

model="$root/examples/models/half_plus_two/1/model.onnx"
input=x
row_shape=1
rows=3
if [ -n "${KILN_BENCH_MODEL:-}" ]; then
  input=${KILN_BENCH_INPUT:-data_0}
  row_shape=${KILN_BENCH_ROW_SHAPE:-3,112,112}
  rows=1
  model="$work/model.onnx"
  "$build/bench/serving/serving_bench_model" dynamic-batch "$KILN_BENCH_MODEL" "$model" \
    --row_shape="$row_shape"
fi
mkdir -p "$work/half_plus_two/1"
cp "$model" "$work/half_plus_two/1/model.onnx"
entry() {
  echo "config { name: \"$1\" base_path: \"$2\" model_platform: \"onnx\" }"
}
echo "model_config_list { $(entry half_plus_two "$work/half_plus_two") }" > "$work/models.config"
cat > "$work/batching.config" <<CONFIG
max_batch_size { value: 32 }
batch_timeout_micros { value: 1000 }
num_batch_threads { value: 2 }
CONFIG
# A new version is written next to the base path and renamed into it, so that the poller never
# sees a half-copied folder (as TF Serving's docs advise for exports).
add_version() {
  mkdir -p "$work/staging"
  cp "$model" "$work/staging/model.onnx"
  mv "$work/staging" "$work/half_plus_two/$1"
}

grpc_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
rest_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$kiln" serve --port="$grpc_port" --rest_api_port="$rest_port" \
  --model_config_file="$work/models.config" --model_config_file_poll_wait_seconds=1 \
  --file_system_poll_wait_seconds=1 --enable_batching \
  --batching_parameters_file="$work/batching.config" ${KILN_SERVE_FLAGS:-} \
  > "$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$rest_port/v1/models/half_plus_two" > /dev/null && break
  sleep 0.1
done
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)  cores: $(nproc)"

"$build/bench/serving/serving_grpc_load" --target="127.0.0.1:$grpc_port" --model=half_plus_two \
  --input="$input" --shape="$row_shape" --rows="$rows" --connections="$connections" \
  --seconds="$seconds" > "$work/grpc.txt" 2>&1 &
grpc_load=$!
rest_load=
if [ -z "${KILN_BENCH_MODEL:-}" ]; then
  KILN_BODY='{"instances": [[1.0], [2.0], [5.0]]}' wrk -t2 -c"$connections" -d"${seconds}s" \
    --latency -s "$root/bench/serving/predict.lua" \
    "http://127.0.0.1:$rest_port/v1/models/half_plus_two:predict" > "$work/wrk.txt" 2>&1 &
  rest_load=$!
fi

sleep 3
add_version 2
sleep 3
echo "model_config_list { $(entry half_plus_two "$work/half_plus_two")
  $(entry penguin_tabular "$root/examples/models/penguin_tabular") }" > "$work/models.config.new"
mv "$work/models.config.new" "$work/models.config"
sleep 3
add_version 3
sleep 3
echo "model_config_list { $(entry half_plus_two "$work/half_plus_two") }" \
  > "$work/models.config.new"
mv "$work/models.config.new" "$work/models.config"

failed=0
wait $grpc_load || failed=1
grpc_line=$(grep '^requests=' "$work/grpc.txt" || cat "$work/grpc.txt")
echo "gRPC ($connections connections, $rows rows): $grpc_line"
if [ -n "$rest_load" ]; then
  wait $rest_load || failed=1
  rest_line=$(grep '^requests=' "$work/wrk.txt" || cat "$work/wrk.txt")
  echo "REST ($connections connections, $rows rows): $rest_line"
  grep -q "errors_non2xx=0 socket_errors=0" <<< "$rest_line" || failed=1
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "server log:"
grep -E "available|unloaded|reloaded|failed" "$work/serve.log" | sed 's/^/  /'
status=$(curl -s "http://127.0.0.1:$rest_port/v1/models/half_plus_two")
echo "final status: $(tr -d '\n ' <<< "$status")"
kill -TERM $server
wait $server
server=
exit $failed
