#!/usr/bin/env bash
# Runs every benchmark; each prints JSON lines:
#   {"bench": ..., "metric": ..., "value": ..., "unit": ..., "baseline": ..., "ratio": ...}
set -euo pipefail
build_dir="${1:-build}"
"$build_dir/bench/bench_comm_bandwidth"
