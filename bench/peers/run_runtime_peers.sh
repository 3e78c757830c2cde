#!/bin/bash
# Runtime peers (issue 3 targets): Kiln vs ONNX Runtime 1.30 (onnxruntime-node) vs PyTorch
# (Debian's python3-torch), 2 intra-op threads each, batch 1 latency p50 and batch 32
# throughput, measured interleaved in one run; plus a large MatMul vs dnnl_sgemm.
#
#   bench/peers/run_runtime_peers.sh OUTDIR [ROUNDS]
#
# Needs: build/tools/kiln/kiln and build/bench/runtime/runtime_matmul_bench built;
# (cd bench/peers && npm install --ignore-scripts onnxruntime-node@1.30.0).
# Writes OUTDIR/models/*.onnx, OUTDIR/raw.jsonl (every measurement), OUTDIR/summary.json and
# prints a table. Env: MODELS (default "resnet18 mobilenet_v2 bert4 mlp dlrm"), SECONDS_PER (2),
# THREADS (2), RUNTIMES (default "kiln ort torch"; on an AVX-512 machine "kiln_avx2 ort_avx2"
# add both runtimes' AVX2 paths: each runs under cpuid_cap/as_avx2_cpu.sh, where CPUID reports
# no AVX-512, and Kiln also gets --isa=avx2). Each model's GFLOP/s (from
# model_flops.py) is printed beside the machine's measured GEMM rate (dnnl_sgemm, 2048^3). Each figure is the median over rounds of
# one process's p50 / items/s (>= 10 timed runs and SECONDS_PER seconds; PyTorch >= 3 runs, as
# Debian's build does BERT-4 at batch 32 in ~16 s a run).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${1:?usage: run_runtime_peers.sh OUTDIR [ROUNDS]}"
ROUNDS="${2:-2}"
MODELS="${MODELS:-resnet18 mobilenet_v2 bert4 mlp dlrm}"
SECONDS_PER="${SECONDS_PER:-2}"
THREADS="${THREADS:-2}"
RUNTIMES="${RUNTIMES:-kiln ort torch}"
KILN="${KILN:-$ROOT/build/tools/kiln/kiln}"  # a copy, when the build may change under the run
MATMUL="${MATMUL:-$ROOT/build/bench/runtime/runtime_matmul_bench}"
PY=/usr/bin/python3
# The AVX2 runtimes run as on an AVX2-only CPU where the kernel can make CPUID fault
# (cpuid_cap/); elsewhere kiln_avx2 is Kiln's own --isa cap alone and ort_avx2 is skipped.
if grep -qw cpuid_fault /proc/cpuinfo; then
  AS_AVX2=("$ROOT/bench/peers/cpuid_cap/as_avx2_cpu.sh")
else
  AS_AVX2=()
  case " $RUNTIMES " in
    *" ort_avx2 "*) echo "no CPUID faulting on this machine: ort_avx2 is skipped" >&2 ;;
  esac
fi
for f in "$KILN" "$MATMUL"; do
  [ -x "$f" ] || { echo "missing $f: build it with /tmp/kb kiln runtime_matmul_bench" >&2; exit 1; }
done
[ -d "$ROOT/bench/peers/node_modules/onnxruntime-node" ] || {
  echo "missing onnxruntime-node: cd bench/peers && npm install --ignore-scripts onnxruntime-node@1.30.0" >&2
  exit 1
}
mkdir -p "$OUT/models"
RAW="$OUT/raw.jsonl"
: > "$RAW"
$PY "$ROOT/bench/peers/export_runtime_models.py" "$OUT/models" \
  --models "$(echo $MODELS | tr ' ' ','),matmul" 2>&1 | grep -v -i warn >&2 || true

# Appends each JSON line of a command's output, tagged with runtime, model and round.
record() {
  local runtime="$1" model="$2" round="$3"; shift 3
  local line
  "$@" 2>"$OUT/last_stderr.txt" | while read -r line; do
    case "$line" in
      \{*) echo "{\"runtime\": \"$runtime\", \"model\": \"$model\", \"round\": $round, \"result\": $line}" >> "$RAW" ;;
    esac
  done || { echo "$runtime $model failed:" >&2; cat "$OUT/last_stderr.txt" >&2; }
}

