#!/usr/bin/env bash
# Builds and runs every benchmark; each prints its figure beside a baseline
# measured in the same run (see README, Performance).
#   tests/bench/run.sh              1 GB of generated source for the diff
#   TENSORMORPH_BENCH_GB=4 tests/bench/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTENSORMORPH_BUILD_BENCHMARKS=ON >/dev/null
cmake --build build -j "$(nproc)" --target diff_bench decode_bench stream_bench
build/tests/bench/decode_bench
build/tests/bench/stream_bench
build/tests/bench/diff_bench
