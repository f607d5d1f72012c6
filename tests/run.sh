#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test.
#   tests/run.sh              Release build in build/, all tests
#   tests/run.sh --sanitize   ASan + UBSan build in build-asan/, all tests
#   tests/run.sh --bench      also build tests/bench (see docs/performance.md)
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
# llama.cpp's own libraries, the oracle of the ggml tests (pinned; fetched
# once into the build directory).
TENSORMORPH_LLAMA_CPP_DIR=$(tests/oracle/fetch_llama_cpp.sh "$build_dir" | tail -n 1)
export TENSORMORPH_LLAMA_CPP_DIR
# npm's s3rver, the S3 API server of the storage tests (pinned; fetched once
# into the build directory).
TENSORMORPH_S3RVER=$(tests/io/fetch_s3rver.sh "$build_dir" | tail -n 1)
export TENSORMORPH_S3RVER
# The function-length report (DESIGN.md: no function over ~120 lines but
# parsers and rule tables), so that CI's output shows it; ctest's
# layout_function_lengths fails on one without a reason.
python3 -B tests/layout/function_lengths.py || true
cd "$build_dir"
# CI keeps only the tail of this output, so it ends with what failed and
# why: the failure lines of the run, then the failed tests once more, one
# at a time, to tell a flake under load from a failure (the exit stays
# non-zero either way).
failure_lines() {
  grep -E -A10 ': Failure$|^\[  FAILED|^Google Test trace|^Value of:|^Expected|Which is:|ERROR: (Leak|Address|Thread)Sanitizer|runtime error:|^SUMMARY: ' "$1" |
    grep -v -E 'Test +#[0-9]+:|^ +Start +[0-9]+:|\[(info|warning|debug)\]| (info|warning|debug) [A-Z][A-Za-z]+ peer=' |
    cut -c1-300 | tail -n "$2"
}
if ctest --output-on-failure -j "$(nproc)" --timeout 600 2>&1 | tee ctest.log; then
  exit 0
fi
if ctest --rerun-failed --output-on-failure -j 1 --timeout 600 > rerun.log 2>&1; then
  verdict="==> the failed tests passed when run again alone: a flake under load"
else
  verdict="==> the failed tests failed again when run alone (rerun.log)"
fi
echo "==> why they failed (ctest.log):"
failure_lines ctest.log 24 || true
echo "$verdict"
exit 1
