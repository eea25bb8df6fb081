#!/usr/bin/env bash
# Runs every benchmark (build/bench/bench_*); each prints JSON lines:
#   {"bench": ..., "metric": ..., "value": ..., "unit": ..., "baseline": ..., "ratio": ...}
set -euo pipefail
build_dir="${1:-build}"
for bench in "$build_dir"/bench/bench_*; do
  [ -x "$bench" ] && "$bench"
done
