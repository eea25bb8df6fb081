#!/usr/bin/env bash
# The GPU path in one command, on a device machine (CUDA 13, a PyTorch 2.x install, CMake, ninja,
# a C++ compiler, no package registry), from the repository root:
#
#   bash scripts/gpu/check.sh                 on the device: after scripts/gpu/prepare.sh here
#   bash scripts/gpu/check.sh --cpu-dry-run   here: the same steps against Debian's LibTorch
#
# Steps, each a JSON line in OUT/check.jsonl as soon as it ends (a run cut short keeps what it
# had), followed by the figures it measured; the logs go to OUT/logs.tgz after every step (the
# device tool brings back 8 files at most):
#   prefix      unpack .deps/gpu/debs into .deps/gpu/root (dpkg -x): headers, CMake files and
#               the runtime libraries the device lacks (where it has a soname, its copy is used)
#   configure   against the device's PyTorch (torch.utils.cmake_prefix_path), its Python, the
#               NCCL of its nvidia-nccl package, and the prefix; every dependency must resolve
#               inside the prefix (or to PyTorch's own Gloo, where it exports one)
#   build       only what the checks run, with every core; build-gpu/ is kept, so a second run
#               on a warm machine rebuilds nothing
#   tests       the CTest label cuda: NCCL communicator, CUDA IPC buffers, the engine on CUDA
#               (tokens and log-probs against the CPU engine, bf16, sleep freeing device memory)
#   hf          the engine served by `ooze serve` against Hugging Face transformers on the same
#               safetensors, fp32 and bf16 (scripts/gpu/hf_reference.py)
#   bench       bench_gpu_bench: memcpy and matmul ceilings, engine prefill and decode at batch
#               1/64/256, a training step's tokens/s and MFU (Qwen3-0.6B shape, bf16)
#   demo        the CPU demo's GRPO run (examples/demo/run.sh) on the GPU, colocated, with the
#               mean seconds of each phase
#
# OUT: $OUT where the device tool sets it, else build-gpu/out. Exits non-zero when a step failed.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
dry_run=0
[ "${1:-}" = "--cpu-dry-run" ] && dry_run=1
build="$root/build-gpu"
OUT="${OUT:-$build/out}"
logs="$build/check-logs"
rm -rf "$logs"
mkdir -p "$OUT" "$logs"
report="$OUT/check.jsonl"
: > "$report"
prefix="$root/.deps/gpu/root"
failed=0

