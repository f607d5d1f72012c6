#!/usr/bin/env bash
# Builds and runs every benchmark; each prints its figure beside a baseline
# measured in the same run (see docs/performance.md). About 20 minutes with
# AVX-512; far longer without (decode_bench alone took 24 on an AVX2-only EPYC).
#   tests/bench/run.sh                 everything
#   tests/bench/run.sh decode stream   only those programs
#   TENSORMORPH_BENCH_GB=4 tests/bench/run.sh diff
# Run it on an otherwise idle machine: a build on the other core costs 25-35%.
set -euo pipefail
cd "$(dirname "$0")/../.."
all=(decode stream read_e2e python_read diff inspect open_memory growth cold http page json_print stats
     check fair_share storage)
programs=("$@")
[ $# -eq 0 ] && programs=("${all[@]}")
deploy/install_deps.sh --tests  # page_bench drives chromium
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTENSORMORPH_BUILD_BENCHMARKS=ON >/dev/null
targets=(tensormorphd tensormorph)
for p in "${programs[@]}"; do
  case "$p" in
    python_read) targets+=(tensormorph_python) ;;  # a script, no binary of its own
    *) targets+=("${p}_bench") ;;
  esac
done
cmake --build build -j "$(nproc)" --target "${targets[@]}"
for p in "${programs[@]}"; do
  echo "==> ${p}_bench"
  case "$p" in
    decode) build/tests/bench/decode_bench --benchmark_repetitions=3 \
              --benchmark_report_aggregates_only=true ;;
    python_read) PYTHONPATH=build/python /usr/bin/python3 tests/bench/python_read_bench.py \
                   --tensormorphd build/server/tensormorphd --cli build/client/cli/tensormorph ;;
    *) "build/tests/bench/${p}_bench" ;;
  esac
done
