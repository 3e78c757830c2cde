#!/bin/bash
# A/B of two Kiln binaries against ONNX Runtime on CNNs, interleaved: per round, per model,
# Kiln BEFORE and AFTER (each native and --isa avx2), then ORT 1.30 (ort_bench.js), with the
# commands of run_runtime_peers.sh (2 threads, 2 s each). One JSON line per measurement,
# tagged with round, model, runtime and the 1-minute load average, into OUT.
#
#   KILN_BEFORE=/tmp/kiln_old KILN_AFTER=build/tools/kiln/kiln \
#     TV_MODELS=DIR bench/peers/layout_ab.sh OUT.jsonl
#
# TV_MODELS: a folder with export_runtime_models.py's resnet18.onnx and mobilenet_v2.onnx
# (batch 1 and 32); the Caffe2 models of ../shared/testdata/models/onnx_light_zoo have a fixed
# batch of 1 and run at batch 1 only.
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${1:?usage: layout_ab.sh OUT.jsonl}"; : > "$OUT"
: "${KILN_BEFORE:?}" "${KILN_AFTER:?}" "${TV_MODELS:?}"
ZOO="$ROOT/../shared/testdata/models/onnx_light_zoo"
declare -A M=(
 [resnet18]=$TV_MODELS/resnet18.onnx
 [mobilenet_v2]=$TV_MODELS/mobilenet_v2.onnx
 [light_resnet50]=$ZOO/light_resnet50.onnx
 [light_inception_v1]=$ZOO/light_inception_v1.onnx
 [light_squeezenet]=$ZOO/light_squeezenet.onnx
)
ORDER="${ORDER:-light_resnet50 light_inception_v1 light_squeezenet resnet18 mobilenet_v2}"
echo "{\"uptime_start\": \"$(uptime)\"}" >> "$OUT"
for round in 1 2; do
 for m in $ORDER; do
  f=${M[$m]}
  case $m in light_*) B=1 ;; *) B=1,32 ;; esac
  for rt in before after before_avx2 after_avx2 ort; do
   load=$(cut -d' ' -f1 /proc/loadavg)
   case $rt in
    before) cmd=("$KILN_BEFORE" run $f --bench --random_inputs --batch $B --threads 2 --json --seconds 2) ;;
    after) cmd=("$KILN_AFTER" run $f --bench --random_inputs --batch $B --threads 2 --json --seconds 2) ;;
    before_avx2) cmd=("$KILN_BEFORE" run $f --bench --random_inputs --batch $B --threads 2 --json --seconds 2 --isa avx2) ;;
    after_avx2) cmd=("$KILN_AFTER" run $f --bench --random_inputs --batch $B --threads 2 --json --seconds 2 --isa avx2) ;;
    ort) cmd=(node $ROOT/bench/peers/ort_bench.js $f --batch $B --threads 2 --seconds 2) ;;
   esac
   "${cmd[@]}" 2>/dev/null | grep '^{' | while read -r line; do
     echo "{\"round\": $round, \"model\": \"$m\", \"rt\": \"$rt\", \"load1\": $load, \"r\": $line}" >> "$OUT"
   done
  done
 done
done
echo "{\"uptime_end\": \"$(uptime)\"}" >> "$OUT"
