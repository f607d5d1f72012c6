#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test.
#   tests/run.sh              Release build in build/, all tests
#   tests/run.sh --sanitize   ASan + UBSan build in build-asan/, all tests
#   tests/run.sh --bench      also build tests/bench (see README, Performance)
# Exits non-zero when anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."

for arg in "$@"; do
  case "$arg" in
    --sanitize|--bench) ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "unknown option: $arg" >&2; exit 1 ;;
  esac
done

deploy/install_deps.sh --tests
# The build deploy/Dockerfile makes too (deploy/build.sh); its last line is
# the build directory.
build_dir=$(deploy/build.sh "$@" | tail -n 1)
if [ "$build_dir" = build-asan ]; then
  export LSAN_OPTIONS="suppressions=$(pwd)/tests/lsan.supp"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
fi
cd "$build_dir"
ctest --output-on-failure -j "$(nproc)" --timeout 600
