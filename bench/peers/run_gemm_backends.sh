#!/bin/bash
# fp32 GEMM backends (issue 9, item 5): the 1024-4096-4096-1024 MLP (100 MB of fp32 weights)
# on Kiln with the backend chosen per ISA (gemm_backend.h), on Kiln forced to oneDNN (what
# every MatMul ran before), and capped to AVX2 also forced to OpenBLAS and to Kiln's packed
# kernel (gemm_avx2_packed.h), on ONNX Runtime 1.30, at the CPU's ISA and capped to AVX2, with
# OpenBLAS's sgemm rate (2048^3) as the machine's GEMM rate; batch-1 p50 and batch-32 items/s,
# 2 intra-op threads, every configuration interleaved in each round.
#
#   bench/peers/run_gemm_backends.sh OUTDIR [ROUNDS]
#
# Needs build/tools/kiln/kiln and onnxruntime-node (see run_runtime_peers.sh). The AVX2 rows
# set KILN_MAX_ISA=avx2 (Kiln and oneDNN) and OPENBLAS_CORETYPE=Haswell (OpenBLAS picks its
# kernels when it loads); ONNX Runtime has no ISA cap (its MLAS dispatches on CPUID), so it
# runs uncapped in both. Prints one JSON line per measurement and a summary table.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${1:?usage: run_gemm_backends.sh OUTDIR [ROUNDS]}"
ROUNDS="${2:-2}"
SECONDS_PER="${SECONDS_PER:-3}"
THREADS="${THREADS:-2}"
KILN="${KILN:-$ROOT/build/tools/kiln/kiln}"
PACKED_BENCH="${PACKED_BENCH:-$ROOT/build/bench/kernels/kernels_gemm_packed_bench}"
PY=/usr/bin/python3
[ -x "$KILN" ] || { echo "missing $KILN" >&2; exit 1; }
mkdir -p "$OUT/models"
MODEL="$OUT/models/mlp.onnx"
[ -f "$MODEL" ] || $PY "$ROOT/bench/peers/export_runtime_models.py" "$OUT/models" --models mlp \
  2>&1 | grep -v -i warn >&2 || true
RAW="$OUT/raw.jsonl"
: > "$RAW"
: > "$OUT/packed_kernel.txt"

# Runs a command and tags each JSON line it prints.
record() {
  local config="$1" round="$2"; shift 2
  local line
  "$@" 2>"$OUT/stderr_${config}_${round}.txt" | while read -r line; do
    case "$line" in
      \{*) echo "{\"config\": \"$config\", \"round\": $round, \"load\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"result\": $line}" >> "$RAW" ;;
    esac
  done
}

# kiln_run [VAR=value...]: Kiln on the MLP with those environment variables.
kiln_run() {
  env "$@" "$KILN" run "$MODEL" --bench --random_inputs --batch 1,32 --threads "$THREADS" \
    --json --seconds "$SECONDS_PER"
}
# sgemm_rate [VAR=value...]: NumPy's float32 matmul is cblas_sgemm of libblas.so.3 (OpenBLAS's
# OpenMP build where Debian's alternatives point at it, as scripts/install-deps.sh leaves them).
sgemm_rate() {
  env "$@" OMP_NUM_THREADS="$THREADS" $PY -c '
import time, numpy as np
a = np.ones((2048, 2048), np.float32); b = np.ones((2048, 2048), np.float32); a @ b
best = 1e9
for _ in range(5):
    t = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - t)
print("{\"gflops\": %.1f}" % (2 * 2048**3 / best / 1e9))'
}

echo "{\"uptime_start\": \"$(uptime)\", \"isa\": \"$(grep -o 'avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')\"}" > "$OUT/load.json"
for round in $(seq 1 "$ROUNDS"); do
  echo "round $round ($(cut -d' ' -f1-3 /proc/loadavg))" >&2
  record kiln_native "$round" kiln_run
  record kiln_native_onednn "$round" kiln_run KILN_GEMM_BACKEND=onednn
  record kiln_avx2 "$round" kiln_run KILN_MAX_ISA=avx2 OPENBLAS_CORETYPE=Haswell
  record kiln_avx2_onednn "$round" kiln_run KILN_MAX_ISA=avx2 KILN_GEMM_BACKEND=onednn
  record kiln_avx2_openblas "$round" kiln_run KILN_MAX_ISA=avx2 OPENBLAS_CORETYPE=Haswell \
    KILN_GEMM_BACKEND=openblas
  record kiln_avx2_packed "$round" kiln_run KILN_MAX_ISA=avx2 KILN_GEMM_BACKEND=packed
  record ort "$round" node "$ROOT/bench/peers/ort_bench.js" "$MODEL" --batch 1,32 \
    --threads "$THREADS" --seconds "$SECONDS_PER"
  record sgemm_native "$round" sgemm_rate
  record sgemm_haswell "$round" sgemm_rate OPENBLAS_CORETYPE=Haswell
  # The packed kernel beside OpenBLAS (Haswell kernels) on the MLP's shapes and 2048^3.
  if [ -x "$PACKED_BENCH" ]; then
    echo "round $round, load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/packed_kernel.txt"
    OPENBLAS_CORETYPE=Haswell "$PACKED_BENCH" "$THREADS" 3 >> "$OUT/packed_kernel.txt"
  fi
done
echo "{\"uptime_end\": \"$(uptime)\"}" >> "$OUT/load.json"
grep -h "fp32 GEMM" "$OUT"/stderr_kiln_*_1.txt | sort -u > "$OUT/decisions.txt" || true

$PY - "$RAW" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
p50, ips, gf = {}, {}, {}
for r in rows:
    res, c = r["result"], r["config"]
    if "gflops" in res:
        gf.setdefault(c, []).append(res["gflops"])
    elif res.get("batch") == 1:
        p50.setdefault(c, []).append(res["p50_ms"])
    elif res.get("batch") == 32:
        ips.setdefault(c, []).append(res["items_per_s"])
flops = 2 * (1024 * 4096 + 4096 * 4096 + 4096 * 1024)  # per item
med = lambda v: statistics.median(v) if v else float("nan")
print(f"{'config':20} {'b1 p50 ms':>10} {'b32 items/s':>12} {'b32 GFLOP/s':>12}  rounds")
for c in ("kiln_native", "kiln_native_onednn", "kiln_avx2", "kiln_avx2_onednn",
          "kiln_avx2_openblas", "kiln_avx2_packed", "ort"):
    print(f"{c:20} {med(p50.get(c, [])):10.3f} {med(ips.get(c, [])):12.1f} "
          f"{med(ips.get(c, [])) * flops / 1e9:12.1f}  p50 {p50.get(c)} ips {ips.get(c)}")
for c in ("sgemm_native", "sgemm_haswell"):
    print(f"{c:20} OpenBLAS sgemm 2048^3: {med(gf.get(c, [])):.1f} GFLOP/s {gf.get(c)}")
PYEOF
cat "$OUT/packed_kernel.txt"
