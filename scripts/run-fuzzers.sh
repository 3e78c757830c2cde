#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR/fuzz for SECONDS each (default 30), each with its
# own corpus folder under BUILD_DIR/fuzz/corpus/<name> (kept between runs, so coverage grows),
# seeded from fuzz/corpus_seeds/<name>/ and using fuzz/<name>.dict when those exist.
#
# Two modes:
#   default       a target stops at its first finding (crash, leak, timeout, out-of-memory,
#                 undefined behaviour); the script exits non-zero when any target found one.
#                 This is CI's smoke run (`make test`, CI_FUZZ_SECONDS) and `make fuzz`.
#   --keep-going  (`make fuzz-long`) a target that finds something is restarted on its corpus
#                 until its SECONDS are spent, so one shallow bug does not end a long run; each
#                 distinct finding (sanitizer report kind + first Kiln stack frame, or the
#                 fuzzer's own FINDING line) is minimized once. Exits 0: the summary reports.
# FUZZ_TARGETS="name_fuzz ..." limits the run to those targets; FUZZ_MINIMIZE_SECONDS (60) bounds
# the minimization of each finding.
# Per target it prints executions, exec/s, peak RSS and findings, and writes a markdown table
# (ready to paste into docs/performance/) to BUILD_DIR/fuzz/summary.md. Reproducers are left in
# BUILD_DIR/fuzz/artifacts/<name>/ (crash-*, oom-*, timeout-*; per distinct finding minimized-*
# or, where minimizing drifted to another bug, finding-*, the original); rerun one with
#   BUILD_DIR/fuzz/<name> BUILD_DIR/fuzz/artifacts/<name>/<file>
#
#   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DKILN_BUILD_FUZZERS=ON
#   cmake --build build-fuzz --target fuzzers -j2 && scripts/run-fuzzers.sh build-fuzz 60
set -uo pipefail

keep_going=0
args=()
for a in "$@"; do
  case "$a" in
    --keep-going) keep_going=1 ;;
    *) args+=("$a") ;;
  esac
