# The user-facing commands. Each one sets the machine up first, so a fresh Debian machine needs
# nothing else:
#   make demo    install dependencies, build, run the default experiment
#   make test    install dependencies, build, run the whole test suite (CTest)
#   make bench   install dependencies, build, run the benchmarks (JSON lines on stdout)
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps configure build demo test bench clean

all: build

deps:
	bash scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Supervised fine-tuning of a generated model by 2 FSDP ranks hosted as actors;
# `ooze demo --config examples/foundation_demo.json` is the comm-only demo.
demo: build
	$(BUILD_DIR)/launcher/ooze sft-demo --out runs/sft-demo --world-size 2 --steps 30

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

bench: build
	bash bench/run.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
