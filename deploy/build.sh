#!/usr/bin/env bash
# Configures and builds Tensormorph the one way tests/run.sh and the image
# (deploy/Dockerfile) both build it, so the tests exercise what the image
# runs. Expects what deploy/install_deps.sh installs.
#   deploy/build.sh                       Release build in build/, every target
#   deploy/build.sh --sanitize            ASan + UBSan Debug build in build-asan/
#   deploy/build.sh --bench               also tests/bench
#   deploy/build.sh --target T [...]      only target T (repeatable)
# Prints the build directory's path on its last line. ccache, when installed,
# is picked up by CMakeLists.txt (set CCACHE_DIR to keep its cache elsewhere);
# TENSORMORPH_JOBS caps the parallel jobs (default: one per core).
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=0
bench=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) sanitize=1 ;;
    --bench) bench=1 ;;
    --target) [ $# -ge 2 ] || { echo "--target needs a name" >&2; exit 1; }; targets+=(--target "$2"); shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "unknown option: $1" >&2; exit 1 ;;
  esac
  shift
done

# Warnings are errors in the Release build, so CI (.ci/run calls
# tests/run.sh) keeps the build clean.
if [ "$sanitize" = 1 ]; then
  build_dir=build-asan
  # Line tables only (-g1): sanitizer reports keep file:line, and the objects
  # shrink by a third, so a cold build (as CI's is) compiles and links faster.
  # -O1, as the sanitizers' own documentation advises: the instrumented
  # suite runs several times faster than at -O0 (it is most of CI's time),
  # and reports keep their frames (-fno-omit-frame-pointer, CMakeLists.txt).
  # Warnings are errors in the Release build only: GCC's flow warnings see
  # through the sanitizers' instrumentation and report libstdc++ itself, and
  # the Release build already holds this tree to every warning.
  cmake_args=(-DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g1 -O1" -DTENSORMORPH_SANITIZE=ON -DTENSORMORPH_WERROR=OFF)
else
  build_dir=build
  cmake_args=(-DCMAKE_BUILD_TYPE=Release -DTENSORMORPH_WERROR=ON)
fi
if [ "$bench" = 1 ]; then cmake_args+=(-DTENSORMORPH_BUILD_BENCHMARKS=ON); fi

cmake -S . -B "$build_dir" -G Ninja "${cmake_args[@]}" >/dev/null
cmake --build "$build_dir" -j "${TENSORMORPH_JOBS:-$(nproc)}" "${targets[@]}" >&2
echo "$build_dir"