echo "{\"uptime_start\": \"$(uptime)\"}" > "$OUT/load.json"
for round in $(seq 1 "$ROUNDS"); do
  for model in $MODELS; do
    onnx="$OUT/models/$model.onnx"
    for runtime in $RUNTIMES; do
      echo "round $round: $runtime $model ($(cut -d' ' -f1-3 /proc/loadavg))" >&2
      case "$runtime" in
        kiln) record kiln "$model" "$round" "$KILN" run "$onnx" --bench --random_inputs \
                --batch 1,32 --threads "$THREADS" --json --seconds "$SECONDS_PER" ;;
        kiln_avx2) record kiln_avx2 "$model" "$round" "${AS_AVX2[@]}" "$KILN" run "$onnx" --bench \
                --random_inputs --batch 1,32 --threads "$THREADS" --json --seconds "$SECONDS_PER" \
                --isa avx2 ;;
        ort) record ort "$model" "$round" node "$ROOT/bench/peers/ort_bench.js" "$onnx" \
               --batch 1,32 --threads "$THREADS" --seconds "$SECONDS_PER" ;;
        ort_avx2) [ ${#AS_AVX2[@]} -gt 0 ] && record ort_avx2 "$model" "$round" "${AS_AVX2[@]}" node \
               "$ROOT/bench/peers/ort_bench.js" "$onnx" --batch 1,32 --threads "$THREADS" \
               --seconds "$SECONDS_PER" ;;
        torch) record torch "$model" "$round" $PY "$ROOT/bench/peers/torch_bench.py" "$onnx" \
                 --batch 1,32 --threads "$THREADS" --seconds "$SECONDS_PER" --min_runs 3 ;;
      esac
    done
  done
  for size in 1024 2048; do
    echo "round $round: matmul $size" >&2
    record kiln "matmul_$size" "$round" "$MATMUL" "$OUT/models/matmul_$size.onnx" --m "$size" \
      --threads "$THREADS" --seconds "$SECONDS_PER"
  done
done
echo "{\"uptime_end\": \"$(uptime)\"}" >> "$OUT/load.json"
$PY "$ROOT/bench/peers/model_flops.py" $(for m in $MODELS; do echo "$OUT/models/$m.onnx"; done) \
  > "$OUT/flops.jsonl"

$PY - "$RAW" "$OUT/summary.json" "$OUT/load.json" "$OUT/flops.jsonl" <<'PYEOF'
import json, os, statistics, sys
raw, summary_path, load_path, flops_path = sys.argv[1:5]
flops = {os.path.basename(j["model"])[:-5]: j["flops_per_item"]
         for j in map(json.loads, open(flops_path))}
rows = [json.loads(l) for l in open(raw) if l.strip()]
# (model, runtime, batch) -> lists across rounds
p50, ips, mm = {}, {}, {}
for r in rows:
    res = r["result"]
    if r["model"].startswith("matmul_"):
        mm.setdefault(r["model"], []).append(res)
        continue
    key = (r["model"], r["runtime"], res["batch"])
    p50.setdefault(key, []).append(res["p50_ms"])
    ips.setdefault(key, []).append(res["items_per_s"])
med = lambda v: statistics.median(v) if v else None
models = list(dict.fromkeys(r["model"] for r in rows if not r["model"].startswith("matmul_")))
summary = {"models": {}, "matmul": {}, "load": [json.loads(l) for l in open(load_path)]}
def ratio(a, b): return round(a / b, 2) if a and b else None
RTS = ("kiln", "kiln_avx2", "ort", "ort_avx2", "torch")
print(f"{'model':13} {'metric':12} {'kiln':>9} {'kiln_avx2':>9} {'ort':>9} {'ort_avx2':>9} "
      f"{'torch':>9} {'kiln/ort':>8} {'avx2/ort_avx2':>13} {'kiln/torch':>10} {'kiln GFLOP/s':>12}")
for m in models:
    entry = summary["models"].setdefault(m, {"gflop_per_item": flops.get(m, 0) / 1e9})
    for batch, metric, table, better_low in ((1, "b1 p50 ms", p50, True), (32, "b32 items/s", ips, False)):
        vals = {rt: med(table.get((m, rt, batch), [])) for rt in RTS}
        # Ratios are "times faster than the peer": > 1 means Kiln wins.
        if better_low:
            rat = lambda rt, peer: ratio(vals[peer], vals[rt])
            gflops = flops.get(m, 0) / 1e6 / vals["kiln"] if vals["kiln"] else None
        else:
            rat = lambda rt, peer: ratio(vals[rt], vals[peer])
            gflops = flops.get(m, 0) * vals["kiln"] / 1e9 if vals["kiln"] else None
        entry[metric] = {**vals, "kiln_vs_ort": rat("kiln", "ort"),
                         "kiln_avx2_vs_ort_avx2": rat("kiln_avx2", "ort_avx2"),
                         "kiln_vs_torch": rat("kiln", "torch"), "kiln_gflops": gflops,
                         "rounds": {rt: table.get((m, rt, batch), []) for rt in RTS}}
        f = lambda v: "-" if v is None else (f"{v:.3f}" if v < 100 else f"{v:.0f}")
        g = lambda v: "-" if v is None else f"{v:.2f}x"
        print(f"{m:13} {metric:12} {f(vals['kiln']):>9} {f(vals['kiln_avx2']):>9} {f(vals['ort']):>9} "
              f"{f(vals['ort_avx2']):>9} {f(vals['torch']):>9} {g(rat('kiln', 'ort')):>8} "
              f"{g(rat('kiln_avx2', 'ort_avx2')):>13} {g(rat('kiln', 'torch')):>10} {f(gflops):>12}")
for name, results in mm.items():
    k = statistics.median(r["kiln_gflops"] for r in results)
    s = statistics.median(r["dnnl_sgemm_gflops"] for r in results)
    summary["matmul"][name] = {"kiln_gflops": k, "dnnl_sgemm_gflops": s, "ratio": round(k / s, 3),
                               "rounds": results}
    print(f"{name:13} GFLOP/s kiln {k:.1f} vs dnnl_sgemm {s:.1f} ({k / s:.2f})")
for l in summary["load"]:
    print(next(iter(l.values())).strip())
json.dump(summary, open(summary_path, "w"), indent=1)
PYEOF
