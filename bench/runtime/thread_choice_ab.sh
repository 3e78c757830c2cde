#!/bin/bash
# Threads per step (issue 9 item 3): Kiln with KILN_THREAD_CHOICE=auto vs off, same run,
# interleaved (the order of the two alternates per round), batch-1 p50 and batch-32 items/s,
# on the native ISA and capped to AVX2; plus the batch-1 plan-compile cost from `kiln inspect`.
#
#   bench/runtime/thread_choice_ab.sh MODELDIR OUTDIR [ROUNDS]
#
# MODELDIR holds the .onnx files of bench/peers/export_runtime_models.py (MODELDIR/NAME.onnx).
# Env: MODELS (default "mobilenet_v2 resnet18 dlrm bert4"), THREADS (2), SECONDS_PER (2),
# ISAS (default "native avx2"), KILN (default build/tools/kiln/kiln; pass a copy when the build
# may change under the run). Writes OUTDIR/raw.jsonl and prints medians over rounds and the
# ratio auto/off (p50: < 1 is faster; items/s: > 1 is faster).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
MODELDIR="${1:?usage: thread_choice_ab.sh MODELDIR OUTDIR [ROUNDS]}"
OUT="${2:?usage: thread_choice_ab.sh MODELDIR OUTDIR [ROUNDS]}"
ROUNDS="${3:-2}"
MODELS="${MODELS:-mobilenet_v2 resnet18 dlrm bert4}"
THREADS="${THREADS:-2}"
SECONDS_PER="${SECONDS_PER:-2}"
ISAS="${ISAS:-native avx2}"
KILN="${KILN:-$ROOT/build/tools/kiln/kiln}"
mkdir -p "$OUT"
RAW="$OUT/raw.jsonl"
: > "$RAW"
echo "{\"uptime_start\": \"$(uptime)\", \"isa_flags\": \"$(grep -o 'avx512[a-z_]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')\"}" > "$OUT/load.json"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then modes="auto off"; else modes="off auto"; fi
  for model in $MODELS; do
    for isa in $ISAS; do
      # KILN_MAX_ISA (empty: the CPU's own) caps both `kiln run` and `kiln inspect`.
      cap=""
      [ "$isa" = native ] || cap="$isa"
      for mode in $modes; do
        load="$(cut -d' ' -f1 /proc/loadavg)"
        echo "round $round: $model $isa $mode (load $load)" >&2
        KILN_MAX_ISA=$cap KILN_THREAD_CHOICE=$mode "$KILN" run "$MODELDIR/$model.onnx" --bench --random_inputs \
          --batch 1,32 --threads "$THREADS" --json --seconds "$SECONDS_PER" \
          2>"$OUT/last_stderr.txt" | while read -r line; do
          case "$line" in
            \{*) echo "{\"model\": \"$model\", \"isa\": \"$isa\", \"mode\": \"$mode\", \"round\": $round, \"load\": $load, \"result\": $line}" >> "$RAW" ;;
          esac
        done
        # Batch-1 plan compile (the plan `kiln inspect` compiles) and what was chosen.
        KILN_MAX_ISA=$cap KILN_THREAD_CHOICE=$mode "$KILN" inspect "$MODELDIR/$model.onnx" 2>/dev/null |
          grep -o 'compiled in [0-9]* us\|threads per step.*' | tr '\n' ' ' |
          sed "s/^/{\"model\": \"$model\", \"isa\": \"$isa\", \"mode\": \"$mode\", \"round\": $round, \"inspect\": \"/; s/ *\$/\"}\n/" >> "$RAW"
      done
    done
  done
done
echo "{\"uptime_end\": \"$(uptime)\"}" >> "$OUT/load.json"
python3 - "$RAW" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
res = {}
for r in rows:
    if "result" not in r: continue
    k = (r["model"], r["isa"], r["result"]["batch"])
    res.setdefault(k, {}).setdefault(r["mode"], []).append(r["result"])
print(f"{'model':14} {'isa':6} {'batch':>5} {'metric':10} {'auto':>10} {'off':>10} {'auto/off':>8}")
for (model, isa, batch), modes in sorted(res.items()):
    metric = "p50_ms" if batch == 1 else "items_per_s"
    a = statistics.median(x[metric] for x in modes.get("auto", []))
    o = statistics.median(x[metric] for x in modes.get("off", []))
    print(f"{model:14} {isa:6} {batch:>5} {metric:10} {a:10.2f} {o:10.2f} {a / o:8.3f}")
for r in rows:
    if "inspect" in r and r["round"] == 1:
        print(r["model"], r["isa"], r["mode"], r["inspect"])
PY
