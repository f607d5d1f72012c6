#!/usr/bin/env bash
# Fetches the S3 API server the storage tests sign requests against: npm's
# s3rver 3.7.1, with every dependency pinned by version and integrity hash
# in tests/io/s3rver/package-lock.json (npm ci checks each tarball against
# it), installed under the build directory once per build directory (again
# when the lock file changes). Prints the path of its CLI entry point,
# absolute, on its last line.
#   tests/io/fetch_s3rver.sh BUILD_DIR
# Nothing of it is committed here but the lock: tests/core/io/
# s3_store_test.cc runs it with node.
set -euo pipefail

readonly INTEGRITY=sha512-H9KIX6n8NqcfoE4ziFNbQASBQfjcNJgb+3wbT9L5iotEqfOncFO1c38cfJSFSo7xXTu1zM9HA6t2u9xKNlYRaA==

build_dir=${1:?usage: tests/io/fetch_s3rver.sh BUILD_DIR}
lock_dir="$(cd "$(dirname "$0")/s3rver" && pwd)"
mkdir -p "$build_dir/s3rver-npm"
dest=$(cd "$build_dir/s3rver-npm" && pwd)
entry="$dest/node_modules/s3rver/bin/s3rver.js"
stamp=$(sha256sum "$lock_dir/package-lock.json" | cut -d' ' -f1)

# The lock must pin the s3rver the tests were written against.
grep -q "\"integrity\": \"$INTEGRITY\"" "$lock_dir/package-lock.json" || {
  echo "tests/io/s3rver/package-lock.json does not pin s3rver by $INTEGRITY" >&2
  exit 1
}
if [ ! -f "$entry" ] || [ "$(cat "$dest/stamp" 2>/dev/null)" != "$stamp" ]; then
  command -v npm >/dev/null || { echo "npm is missing: run deploy/install_deps.sh --tests" >&2; exit 1; }
  rm -rf "$dest/node_modules" "$dest/stamp"
  cp "$lock_dir/package.json" "$lock_dir/package-lock.json" "$dest/"
  (cd "$dest" && npm ci --silent --no-audit --no-fund >/dev/null)
  echo "$stamp" > "$dest/stamp"
fi
echo "$entry"
