# The README's two commands:
#   make test    install dependencies, build, run every test
#   make serve   install dependencies, build, serve the bundled example models
# Helpers: make build, make bench, make asan, make tsan, make fuzz, make fuzz-long, make format.

BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
REST_PORT ?= 8501
GRPC_PORT ?= 8500

.PHONY: all deps build test serve bench asan tsan fuzz fuzz-build fuzz-long format clean

all: build

deps:
	bash scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# Every test, then each libFuzzer target for a few seconds (CI's fuzz smoke run).
test: build
	bash scripts/run-tests.sh $(BUILD)
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(CI_FUZZ_SECONDS)

serve: build
	bash scripts/serve-examples.sh $(BUILD) $(GRPC_PORT) $(REST_PORT)

bench: build
	$(BUILD)/tools/kiln/kiln data bench

# Sanitizer builds of the concurrency-heavy tests (kept focused so CI stays fast).
asan: deps
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=address -DKILN_BUILD_BENCH=OFF
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS) -L sanitize

tsan: deps
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=thread -DKILN_BUILD_BENCH=OFF
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && ctest --output-on-failure -j $(JOBS) -L sanitize

# libFuzzer targets (clang, ASan+UBSan), each run FUZZ_SECONDS; `make test` runs them briefly.
# `make fuzz-long` runs each FUZZ_LONG_SECONDS and keeps going after findings, minimizing one
# reproducer per distinct finding; both write build-fuzz/fuzz/summary.md (executions, exec/s,
# peak RSS, findings per target). The fuzz build leaves CUDA out: fuzzers run the CPU kernels,
# and ASan does not mix with the CUDA runtime.
FUZZ_SECONDS ?= 20
CI_FUZZ_SECONDS ?= 10
FUZZ_LONG_SECONDS ?= 1800
fuzz-build: deps
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DKILN_BUILD_FUZZERS=ON -DKILN_BUILD_BENCH=OFF
	cmake --build build-fuzz -j $(JOBS) --target fuzzers

fuzz: fuzz-build
	bash scripts/run-fuzzers.sh build-fuzz $(FUZZ_SECONDS)

fuzz-long: fuzz-build
	bash scripts/run-fuzzers.sh --keep-going build-fuzz $(FUZZ_LONG_SECONDS)

format:
	find include src tools tests bench -name '*.h' -o -name '*.cc' | xargs clang-format -i

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz
