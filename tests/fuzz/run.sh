#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and
# runs each for SECONDS (default 30). Crashes land in build-fuzz/findings/.
#   tests/fuzz/run.sh 30      what CI runs
#   tests/fuzz/run.sh 600     the deeper run
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-30}
deploy/install_deps.sh
command -v clang++ >/dev/null || { export DEBIAN_FRONTEND=noninteractive; apt-get install -y -qq clang >/dev/null; }
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTENSORMORPH_BUILD_FUZZERS=ON >/dev/null
targets=(safetensors gguf conventions config slice service storage)
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]/#/fuzz_}" make_seeds
corpus=build-fuzz/corpus
build-fuzz/tests/fuzz/make_seeds "$corpus" "$(pwd)/../shared/fixtures"
mkdir -p build-fuzz/findings "$corpus/storage"  # no seeds: it starts from nothing
status=0
for t in "${targets[@]}"; do
  echo "==> fuzz_$t for ${seconds}s"
  if ! build-fuzz/tests/fuzz/fuzz_$t "$corpus/$t" -max_total_time="$seconds" -max_len=65536 \
      -rss_limit_mb=2048 -timeout=10 -artifact_prefix=build-fuzz/findings/$t- \
      -print_final_stats=1 >build-fuzz/fuzz_$t.log 2>&1; then
    echo "fuzz_$t FOUND A CRASH: see build-fuzz/fuzz_$t.log and build-fuzz/findings/" >&2
    tail -40 build-fuzz/fuzz_$t.log >&2
    status=1
  fi
  grep -a -E "stat::number_of_executed_units|stat::peak_rss_mb|cov:" build-fuzz/fuzz_$t.log | tail -3
done
exit $status
