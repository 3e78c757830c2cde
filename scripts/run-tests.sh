#!/usr/bin/env bash
# Runs every test of the build in $1 with CTest, in parallel, after the layering check (the
# module dependency plan of DESIGN.md over #include and CMake link lines; it needs no build).
set -euo pipefail
build=${1:-build}
python3 "$(dirname "$0")/check-layering.py" "$(dirname "$0")/.."
cd "$build"
ctest --output-on-failure -j "$(nproc)" --timeout 600
