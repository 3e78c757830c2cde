#!/usr/bin/env bash
# First-request latency with and without model warmup. For each setting, starts `kiln serve`
# on a model whose version folder has assets.extra/tf_serving_warmup_requests, connects one
# gRPC client, times its first Predict, then the p50 of the next N (sequential) requests.
# Target (issue 5): with warmup, first <= 2 x p50.
# Then $KILN_BENCH_LATER_CLIENTS (default 5) new clients connect to the warm server the same
# way and time their first Predict: first_over_later_conn_first compares like with like (a
# connection's first Predict on the just-loaded server vs on the warm one). Connection setup
# (connect_us), the GetModelStatus call (status_us) and the client's own first Predict call
# (prime_us: --prime_client, a Predict for an unknown model that the server answers NOT_FOUND
# from its model lookup) all come before the timed first Predict, and are printed.
#
# Usage: bench/serving/run_warmup_bench.sh [BUILD_DIR] [N] [TRIALS]
# Each setting runs TRIALS fresh servers (default 3): a single first request is one sample.
# Model: $KILN_BENCH_MODEL (ONNX; default light_squeezenet from the shared test data), input
# $KILN_BENCH_INPUT, row shape $KILN_BENCH_ROW_SHAPE; the warmup file holds one request of one
# row, the same shape the client sends.
set -euo pipefail
build=${1:-build}
requests=${2:-1000}
trials=${3:-3}
later_clients=${KILN_BENCH_LATER_CLIENTS:-5}
root=$(cd "$(dirname "$0")/../.." && pwd)
model=${KILN_BENCH_MODEL:-$root/../shared/testdata/models/onnx_light_zoo/light_squeezenet.onnx}
input=${KILN_BENCH_INPUT:-data_0}
row_shape=${KILN_BENCH_ROW_SHAPE-3,112,112}
# Rows per request. Warmup compiles plans for the shapes of its records only, so the client must
# send a shape the warmup file holds (a new shape compiles a plan on the request path, warmup or
# not): half_plus_two's own file holds x of shape [3,1], hence KILN_BENCH_ROWS=3
# KILN_BENCH_ROW_SHAPE=1 for it.
rows=${KILN_BENCH_ROWS:-1}
kiln="$build/tools/kiln/kiln"
work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$work"' EXIT

if [ -n "${KILN_BENCH_BASE_PATH:-}" ]; then
  # A model directory as it is (its own warmup file), e.g. examples/models/half_plus_two_savedmodel
  # with KILN_BENCH_INPUT=x KILN_BENCH_ROWS=3 KILN_BENCH_ROW_SHAPE=1 (the shape of its warmup
  # record).
  cat > "$work/models.config" <<CONFIG
model_config_list { config { name: "m" base_path: "$KILN_BENCH_BASE_PATH"
  model_platform: "${KILN_BENCH_PLATFORM:-tensorflow}" } }
CONFIG
else
  mkdir -p "$work/m/1/assets.extra"
  "$build/bench/serving/serving_bench_model" dynamic-batch "$model" "$work/m/1/model.onnx" \
    --row_shape="$row_shape"
  "$build/bench/serving/serving_bench_model" warmup \
    "$work/m/1/assets.extra/tf_serving_warmup_requests" --model=m --input="$input" \
    --shape="$rows${row_shape:+,$row_shape}"
  cat > "$work/models.config" <<CONFIG
model_config_list { config { name: "m" base_path: "$work/m" model_platform: "onnx" } }
CONFIG
fi

