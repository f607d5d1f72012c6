#!/usr/bin/env bash
# The link launcher of tensormorph and tensormorphd (CXX_LINKER_LAUNCHER):
# runs the link command it is given ("$@") with gRPC, protobuf and Abseil
# (and gRPC's own dependencies) taken from their static archives instead of
# their shared libraries, in one group at the end of the line so that every
# archive before them is resolved against them.
#
# Why: with them shared, a command loads 89 libraries and the dynamic
# loader's symbol lookups across them were half of its 12 ms start, and a
# tenth of a `tensormorph --json scalar` of 100,000 indices (docs/
# performance.md). All or nothing: where any of them has no archive beside
# it (another system than Debian's), the line is run as given, since half
# static and half shared would put two copies of a library in one process.
# A shared object being linked (-shared: the Python module) is left as it
# is: the archives are not position-independent code.
set -euo pipefail

readonly names='grpc\+\+_reflection|grpc\+\+|grpc|gpr|upb|address_sorting|re2|cares|protobuf|absl_[a-z0-9_]+'
args=()
group=()
dirs=()  # where the archives were found, for the dependencies below
search=()  # -L directories, for -lNAME
declare -A seen=()
for arg in "$@"; do
  if [ "$arg" = "-shared" ]; then exec "$@"; fi
  [[ "$arg" =~ ^-L(.+)$ ]] && search+=("${BASH_REMATCH[1]}")
done
for arg in "$@"; do
  archive=""
  if [[ "$arg" =~ ^(.*/)?lib($names)\.so(\.[0-9.]+)?$ ]]; then
    archive="${BASH_REMATCH[1]}lib${BASH_REMATCH[2]}.a"
    [ -f "$archive" ] || exec "$@"
  elif [[ "$arg" =~ ^-l($names)$ ]]; then
    # (gRPC's CMake files name re2 this way.)
    for dir in "${search[@]}" /usr/lib/x86_64-linux-gnu /usr/lib /usr/local/lib; do
      if [ -f "$dir/lib${BASH_REMATCH[1]}.a" ]; then
        archive="$dir/lib${BASH_REMATCH[1]}.a"
        break
      fi
    done
    [ -n "$archive" ] || exec "$@"
  fi
  if [ -z "$archive" ]; then
    args+=("$arg")
    continue
  fi
  if [ -z "${seen[$archive]:-}" ]; then
    group+=("$archive")
    seen[$archive]=1
    dirs+=("$(dirname "$archive")")
  fi
done
if [ ${#group[@]} -eq 0 ]; then exec "$@"; fi

# What the shared libraries brought in themselves (gRPC's own dependencies,
# Abseil's among its parts: every archive, of which the linker takes only
# what is called), and the system libraries the archives call, shared
# (libcurl loads OpenSSL and zlib as well).
mapfile -t dirs < <(printf '%s\n' "${dirs[@]}" | sort -u)
for dir in "${dirs[@]}"; do
  for archive in "$dir"/lib{re2,upb,cares,address_sorting,gpr}.a \
                 "$dir"/libabsl_*.a; do
    if [ -f "$archive" ] && [ -z "${seen[$archive]:-}" ]; then
      group+=("$archive")
      seen[$archive]=1
    fi
  done
done
exec "${args[@]}" -Wl,--start-group "${group[@]}" -Wl,--end-group \
  -lssl -lcrypto -lz -ldl -lrt -pthread
