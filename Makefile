# The user-facing commands. Each one sets the machine up first, so a fresh Debian machine needs
# nothing else:
#   make demo    install dependencies, build, run the default experiment
#   make test    install dependencies, build, run the whole test suite (CTest)
#   make bench   install dependencies, build, run the benchmarks (JSON lines on stdout)
#   make bench-scale  the real-size benchmark (a Qwen3-0.6B-shaped model end to end; ~50 min)
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps configure build build-demo build-bench demo test bench bench-scale clean

all: build

deps:
	bash scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The demo needs the ooze binary and its reward plugin only, not the tests.
build-demo: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target ooze exact_match_reward

build-bench: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target benches

# A tiny generated Qwen3 learns single-digit addition by GRPO (2 trainer ranks, 2 engines),
# after a short supervised warm start: metrics, TensorBoard events and PNG curves in runs/demo.
demo: build-demo
	BUILD_DIR=$(BUILD_DIR) bash examples/demo/run.sh runs/demo

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

bench: build-bench
	bash bench/run.sh $(BUILD_DIR)

bench-scale: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target bench_scale_bench
	$(BUILD_DIR)/bench/bench_scale_bench

clean:
	rm -rf $(BUILD_DIR)
