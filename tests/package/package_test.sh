#!/bin/bash
# The installed C++ package works for a project outside this tree: installs
# the build into a scratch prefix, builds tests/package/consumer against it
# with find_package(Tensormorph CONFIG), starts the installed tensormorphd on
# a demo checkpoint and checks what the consumer prints.
#
# usage: package_test.sh BUILD_DIR SCRATCH_DIR MAKE_DEMO VERSION CXX [CCACHE]
# SCRATCH_DIR is wiped first. It is a fixed place in the build tree rather
# than a mktemp one, so ccache (base_dir) hits on the consumer's rebuilds.
# TENSORMORPH_CONSUMER_CXX_FLAGS: compile and link flags for the consumer (the
# sanitizer runtimes when the installed libraries are instrumented).
set -euo pipefail

build=$1 scratch=$2 make_demo=$3 version=$4 cxx=$5 ccache=${6:-}
here=$(cd "$(dirname "$0")" && pwd)
prefix=$scratch/prefix
server_pid=

fail() { echo "FAIL: $*" >&2; exit 1; }
cleanup() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT

rm -rf "$scratch"
mkdir -p "$scratch"

cmake --install "$build" --prefix "$prefix" > "$scratch/install.log"
for f in bin/tensormorph bin/tensormorphd \
         include/tensormorph/client/client.h \
         include/tensormorph/v1/tensormorph.pb.h \
         include/tensormorph/v1/tensormorph.grpc.pb.h \
         share/tensormorph/proto/tensormorph/v1/tensormorph.proto; do
  [[ -e $prefix/$f ]] || fail "the install has no $f (see $scratch/install.log)"
done
config=$(find "$prefix" -name TensormorphConfigVersion.cmake)
[[ -n $config ]] || fail "the install has no TensormorphConfigVersion.cmake"
grep -q "\"$version\"" "$config" || fail "$config does not name version $version"

launcher=()
[[ -n $ccache ]] && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="$ccache")
cmake -S "$here/consumer" -B "$scratch/consumer" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="${TENSORMORPH_CONSUMER_CXX_FLAGS:-}" \
  -DCMAKE_EXE_LINKER_FLAGS="${TENSORMORPH_CONSUMER_CXX_FLAGS:-}" > "$scratch/consumer-configure.log" 2>&1 ||
  { cat "$scratch/consumer-configure.log" >&2; fail "the consumer does not configure"; }
cmake --build "$scratch/consumer" > "$scratch/consumer-build.log" 2>&1 ||
  { cat "$scratch/consumer-build.log" >&2; fail "the consumer does not build"; }

"$make_demo" "$scratch/demo" > /dev/null

# The file exists before the server's shell opens it: under load the loop
# below read it first, and sed's failure ended the script (pipefail, -e).
: > "$scratch/server.out"
"$prefix/bin/tensormorphd" --root "$scratch/demo" --listen 127.0.0.1:0 \
  > "$scratch/server.out" 2> "$scratch/server.err" &
server_pid=$!
target=
for _ in $(seq 100); do
  target=$(sed -n 's/^tensormorphd listening on \([^ ]*\)$/\1/p' "$scratch/server.out" | head -1)
  [[ -n $target ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$scratch/server.err" >&2; fail "tensormorphd exited"; }
  sleep 0.1
done
[[ -n $target ]] || fail "tensormorphd did not print its port within 10 s"

out=$("$scratch/consumer/consumer" "$target" model-q8_0.gguf) ||
  fail "the consumer failed against $target"
echo "$out" | grep -qx "version $version" ||
  fail "expected 'version $version' from GetServerInfo; got: $(echo "$out" | head -1)"
echo "$out" | grep -qx "tensor blk.0.attn_q.weight" ||
  fail "expected tensor blk.0.attn_q.weight in ListTensors; got: $out"
# The consumer's list is the installed CLI's, name for name and in order.
names=$(echo "$out" | sed -n 's/^tensor //p')
[[ $(echo "$out" | sed -n 's/^count //p') -eq $(echo "$names" | wc -l) ]] ||
  fail "the consumer's count disagrees with the names it printed: $out"
cli_names=$("$prefix/bin/tensormorph" --server "$target" --json ls model-q8_0.gguf |
  sed -n 's/^{"name":"\([^"]*\)".*/\1/p')
[[ $names == "$cli_names" ]] ||
  fail "the consumer listed $(echo "$names" | wc -l) tensors, the CLI $(echo "$cli_names" | wc -l):
$(diff <(echo "$names") <(echo "$cli_names") || true)"
count=$(echo "$names" | wc -l)
echo "PASS: consumer built with find_package(Tensormorph) listed $count tensors from $target"
