#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR/fuzz for SECONDS each (default 30), each with its
# own corpus folder under BUILD_DIR/fuzz/corpus/<name> (kept between runs, so coverage grows).
# Exits non-zero when any target finds a crash, a leak or a timeout; the reproducer is left in
# BUILD_DIR/fuzz/artifacts/<name>/.
#   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DKILN_BUILD_FUZZERS=ON
#   cmake --build build-fuzz --target fuzzers -j2 && scripts/run-fuzzers.sh build-fuzz 60
set -uo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [SECONDS]" >&2
  exit 2
fi
build_dir=$1
seconds=${2:-30}
fuzz_dir="$build_dir/fuzz"
if [ ! -d "$fuzz_dir" ]; then
  echo "run-fuzzers: $fuzz_dir does not exist (configure with -DKILN_BUILD_FUZZERS=ON, clang)" >&2
  exit 2
fi

targets=()
for exe in "$fuzz_dir"/*_fuzz; do
  [ -x "$exe" ] && [ -f "$exe" ] && targets+=("$exe")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "run-fuzzers: no *_fuzz executables in $fuzz_dir (build the 'fuzzers' target)" >&2
  exit 2
fi

failed=()
for exe in "${targets[@]}"; do
  name=$(basename "$exe")
  corpus="$fuzz_dir/corpus/$name"
  artifacts="$fuzz_dir/artifacts/$name"
  mkdir -p "$corpus" "$artifacts"
  echo "== $name: ${seconds}s"
  if "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" \
      > "$fuzz_dir/$name.log" 2>&1; then
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$fuzz_dir/$name.log" | tr '\n' ' '
    echo
  else
    echo "   FAILED: see $fuzz_dir/$name.log and $artifacts/"
    tail -n 30 "$fuzz_dir/$name.log"
    failed+=("$name")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "run-fuzzers: ${#failed[@]} target(s) failed: ${failed[*]}"
  exit 1
fi
echo "run-fuzzers: all ${#targets[@]} target(s) ran ${seconds}s without a finding"
