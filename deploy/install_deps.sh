#!/usr/bin/env bash
# Installs the Debian packages Tensormorph builds and tests with, if missing.
# Used by deploy/quickstart.sh, tests/run.sh and deploy/Dockerfile; safe to
# run repeatedly.
#   deploy/install_deps.sh           what building and serving need
#   deploy/install_deps.sh --tests   and what the tests need besides: GoogleTest
#                                    and Google Benchmark; the web
#                                    inspector's browser tests drive Debian's
#                                    chromium through chromedriver (Selenium);
#                                    the deploy tests render deploy/k8s with
#                                    kubectl and read YAML; npm fetches
#                                    llama.cpp, the ggml tests' oracle, and
#                                    s3rver, the S3 tests' server; nginx
#                                    serves the HTTP storage tests
#   deploy/install_deps.sh --runtime only the shared libraries the installed
#                                    tensormorphd and tensormorph load (the
#                                    image's runtime stage; bookworm's names)
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libabsl-dev libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libspdlog-dev nlohmann-json3-dev libcli11-dev libpng-dev
  libxxhash-dev  # tensormorph check --manifest: per-tensor content hashes (XXH3-64)
  libcpp-httplib-dev libssl-dev zlib1g-dev  # tensormorphd --http-listen (HTTPS, gzip)
  libcurl4-openssl-dev  # core/io's remote storage: HTTP(S) ranges, S3 (SigV4), the Hub
  curl     # the quick start shows the HTTP port answering
  # the Python client (client/python) and its tests: stubs from protoc and
  # grpc_python_plugin, run on Debian's grpcio, protobuf and numpy; the
  # dashboard example (quant_report.py) draws its charts with matplotlib;
  # its compiled read (tensormorph._native) needs Python's headers
  python3 python3-grpcio python3-protobuf python3-numpy python3-venv python3-pytest python3-matplotlib
  python3-dev
)
case "${1:-}" in
  --tests)
    # GoogleTest and Google Benchmark (without them CMake leaves tests/ out)
    PACKAGES+=(libgtest-dev libgmock-dev libbenchmark-dev)
    PACKAGES+=(openssl)  # the TLS tests make a throwaway CA
    PACKAGES+=(chromium chromium-driver python3-selenium python3 python3-yaml)
    # the storage tests serve ranges, redirects and replaced objects with
    # Debian's nginx, run as the test's own user (tests/core/io)
    PACKAGES+=(nginx)
    # Debian's kubectl (kubernetes-client) only where none is installed: a
    # newer one (cloud SDKs ship one) renders the same manifests.
    if ! command -v kubectl >/dev/null 2>&1; then PACKAGES+=(kubernetes-client); fi
    # npm fetches the test oracle, llama.cpp's prebuilt libraries
    # (tests/oracle/fetch_llama_cpp.sh); Debian's only where none is
    # installed (a Node.js from elsewhere brings its own).
    if ! command -v npm >/dev/null 2>&1; then PACKAGES+=(npm); fi
    ;;
  --runtime)
    # What `ldd` of the two binaries names, as bookworm packages it
    # (tests/deploy checks the list against the built binaries; gRPC,
    # protobuf and Abseil are linked in: cmake/link_static_deps.sh).
    PACKAGES=(
      libbrotli1 libcpp-httplib0.11 libfmt9 libpng16-16
      libspdlog1.10 libssl3 libxxhash0 zlib1g
      # libcurl4, for core/io's remote storage, and what it loads
      libcurl4 libcom-err2 libffi8 libgmp10 libgnutls30 libgssapi-krb5-2
      libhogweed6 libidn2-0 libk5crypto3 libkeyutils1 libkrb5-3
      libkrb5support0 libldap-2.5-0 libnettle8 libnghttp2-14 libp11-kit0
      libpsl5 librtmp1 libsasl2-2 libssh2-1 libtasn1-6 libunistring2 libzstd1
    )
    ;;
  "") ;;
  *) echo "unknown option: $1 (want --tests or --runtime)" >&2; exit 1 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "Installing missing packages: ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
