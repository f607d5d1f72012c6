#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test.
#   tests/run.sh              Release build in build/, all tests
#   tests/run.sh --sanitize   ASan + UBSan build in build-asan/, all tests
#   tests/run.sh --bench      also build tests/bench (see README, Performance)
# Exits non-zero when anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build
# Warnings are errors here, so CI (.ci/run calls this) keeps the build clean.
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DTENSORMORPH_WERROR=ON)
for arg in "$@"; do
  case "$arg" in
    --sanitize) build_dir=build-asan; cmake_args=(-DCMAKE_BUILD_TYPE=Debug -DTENSORMORPH_SANITIZE=ON -DTENSORMORPH_WERROR=ON) ;;
    --bench) cmake_args+=(-DTENSORMORPH_BUILD_BENCHMARKS=ON) ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "unknown option: $arg" >&2; exit 1 ;;
  esac
done

deploy/install_deps.sh --tests
if [ "$build_dir" = build-asan ]; then
  export LSAN_OPTIONS="suppressions=$(pwd)/tests/lsan.supp"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
fi
cmake -S . -B "$build_dir" -G Ninja "${cmake_args[@]}" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
cd "$build_dir"
ctest --output-on-failure -j "$(nproc)" --timeout 600