echo 'prometheus_config { enable: true path: "/metrics" }' > "$work/monitoring.config"
# The server's own request_latency sum (gRPC predict) for model m, in microseconds.
server_us() {
  awk '/^:tensorflow:serving:request_latency_sum\{model_name="m",API="predict",entrypoint="GRPC"/ {
    print $2 }' "$1"
}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)  cores: $(nproc)"
# Settings alternate trial by trial, so that a change in the machine's load mid-run hits both.
for trial in $(seq 1 "$trials"); do
for warmup in true false; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  rest=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  : > "$work/serve.log"
  "$kiln" serve --port="$port" --rest_api_port="$rest" --model_config_file="$work/models.config" \
    --monitoring_config_file="$work/monitoring.config" \
    --enable_model_warmup=$warmup ${KILN_SERVE_FLAGS:-} > "$work/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 1 600); do
    grep -q "Running gRPC ModelServer" "$work/serve.log" && break
    sleep 0.1
  done
  line=$("$build/bench/serving/serving_grpc_load" --target="127.0.0.1:$port" --model=m \
    --input="$input" --shape="$row_shape" --rows="$rows" --sequential="$requests" --prime_client \
    --after_first="curl -s http://127.0.0.1:$rest/metrics > $work/after_first.txt") \
    || { echo "$line"; cat "$work/serve.log"; exit 1; }
  # Inside the server: the first request's time, and the mean of the ones after it.
  curl -s "http://127.0.0.1:$rest/metrics" > "$work/after_all.txt"
  server_first=$(server_us "$work/after_first.txt")
  server_mean=$(python3 -c "print(($(server_us "$work/after_all.txt") - $server_first) / $requests)")
  # Apples to apples: the first Predict of each new connection to the now warm server (after
  # the same connect + GetModelStatus) is the steady state of "a connection's first Predict".
  # The first client's first request is compared with their median as well as with its own p50,
  # so connection and client first-call costs (which warmup cannot remove, being paid by every
  # new connection) are not counted against warmup and not hidden either.
  : > "$work/later.txt"
  for later in $(seq 1 "$later_clients"); do
    curl -s "http://127.0.0.1:$rest/metrics" > "$work/before_later.txt"
    "$build/bench/serving/serving_grpc_load" --target="127.0.0.1:$port" --model=m \
      --input="$input" --shape="$row_shape" --rows="$rows" --sequential=20 --prime_client \
      --after_first="curl -s http://127.0.0.1:$rest/metrics > $work/after_later.txt" \
      | sed -n 's/.*first_us=\([0-9]*\).*/\1/p' | tr '\n' ' ' >> "$work/later.txt"
    python3 -c "print($(server_us "$work/after_later.txt") - $(server_us "$work/before_later.txt"))" \
      >> "$work/later.txt"
  done
  later=$(python3 -c "
import statistics, sys
rows = [l.split() for l in open('$work/later.txt') if l.strip()]
print('later_conn_first_us=%.0f later_conn_server_first_us=%.1f' % (
    statistics.median(float(r[0]) for r in rows), statistics.median(float(r[1]) for r in rows)))")
  # New connections from one warm client process: a connection's first Predict once the
  # client's own first-call costs are paid (fresh_conn_first_us vs fresh_conn_second_us).
  fresh=$("$build/bench/serving/serving_grpc_load" --target="127.0.0.1:$port" --model=m \
    --input="$input" --shape="$row_shape" --rows="$rows" --sequential=20 --prime_client \
    --fresh_connections=10 | grep -o 'fresh_conn_first_us=[0-9]* fresh_conn_second_us=[0-9]*')
  echo "enable_model_warmup=$warmup trial $trial: $line $later $fresh" \
    "server_first_us=$server_first server_mean_us=$server_mean" \
    | tee -a "$work/results.txt"
  kill -TERM $server
  wait $server
  server=
done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
# One first request is one sample, and on a busy machine a single sample can land on a
# scheduling hiccup (see p99): the medians over the trials are the figures to quote.
python3 - "$work/results.txt" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    setting = line.split(" trial")[0]
    values = dict(re.findall(r"(\w+)=([\d.]+)", line.split(": ", 1)[1]))
    rows.setdefault(setting, []).append(values)
for setting, values in rows.items():
    med = lambda key: statistics.median(float(v[key]) for v in values)
    print(f"{setting}: median over {len(values)} trials: first_us={med('first_us'):.0f} "
          f"p50_us={med('p50_us'):.0f} first_over_p50={med('first_over_p50'):.2f} "
          f"connect_us={med('connect_us'):.0f} status_us={med('status_us'):.0f} "
          f"prime_us={med('prime_us'):.0f} "
          f"later_conn_first_us={med('later_conn_first_us'):.0f} "
          f"first_over_later_conn_first="
          f"{statistics.median(float(v['first_us']) / float(v['later_conn_first_us']) for v in values):.2f} "
          f"server_first_us={med('server_first_us'):.0f} server_mean_us={med('server_mean_us'):.1f} "
          f"later_conn_server_first_us={med('later_conn_server_first_us'):.0f} "
          f"fresh_conn_first_us={med('fresh_conn_first_us'):.0f} "
          f"fresh_conn_second_us={med('fresh_conn_second_us'):.0f}")
PY
