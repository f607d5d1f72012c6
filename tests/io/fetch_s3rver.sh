#!/usr/bin/env bash
# Fetches the S3 API server the storage tests sign requests against: npm's
# s3rver, pinned by version and by the registry's integrity hash of its
# tarball, installed (with its dependencies) under the build directory once
# per build directory. Prints the path of its CLI entry point, absolute, on
# its last line.
#   tests/io/fetch_s3rver.sh BUILD_DIR
# Nothing of it is committed here: tests/core/io/s3_store_test.cc runs it
# with node.
set -euo pipefail

readonly PACKAGE=s3rver
readonly VERSION=3.7.1  # checks SigV4 signatures; ListObjectsV2 with continuation
readonly INTEGRITY=sha512-H9KIX6n8NqcfoE4ziFNbQASBQfjcNJgb+3wbT9L5iotEqfOncFO1c38cfJSFSo7xXTu1zM9HA6t2u9xKNlYRaA==

build_dir=${1:?usage: tests/io/fetch_s3rver.sh BUILD_DIR}
mkdir -p "$build_dir/s3rver-npm"
dest=$(cd "$build_dir/s3rver-npm" && pwd)
entry="$dest/node_modules/s3rver/bin/s3rver.js"


if [ ! -f "$entry" ] || [ "$(cat "$dest/integrity" 2>/dev/null)" != "$INTEGRITY" ]; then
  command -v npm >/dev/null || { echo "npm is missing: run deploy/install_deps.sh --tests" >&2; exit 1; }
  rm -rf "$dest/node_modules" "$dest/integrity"
  got=$(cd "$dest" && npm view --silent "$PACKAGE@$VERSION" dist.integrity)
  if [ "$got" != "$INTEGRITY" ]; then
    echo "$PACKAGE@$VERSION: integrity $got, expected $INTEGRITY" >&2
    exit 1
  fi
  # npm checks the tarball it downloads against the registry's integrity,
  # which was just checked against the pin.
  (cd "$dest" && npm install --silent --no-save --no-audit --no-fund \
    --prefix "$dest" "$PACKAGE@$VERSION" >/dev/null)
  echo "$INTEGRITY" > "$dest/integrity"
fi
(cd "$(dirname "$entry")" && echo "$(pwd)/$(basename "$entry")")