done
if [ ${#args[@]} -lt 1 ]; then
  echo "usage: $0 [--keep-going] BUILD_DIR [SECONDS]" >&2
  exit 2
fi
build_dir=${args[0]}
seconds=${args[1]:-30}
minimize_seconds=${FUZZ_MINIMIZE_SECONDS:-60}
fuzz_dir="$build_dir/fuzz"
source_dir=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -d "$fuzz_dir" ]; then
  echo "run-fuzzers: $fuzz_dir does not exist (configure with -DKILN_BUILD_FUZZERS=ON, clang)" >&2
  exit 2
fi

# FUZZ_TARGETS="a_fuzz b_fuzz" runs only those.
targets=()
for exe in "$fuzz_dir"/*_fuzz; do
  if [ -n "${FUZZ_TARGETS:-}" ] && [[ " $FUZZ_TARGETS " != *" $(basename "$exe") "* ]]; then
    continue
  fi
  [ -x "$exe" ] && [ -f "$exe" ] && targets+=("$exe")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "run-fuzzers: no *_fuzz executables in $fuzz_dir (build the 'fuzzers' target)" >&2
  exit 2
fi

# Undefined behaviour is a finding, not a log line that scrolls by; leaks are findings too.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:symbolize=1}

# signature LOG: one line naming the finding in LOG, the same for every input that trips the
# same bug: the report kind and the first stack frame in Kiln's own code (not the sanitizer,
# libc, protobuf or the fuzz target's harness), or the fuzz target's own FINDING message with
# numbers blanked.
signature() {
  python3 - "$1" <<'EOF'
import re, sys
text = open(sys.argv[1], errors="replace").read()
m = re.search(r"^(\S+) FINDING: (.*)$", text, re.M)
if m:
    msg = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", m.group(2))
    print(f"{m.group(1)}: {msg[:160]}")
    sys.exit()
kind = None
m = re.search(r"terminate called after throwing an instance of '([^']+)'", text)
if m:
    kind = f"uncaught {m.group(1)}"
for pattern in (r"ERROR: libFuzzer: (out-of-memory \(malloc\(\d+\)\)|out-of-memory|timeout|"
                r"deadly signal|fuzz target exited|leak)",
                r"ERROR: (AddressSanitizer|LeakSanitizer): ([^\n]*)",
                r"runtime error: ([^\n]*)",
                r"==\d+==ERROR: (\w+): (.*)"):
    m = None if kind else re.search(pattern, text)
    if m:
        kind = " ".join(g.strip() for g in m.groups() if g)
        kind = re.sub(r" on (unknown )?address.*| pc .*|\([^)]*\)", "", kind)
        break
if kind is None:
    m = re.search(r"SUMMARY: (.*)", text)
    kind = m.group(1) if m else "unknown (no sanitizer report)"
kind = re.sub(r"malloc\(\d+\)", "malloc(huge)", kind)
kind = re.sub(r"0x[0-9a-f]+", "", kind)
kind = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "#", kind)
kind = re.sub(r"\s+", " ", kind).strip()[:120]
frames = []
skip = re.compile(r"(compiler-rt|libFuzzer|/fuzzer/|sanitizer|libc\.so|libstdc\+\+|"
                  r"__cxa|_Unwind|abort|raise|__assert|/usr/include/|absl/|google/protobuf|"
                  r"LLVMFuzzerTestOneInput|/fuzz/)")
for m in re.finditer(r"^\s*#\d+ 0x[0-9a-f]+ in (.+?) (/\S+)$", text, re.M):
    func, loc = m.group(1), m.group(2)
    if skip.search(func + " " + loc) or re.match(r"(void |auto )?(std::|decltype)", func):
        continue
    func = func.replace("(anonymous namespace)", "{anon}")
    func = re.sub(r"\(.*", "", func)
    loc = re.sub(r"^.*?/(src|include|tools)/", r"\1/", loc)
    frames.append(func + " " + re.sub(r":\d+$", "", loc))  # line, not column
# The first Kiln frame and the first caller outside core/: "Buffer::Allocate" alone would not
# say which kernel or pass asked for the tensor.
where = frames[:1]
for f in frames[1:]:
    if " src/core/" not in f:
        where.append(f)
        break
print(f"{kind} @ {' < '.join(where) or '?'}")
EOF
}

# stat LOG NAME: the last value of libFuzzer's final stat NAME in LOG, 0 when absent.
stat() {
  local v
  v=$(grep -E "^stat::$2:" "$1" | tail -n 1 | awk '{print $2}')
  echo "${v:-0}"
}

summary="$fuzz_dir/summary.md"
findings_md=$(mktemp)
{
  echo "| target | seconds | executions | exec/s | peak RSS (MB) | corpus | findings |"
  echo "|---|---:|---:|---:|---:|---:|---|"
} > "$summary"

failed=()
total_findings=0
for exe in "${targets[@]}"; do
  name=$(basename "$exe")
  corpus="$fuzz_dir/corpus/$name"
  artifacts="$fuzz_dir/artifacts/$name"
  logs="$fuzz_dir/logs/$name"
  mkdir -p "$corpus" "$artifacts" "$logs"
  rm -f "$logs"/run-*.log
  seeds="$source_dir/fuzz/corpus_seeds/$name"
  if [ -d "$seeds" ]; then cp -n "$seeds"/* "$corpus"/ 2>/dev/null; fi
  extra=()
  [ -f "$source_dir/fuzz/$name.dict" ] && extra+=("-dict=$source_dir/fuzz/$name.dict")
  echo "== $name: ${seconds}s$([ $keep_going = 1 ] && echo ', keep going after findings')"

  start=$(date +%s)
  executions=0
  peak_rss=0
  runs=0
  declare -A seen=()    # signature key -> occurrences
  declare -A text=()    # signature key -> signature
  declare -A first=()   # signature key -> first artifact
  order=()
  keep_going_this=$keep_going
  while :; do
    left=$((seconds - ($(date +%s) - start)))
    [ $runs -gt 0 ] && [ $left -lt 5 ] && break
    [ $left -lt 1 ] && left=1
    runs=$((runs + 1))
    log="$logs/run-$runs.log"
    "$exe" -max_total_time="$left" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -print_funcs=0 -artifact_prefix="$artifacts/" "${extra[@]}" "$corpus" \
      > "$log" 2>&1
    rc=$?
    executions=$((executions + $(stat "$log" number_of_executed_units)))
    rss=$(stat "$log" peak_rss_mb)
    [ "$rss" -gt "$peak_rss" ] && peak_rss=$rss
    if [ $rc -ne 0 ]; then
      # A target that dies at once every time (at startup, say) would only spin: stop it.
      if [ $(($(date +%s) - start)) -lt $((runs * 2)) ] && [ $runs -ge 20 ]; then
        echo "   stopping: every run fails at once (see $log)"
        keep_going_this=0
      fi
      sig=$(signature "$log")
      key=$(printf '%s' "$sig" | md5sum | cut -c1-12)  # a safe array subscript
      artifact=$(grep -oE "Test unit written to \S+" "$log" | tail -n 1 | awk '{print $5}')
      if [ -z "${seen[$key]+x}" ]; then
        seen[$key]=0
        text[$key]=$sig
        first[$key]=${artifact:-"(none written; see $log)"}
        order+=("$key")
        echo "   FINDING: $sig"
        echo "            reproducer ${artifact:-none}, log $log"
      fi
      seen[$key]=$((${seen[$key]} + 1))
      [ $keep_going_this = 1 ] || break
    else
      [ $keep_going = 1 ] || break
      # Ran out its time without a finding.
      left=$((seconds - ($(date +%s) - start)))
      [ $left -lt 5 ] && break
    fi
  done
  elapsed=$(($(date +%s) - start))
  [ $elapsed -lt 1 ] && elapsed=1
  corpus_size=$(find "$corpus" -type f | wc -l)
  rate=$((executions / elapsed))

  # One minimized reproducer per distinct finding (long runs only: minimizing takes minutes).
  declare -A minimized=()
  if [ $keep_going = 1 ]; then
    i=0
    for key in "${order[@]}"; do
      i=$((i + 1))
      crash=${first[$key]}
      [ -f "$crash" ] || continue
      out="$artifacts/minimized-$i-$(basename "$crash")"
      rm -f "$out"
      "$exe" -minimize_crash=1 -max_total_time="$minimize_seconds" -timeout=10 \
        -rss_limit_mb=2048 -exact_artifact_path="$out" "$crash" \
        > "$logs/minimize-$i.log" 2>&1
      # libFuzzer keeps any crashing input while minimizing, so a shallow bug can take over:
      # keep the minimized input only when it still shows this finding.
      if [ -f "$out" ]; then
        "$exe" -timeout=10 -rss_limit_mb=2048 "$out" > "$logs/minimized-$i.log" 2>&1
        if [ "$(signature "$logs/minimized-$i.log")" != "${text[$key]}" ]; then
          rm -f "$out"
        fi
      fi
      if [ ! -f "$out" ]; then
        out="$artifacts/finding-$i-$(basename "$crash")"  # the original, not minimized
        cp "$crash" "$out"
      fi
      minimized[$key]=$out
    done
  fi

  n=${#order[@]}
  total_findings=$((total_findings + n))
  echo "   executions $executions in ${elapsed}s ($rate exec/s), peak RSS ${peak_rss} MB," \
       "corpus $corpus_size, findings $n$([ $runs -gt 1 ] && echo " ($runs runs)")"
  if [ $n -gt 0 ]; then
    failed+=("$name")
    echo "| $name | $elapsed | $executions | $rate | $peak_rss | $corpus_size | $n |" >> "$summary"
    for key in "${order[@]}"; do
      repro=${minimized[$key]:-${first[$key]}}
      printf -- '- `%s`: %s (%d×); reproducer `%s`\n' "$name" "${text[$key]}" "${seen[$key]}" \
        "$repro" >> "$findings_md"
    done
  else
    echo "| $name | $elapsed | $executions | $rate | $peak_rss | $corpus_size | none |" >> "$summary"
  fi
  unset seen text first minimized
done

{
  echo
  echo "Run: \`scripts/run-fuzzers.sh$([ $keep_going = 1 ] && echo ' --keep-going')" \
       "$build_dir $seconds\` on $(nproc) cores, $(date -u +%Y-%m-%d)."
  if [ -s "$findings_md" ]; then
    echo
    echo "Findings (report kind @ first Kiln frame; count = runs that hit it):"
    echo
    cat "$findings_md"
  fi
} >> "$summary"
rm -f "$findings_md"
echo "run-fuzzers: summary in $summary"

if [ ${#failed[@]} -gt 0 ]; then
  echo "run-fuzzers: $total_findings finding(s) in ${#failed[@]} target(s): ${failed[*]}"
  [ $keep_going = 1 ] && exit 0
  exit 1
fi
echo "run-fuzzers: all ${#targets[@]} target(s) ran ${seconds}s without a finding"
