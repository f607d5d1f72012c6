#!/usr/bin/env bash
# The link launcher of tensormorph and tensormorphd (CXX_LINKER_LAUNCHER):
# runs the link command it is given ("$@") with gRPC, protobuf and Abseil
# taken from their static archives instead of their shared libraries,
# wherever Debian ships both (bookworm does), in one group at the end of the
# line so that every archive before them is resolved against them.
#
# Why: with them shared, a command loads 89 libraries and the dynamic
# loader's symbol lookups across them were half of its 12 ms start, and a
# tenth of a `tensormorph --json scalar` of 100,000 indices (docs/
# performance.md). A shared object being linked (-shared: the Python
# module) is left as it is: the archives are not position-independent code.
set -euo pipefail

args=()
group=()
shared=0
declare -A seen=()
for arg in "$@"; do
  [ "$arg" = "-shared" ] && shared=1
  if [[ "$arg" =~ ^(.*/)?lib(grpc\+\+_reflection|grpc\+\+|grpc|gpr|upb|address_sorting|re2|cares|protobuf|absl_[a-z0-9_]+)\.so(\.[0-9.]+)?$ ]]; then
    archive="${BASH_REMATCH[1]}lib${BASH_REMATCH[2]}.a"
    if [ -f "$archive" ]; then
      [ -z "${seen[$archive]:-}" ] && group+=("$archive")
      seen[$archive]=1
      continue
    fi
  fi
  args+=("$arg")
done
if [ "$shared" = 1 ] || [ ${#group[@]} -eq 0 ]; then exec "$@"; fi

# What the shared libraries brought in themselves (gRPC's own dependencies,
# Abseil's among its parts: every archive, of which the linker takes only
# what is called), and the system libraries the archives call, shared
# (libcurl loads OpenSSL and zlib as well).
libdir="$(dirname "${group[0]}")"
for archive in "$libdir"/lib{re2,upb,cares,address_sorting,gpr}.a \
               "$libdir"/libabsl_*.a; do
  if [ -f "$archive" ] && [ -z "${seen[$archive]:-}" ]; then
    group+=("$archive")
    seen[$archive]=1
  fi
done
exec "${args[@]}" -Wl,--start-group "${group[@]}" -Wl,--end-group \
  -lssl -lcrypto -lz -ldl -lrt -pthread
