#!/usr/bin/env bash
# Fetches the test oracle: llama.cpp's own prebuilt libraries (libllama,
# libggml-base), as npm's @node-llama-cpp/linux-x64 ships them, pinned by
# version and by the registry's integrity hash, and unpacked under the build
# directory (fetched once per build directory; a cached copy is checked
# again). Prints the directory holding the libraries, absolute, on its last
# line.
#   tests/oracle/fetch_llama_cpp.sh BUILD_DIR
# Nothing of it is built or committed here: tests dlopen it (ggml_oracle.h).
set -euo pipefail

readonly PACKAGE=@node-llama-cpp/linux-x64
readonly VERSION=3.22.1  # llama.cpp's ggml with Q1_0 and Q2_0 (types 41, 42)
readonly INTEGRITY=sha512-5uCCDNqWCNfaAm8aR/Uzxbo4HBpKgNF91kCHPepKhgMgV2OAmatoefbOlMihsqCiH2Od35E/eUHQCFbfRBJuOg==

build_dir=${1:?usage: tests/oracle/fetch_llama_cpp.sh BUILD_DIR}
dest="$build_dir/llama-cpp-npm"
tgz="$dest/node-llama-cpp-linux-x64-$VERSION.tgz"
bins="$dest/package/bins/linux-x64"

integrity_of() {
  echo "sha512-$(openssl dgst -sha512 -binary "$1" | base64 -w0)"
}

mkdir -p "$dest"
if [ ! -f "$tgz" ] || [ "$(integrity_of "$tgz")" != "$INTEGRITY" ]; then
  command -v npm >/dev/null || { echo "npm is missing: run deploy/install_deps.sh --tests" >&2; exit 1; }
  rm -rf "$tgz" "$dest/package"
  (cd "$dest" && npm pack --silent "$PACKAGE@$VERSION" >/dev/null)
  got=$(integrity_of "$tgz")
  if [ "$got" != "$INTEGRITY" ]; then
    rm -f "$tgz"
    echo "$PACKAGE@$VERSION: integrity $got, expected $INTEGRITY" >&2
    exit 1
  fi
fi
if [ ! -f "$bins/libggml-base.so" ]; then
  rm -rf "$dest/package"
  tar -xzf "$tgz" -C "$dest"
fi
# Absolute: callers change directory before the tests read it.
(cd "$bins" && pwd)
