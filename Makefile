# The README's two commands:
#   make test    install dependencies, build, run every test
#   make serve   install dependencies, build, serve the bundled example models
# Helpers: make build, make bench, make asan, make tsan, make fuzz, make format.

BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
REST_PORT ?= 8501
GRPC_PORT ?= 8500

.PHONY: all deps build test serve bench asan tsan fuzz format clean

all: build

deps:
	bash scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

test: build
	bash scripts/run-tests.sh $(BUILD)

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

fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DKILN_BUILD_FUZZERS=ON \
	  -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF
	cmake --build build-fuzz -j $(JOBS)
	bash scripts/run-fuzzers.sh build-fuzz 20

format:
	find include src tools tests bench -name '*.h' -o -name '*.cc' | xargs clang-format -i

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz
