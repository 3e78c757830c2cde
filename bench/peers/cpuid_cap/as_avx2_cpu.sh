#!/bin/bash
# Runs a command on what looks like an AVX2-only CPU: CPUID reports no AVX-512, AMX or
# AVX-VNNI (cpuid_avx2.c, loaded with LD_AUDIT) and glibc's string functions skip their
# AVX-512 forms (GLIBC_TUNABLES). ONNX Runtime, oneDNN and Kiln then choose their AVX2 kernels,
# so an AVX-512 machine can compare runtimes' AVX2 paths in one run.
#
#   bench/peers/cpuid_cap/as_avx2_cpu.sh COMMAND [ARGS...]
#
# Needs the kernel's CPUID faulting (cpuid_fault in /proc/cpuinfo); without it the command
# does not run (exit 3). The shim is compiled on first use into $KILN_CPUID_CAP_DIR
# (default ${TMPDIR:-/tmp}/kiln-cpuid-cap-$UID).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
DIR="${KILN_CPUID_CAP_DIR:-${TMPDIR:-/tmp}/kiln-cpuid-cap-$(id -u)}"
LIB="$DIR/cpuid_avx2.so"
if [ ! -f "$LIB" ] || [ "$HERE/cpuid_avx2.c" -nt "$LIB" ]; then
  mkdir -p "$DIR"
  cc -O2 -Wall -shared -fPIC -o "$LIB.tmp.$$" "$HERE/cpuid_avx2.c"
  mv "$LIB.tmp.$$" "$LIB"
fi
export LD_AUDIT="$LIB"
export GLIBC_TUNABLES="glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,-AVX_VNNI${GLIBC_TUNABLES:+:$GLIBC_TUNABLES}"
exec "$@"
