#!/usr/bin/env bash
# Runs every test of the build in $1 with CTest, in parallel.
set -euo pipefail
build=${1:-build}
cd "$build"
ctest --output-on-failure -j "$(nproc)" --timeout 600