# record NAME OK SECONDS [JSON fields...]: one line of the report, echoed.
record() {
  local name="$1" ok="$2" seconds="$3"
  shift 3
  local extra=""
  [ $# -gt 0 ] && extra=", $*"
  echo "{\"step\": \"$name\", \"ok\": $ok, \"seconds\": $seconds$extra}" | tee -a "$report"
  [ "$ok" = true ] || failed=1
  tar czf "$OUT/logs.tgz" -C "$build" check-logs
}

# run_step NAME COMMAND...: runs it with its output in logs/NAME.log; records the outcome.
run_step() {
  local name="$1"
  shift
  local start=$SECONDS
  if "$@" > "$logs/$name.log" 2>&1; then
    record "$name" true $((SECONDS - start))
  else
    record "$name" false $((SECONDS - start)) "\"log\": \"$name.log\""
    tail -n 30 "$logs/$name.log"
    return 1
  fi
}

if [ "$dry_run" = 1 ]; then
  python=/usr/bin/python3
else
  python="$(command -v python3)"
fi

# --- prefix ---------------------------------------------------------------------------------
unpack_prefix() {
  local debs="$root/.deps/gpu/debs"
  if ! compgen -G "$debs/*.deb" > /dev/null; then
    echo "no packages in $debs: run scripts/gpu/prepare.sh here and carry .deps/gpu/debs"
    return 1
  fi
  rm -rf "$prefix"
  mkdir -p "$prefix"
  for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$prefix" || return 1; done
  # Files that name /usr absolutely: pkg-config files and Gloo's CMake targets.
  find "$prefix" -name '*.pc' -exec sed -i "s|^prefix=/usr|prefix=$prefix/usr|" {} +
  sed -i "s|\"/usr/lib/|\"$prefix/usr/lib/|g" "$prefix"/usr/share/cmake/Gloo/GlooTargets*.cmake
  # A runtime library the machine already has (same soname) is the machine's: newer, and
  # what its other programs load. The prefix's file becomes a link to it.
  local lib soname system
  for lib in "$prefix"/usr/lib/x86_64-linux-gnu/lib*.so.* "$prefix"/usr/lib/lib*.so.*; do
    [ -f "$lib" ] && [ ! -L "$lib" ] || continue
    soname="$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
    system="$(ldconfig -p | awk -v n="$soname" -v p="$prefix" \
      '$1 == n && index($NF, p) != 1 {print $NF; exit}')"
    if [ -n "$soname" ] && [ -n "$system" ]; then
      ln -sf "$system" "$lib"
      echo "$soname: the machine's $system"
    else
      echo "$soname: the prefix's"
    fi
  done
}
run_step prefix unpack_prefix || exit 1
export PATH="$prefix/usr/bin:$PATH"
export PKG_CONFIG_PATH="$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig"
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:$prefix/usr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# --- configure ------------------------------------------------------------------------------
configure() {
  local args=(-S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
    -DPython3_EXECUTABLE="$python" -DOOZE_FUZZ_ASAN=OFF)
  local prefixes="$prefix/usr"
  local torch_cmake
  torch_cmake="$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')" || return 1
  [ -d "$torch_cmake" ] && prefixes="$torch_cmake;$prefixes"  # Debian's LibTorch: found as is
  local pybind11_cmake
  pybind11_cmake="$("$python" -m pybind11 --cmakedir 2> /dev/null)" &&
    args+=(-Dpybind11_DIR="$pybind11_cmake")
  command -v pkg-config > /dev/null || args+=(-DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf")

  if [ "$dry_run" = 0 ]; then
    # The NCCL PyTorch loads (nvidia-nccl-cu13), so both sides use one library.
    local nccl
    nccl="$("$python" -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')" || return 1
    args+=(-DOOZE_NCCL_INCLUDE="$nccl/include" -DOOZE_NCCL_LIB="$nccl/lib/libnccl.so.2")
    export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
    # PyTorch links a Gloo into libtorch_cpu. Where it exports its symbols and ships its
    # headers, ooze uses that one: a second Gloo in the process would interpose on it.
    local torch_dir
    torch_dir="$("$python" -c 'import torch, os; print(os.path.dirname(torch.__file__))')"
    local exported
    exported="$(nm -DC --defined-only "$torch_dir/lib/libtorch_cpu.so" | grep -c ' gloo::Context::Context' || true)"
    echo "libtorch_cpu.so exports gloo::Context: $exported; gloo headers: $(ls -d "$torch_dir/include/gloo" 2> /dev/null || echo none)"
    if [ "$exported" -gt 0 ] && [ -f "$torch_dir/include/gloo/context.h" ]; then
      args+=(-DOOZE_GLOO_FROM_TORCH=ON)
    fi
  fi
  cmake "${args[@]}" -DCMAKE_PREFIX_PATH="$prefixes" || return 1

  # Every dependency of the prefix must resolve inside it: here, Debian's /usr has them all
  # too, and a dry run that found those would prove nothing for the device.
  local var value bad=0
  for var in OOZE_ZMQ_INCLUDE OOZE_ZMQ_LIB OOZE_CEREAL_INCLUDE OOZE_BOOST_INCLUDE \
    OOZE_PCRE2_INCLUDE OOZE_PCRE2_LIB nlohmann_json_DIR GTest_DIR Protobuf_PROTOC_EXECUTABLE \
    Protobuf_INCLUDE_DIR ICU_INCLUDE_DIR pkgcfg_lib_GINAC_ginac Gloo_DIR; do
    value="$(grep -m1 "^$var:" "$build/CMakeCache.txt" | cut -d= -f2-)"
    if [ "$var" = Gloo_DIR ] && grep -q '^OOZE_GLOO_FROM_TORCH:BOOL=ON' "$build/CMakeCache.txt"; then
      continue
    fi
    case "$value" in
      "$prefix"/*) echo "$var = $value" ;;
      *) echo "$var = '$value': not inside $prefix" && bad=1 ;;
    esac
  done
  return $bad
}
run_step configure configure || exit 1

# --- build ----------------------------------------------------------------------------------
targets=(comm_tests weight_sync_tests engine_tests fsdp_tests ooze exact_match_reward bench_gpu_bench)
run_step build cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" || exit 1

# --- tests ----------------------------------------------------------------------------------
cuda_tests() {
  (cd "$build" && ctest -L cuda -V --output-junit "$logs/ctest-cuda.xml")
}
start=$SECONDS
cuda_tests > "$logs/tests.log" 2>&1
status=$?
summary="$(grep -E 'tests passed|tests failed' "$logs/tests.log" | tail -1)"
# ctest -V prefixes each line with the test's number; a skipped test's own line ends "(N ms)".
record tests "$([ $status = 0 ] && echo true || echo false)" $((SECONDS - start)) \
  "\"summary\": \"$summary\", \"gtest_passed\": $(grep -c '\[       OK \]' "$logs/tests.log"), \"gtest_skipped\": $(grep -c '\[  SKIPPED \] .*(' "$logs/tests.log"), \"log\": \"tests.log\""

# --- hf -------------------------------------------------------------------------------------
ooze="$build/launcher/ooze"
device=cuda
[ "$dry_run" = 1 ] && device=cpu
hf_check() {
  local model="$build/hf-model" port=31707
  rm -rf "$model"
  "$ooze" model init --arch qwen3 --hidden-size 256 --layers 4 --heads 4 --kv-heads 2 \
    --tokenizer byte --seed 3 --out "$model" || return 1
  local dtype status=0
  for dtype in float32 bfloat16; do
    "$ooze" serve --model "$model" --dtype "$dtype" --device "$device" --port $port &
    local server=$!
    local tries=0
    until "$python" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health')" \
      2> /dev/null; do
      sleep 0.5
      tries=$((tries + 1))
      if [ $tries -gt 120 ]; then kill $server; echo "ooze serve did not start"; return 1; fi
    done
    "$python" "$root/scripts/gpu/hf_reference.py" --url "http://127.0.0.1:$port" \
      --model "$model" --dtype "$dtype" --device "$device" | tee -a "$logs/hf.jsonl" || status=1
    kill $server
    wait $server
  done
  return $status
}
: > "$logs/hf.jsonl"
run_step hf hf_check
cat "$logs/hf.jsonl" >> "$report"

# --- bench ----------------------------------------------------------------------------------
bench_args=()
[ "$dry_run" = 1 ] && bench_args=(--device cpu --shape tiny --dtype float32)
run_step bench "$build/bench/bench_gpu_bench" "${bench_args[@]}"
grep '^{' "$logs/bench.log" >> "$report"

# --- demo -----------------------------------------------------------------------------------
demo() {
  local rollouts=20 sft=40
  [ "$dry_run" = 1 ] && rollouts=2 sft=4
  BUILD_DIR="$build" NUM_ROLLOUT=$rollouts EVAL_INTERVAL=$rollouts SFT_STEPS=$sft \
    PLACEMENT_ARGS="--actor-num-gpus-per-node 1 --rollout-num-gpus 1 --colocate" \
    bash "$root/examples/demo/run.sh" "$build/demo" || return 1
  # The mean seconds of each phase over the run's rollouts.
  "$python" - "$build/demo/grpo/metrics.jsonl" > "$logs/demo_phases.json" << 'EOF'
import collections, json, sys
sums, counts = collections.Counter(), collections.Counter()
for line in open(sys.argv[1]):
    for key, value in json.loads(line).items():
        if key.startswith("perf/") and key.endswith("_time"):
            sums[key] += value
            counts[key] += 1
print(json.dumps({key: round(sums[key] / counts[key], 4) for key in sorted(sums)}))
EOF
}
start=$SECONDS
if demo > "$logs/demo.log" 2>&1; then
  record demo true $((SECONDS - start)) "\"phases\": $(cat "$logs/demo_phases.json")"
else
  record demo false $((SECONDS - start)) "\"log\": \"demo.log\""
fi

exit $failed
