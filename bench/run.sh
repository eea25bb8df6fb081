#!/usr/bin/env bash
# Runs every benchmark (build/bench/bench_*); each prints JSON lines:
#   {"bench": ..., "metric": ..., "value": ..., "unit": ..., "baseline": ..., "ratio": ...}
# but the real-size one, which takes most of an hour: `make bench-scale` runs it.
set -euo pipefail
build_dir="${1:-build}"
for bench in "$build_dir"/bench/bench_*; do
  [ "$(basename "$bench")" = bench_scale_bench ] && continue
  [ -x "$bench" ] && "$bench"
done
