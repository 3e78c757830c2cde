#!/usr/bin/env bash
# Server-side batching against the offline runtime, in one run: the same model and batch size,
# first `kiln run --bench` (offline items/s), then `kiln serve` with batching driven by the
# gRPC load generator (one row per request, enough connections to keep batches full), then
# `kiln run --bench` again; prints the server's rows/s over the mean offline items/s.
#
# Usage: bench/serving/run_batching_bench.sh [BUILD_DIR] [SECONDS] [CONNECTIONS] [BATCH]
# Model: $KILN_BENCH_MODEL (an ONNX file; default light_squeezenet from the shared test data,
# made batchable by serving_bench_model dynamic-batch), input $KILN_BENCH_INPUT with row shape
# $KILN_BENCH_ROW_SHAPE (default 3,112,112: squeezenet is fully convolutional, and smaller
# images keep the run short on a small machine). Extra `kiln serve` flags: $KILN_SERVE_FLAGS;
# batching parameters beyond max_batch_size/allowed_batch_sizes: $KILN_BATCHING_EXTRA (text
# proto lines).
set -euo pipefail
build=${1:-build}
seconds=${2:-20}
connections=${3:-64}
batch=${4:-32}
root=$(cd "$(dirname "$0")/../.." && pwd)
model=${KILN_BENCH_MODEL:-$root/../shared/testdata/models/onnx_light_zoo/light_squeezenet.onnx}
input=${KILN_BENCH_INPUT:-data_0}
row_shape=${KILN_BENCH_ROW_SHAPE:-3,112,112}
kiln="$build/tools/kiln/kiln"
work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$work"' EXIT

mkdir -p "$work/m/1"
"$build/bench/serving/serving_bench_model" dynamic-batch "$model" "$work/m/1/model.onnx" \
  --row_shape="$row_shape"
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

# "sum_us count" of the server's runtime_latency (time inside the runtime, one observation per
# batch): how busy the batch thread kept the model, and how long its batches took.
runtime_latency() {
  curl -s "http://127.0.0.1:$rest/metrics" | awk '
    /^:tensorflow:serving:runtime_latency_sum\{model_name="m"/ { sum = $2 }
    /^:tensorflow:serving:runtime_latency_count\{model_name="m"/ { count = $2 }
    END { print sum + 0, count + 0 }'
}

# CPU seconds (user + system) a process used so far.
cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}

# Prints "items_per_s runs cpu_seconds" of an offline run. On a shared machine the two sides
# may get different shares of the cores, so the script also compares items per CPU-second.
offline() {
  /usr/bin/time -f "%U %S" -o "$work/time.txt" \
    "$kiln" run "$work/m/1/model.onnx" --bench --random_inputs --batch "$batch" --json "$@" \
    > "$work/offline.json"
  local ips runs
  ips=$(sed -n 's/.*"items_per_s": \([0-9.]*\).*/\1/p' "$work/offline.json")
  runs=$(sed -n 's/.*"runs": \([0-9]*\).*/\1/p' "$work/offline.json")
  if [ -z "$ips" ]; then
    echo "kiln run failed: $(cat "$work/offline.json" "$work/time.txt")" >&2
    exit 1
  fi
  echo "$ips $runs $(awk '{ print $1 + $2 }' "$work/time.txt")"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)  cores: $(nproc)"
# Model load, compilation and the untimed first run, so that per-CPU figures count timed runs
# only: a run with one timed iteration costs this plus one run.
fixed=$(offline --iterations 1)
read -r _ _ cpu_fixed <<< "$fixed"
first=$(offline --seconds "$seconds")
read -r offline_1 runs_1 cpu_1 <<< "$first"
echo "offline kiln run --bench --batch $batch: $offline_1 items/s ($runs_1 runs, $cpu_1 CPU-s)"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
rest=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo 'prometheus_config { enable: true path: "/metrics" }' > "$work/monitoring.config"
: > "$work/serve.log"
"$kiln" serve --port="$port" --rest_api_port="$rest" --model_config_file="$work/models.config" \
  --enable_batching --batching_parameters_file="$work/batching.config" \
  --monitoring_config_file="$work/monitoring.config" ${KILN_SERVE_FLAGS:-} \
  > "$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 600); do
  grep -q "Running gRPC ModelServer" "$work/serve.log" && break
  sleep 0.1
done
# The first seconds (plan compilation for the batch size, connection setup) are not measured.
warmup=5
"$build/bench/serving/serving_grpc_load" --target="127.0.0.1:$port" --model=m \
  --input="$input" --shape="$row_shape" --rows=1 --connections="$connections" \
  --warmup_seconds=$warmup --seconds="$seconds" > "$work/load.txt" 2>&1 &
load=$!
sleep $warmup
server_cpu_start=$(cpu_seconds $server)
read -r runtime_sum_start runtime_count_start <<< "$(runtime_latency)"
sleep "$seconds"
server_cpu=$(echo "$(cpu_seconds $server) - $server_cpu_start" | bc)
read -r runtime_sum_end runtime_count_end <<< "$(runtime_latency)"
wait $load || { cat "$work/load.txt"; cat "$work/serve.log"; exit 1; }
line=$(grep '^requests=' "$work/load.txt")
echo "server (gRPC, 1 row/request, $connections connections): $line cpu_s=$server_cpu"
kill -TERM $server
wait $server
server=

second=$(offline --seconds "$seconds")
read -r offline_2 runs_2 cpu_2 <<< "$second"
echo "offline kiln run --bench --batch $batch (again): $offline_2 items/s ($runs_2 runs, $cpu_2 CPU-s)"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
rows_per_s=$(echo "$line" | sed -n 's/.*rows_per_s=\([0-9.]*\).*/\1/p')
python3 -c "
served = $rows_per_s
offline = ($offline_1 + $offline_2) / 2
print(f'served/offline throughput = {served:.1f} / {offline:.1f} items/s = {served / offline:.3f}')
served_per_cpu = served * $seconds / $server_cpu
# (cpu_fixed covers load + first run + one timed run: runs_i - 1 runs remain in cpu_i - fixed)
offline_per_cpu = ($runs_1 + $runs_2 - 2) * $batch / ($cpu_1 + $cpu_2 - 2 * $cpu_fixed)
print(f'per CPU-second: served {served_per_cpu:.1f} / offline {offline_per_cpu:.1f} items = '
      f'{served_per_cpu / offline_per_cpu:.3f} (server CPU share {$server_cpu / $seconds:.2f} cores)')
# Where the served throughput goes: the share of the window the runtime was running a batch,
# and how long a batch took inside the server vs offline (1000 * batch / items_per_s).
batches = $runtime_count_end - $runtime_count_start
busy = ($runtime_sum_end - $runtime_sum_start) / 1e6 / $seconds
served_batch_ms = ($runtime_sum_end - $runtime_sum_start) / 1e3 / max(batches, 1)
offline_batch_ms = 1000 * $batch / offline
print(f'runtime busy {busy:.3f} of the window ({batches} batches); batch run time: served '
      f'{served_batch_ms:.1f} ms / offline {offline_batch_ms:.1f} ms = '
      f'{offline_batch_ms / served_batch_ms:.3f} speed ratio')
"
