#!/usr/bin/env bash
# Installs every Debian package that Kiln's build, tests and benchmarks need.
# Idempotent: packages already present are skipped, and `apt-get update` runs at most once.
#
#   install-deps.sh           everything: build, tests, benchmarks, fuzzing, deployment tests
#   install-deps.sh --build   only what building the `kiln` binary needs (deploy/Dockerfile's
#                             build stage uses this, so the image and CI cannot drift apart)
set -euo pipefail

BUILD_PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  # core libraries (see ../shared/DESIGN.md "Dependencies")
  libabsl-dev libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  libdnnl-dev libboost-dev libsimdjson-dev
  # fp32 GEMM on AVX2 (src/kernels/cpu/gemm_backend.h): OpenBLAS's OpenMP build, which shares
  # oneDNN's OpenMP threads
  libopenblas-openmp-dev
  libjpeg62-turbo-dev libpng-dev zlib1g-dev
  # TLS: --ssl_config_file's PEM checks and HTTPS on the REST port (gRPC has its own TLS)
  libssl-dev
  # CMakeLists.txt finds GoogleTest even when the tests are not built
  libgtest-dev libgmock-dev
)
TEST_PACKAGES=(
  # fuzzing (make fuzz)
  clang libclang-rt-14-dev llvm
  # tests and benchmarks
  libbenchmark-dev
  python3 python3-numpy python3-onnx python3-protobuf python3-grpcio
  python3-torch python3-torchvision python3-pil
  # the Python package (python/, issue 14) and its tests; sklearn's bundled digits train the
  # compression accuracy benchmark's classifier (bench/compression)
  pybind11-dev python3-dev python3-pytest python3-sklearn
  # TLS tests generate their certificates with the openssl CLI
  openssl
  wrk curl hyperfine time
  # deployment tests (tests/deploy): the real load balancer, browser and manifest parser
  nginx chromium python3-yaml
)

build_only=false
if [ "${1:-}" = "--build" ]; then build_only=true; fi
PACKAGES=("${BUILD_PACKAGES[@]}")
if ! $build_only; then PACKAGES+=("${TEST_PACKAGES[@]}"); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Benchmarks only: the ONNX Runtime peer runs under Node.js (bench/peers, onnxruntime-node from
# npm). A node/npm already on the machine (NodeSource's nodejs bundles npm and conflicts with
# Debian's npm package) is kept.
if ! $build_only && ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
