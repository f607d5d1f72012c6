#!/usr/bin/env python3
"""The include-layering test: every layer includes only the layers below it.

usage: check_layers.py [SOURCE_DIR]

Reads every `#include` of every C++ file in the tree (git's tracked files,
or a walk that skips build directories) and every `target_link_libraries` of
the product's CMakeLists.txt, and fails naming file:line and the rule when
a layer reaches one it may not. The rules are LAYERS below: one table,
which docs/layout.md shows as a table and README's Layout section sums up.

A file belongs to the layer whose folder is the longest prefix of its path
(`client/cli/main.cc` before `client/cli/` before `client/`). An include
names a layer the same way; an include of a path that is in no layer is a
library's (Abseil, gRPC, the standard library) and is held only to the
layer's `forbid` list. An include that names a folder of the tree but no
file in it (a stale path after a move) fails too.
"""

import os
import re
import subprocess
import sys

# layer: (folders it may include, external prefixes it may not, why)
# A layer may always include its own folder. "tensormorph/v1/" is the
# generated API (proto's).
LAYERS = {
    "core/": (
        ["core/"],
        ["grpc", "grpcpp/", "google/protobuf/", "tensormorph/v1/", "spdlog/",
         "httplib.h", "png.h"],
        "numerics and formats: Abseil, a JSON parser, libcurl, libxxhash only"),
    "core/diff_parts/": (
        [],
        ["grpc", "grpcpp/", "google/protobuf/", "tensormorph/v1/", "spdlog/",
         "nlohmann/", "curl/", "xxhash.h"],
        "the diff-in-parts rules server and clients share: Abseil only, "
        "so the client library can link them"),
    "core/util/": (
        [],
        ["grpc", "grpcpp/", "google/protobuf/", "tensormorph/v1/", "spdlog/",
         "nlohmann/", "curl/", "xxhash.h"],
        "error reasons and UTF-8: Abseil only, so the proto runtime and the "
        "client library can link them (target tensormorph_util)"),
    "proto/": (
        ["tensormorph/v1/", "core/util/"], ["spdlog/", "nlohmann/"],
        "the schema, its generated code and its small runtime "
        "(status_mapping, json_print, received_chunk)"),
    "render/": (
        ["proto/", "tensormorph/v1/"], ["spdlog/", "grpcpp/"],
        "pictures and files made from replies: proto and libpng only"),
    "server/": (
        ["core/", "proto/", "tensormorph/v1/"], [],
        "the service: proto and core, never a client or the HTTP port"),
    "server/http/": (
        ["server/gateway_metadata.h", "core/request_limits.h", "core/util/",
         "render/", "proto/", "tensormorph/v1/"], [],
        "the HTTP port: a client of the service over its in-process "
        "channel, so no server internals but the metadata keys it sets"),
    "server/main.cc": (
        ["server/", "core/", "proto/", "tensormorph/v1/"], [],
        "tensormorphd's entry point wires the service and the HTTP port"),
    "client/": (
        ["proto/", "tensormorph/v1/", "core/diff_parts/", "core/util/"],
        ["spdlog/", "nlohmann/", "httplib.h", "png.h"],
        "the client library: the generated stubs and core's shared diff "
        "rules only, so a dashboard that links it pulls in no server or "
        "numerics"),
    "client/python/": (
        ["client/", "proto/", "tensormorph/v1/", "core/util/"],
        ["spdlog/", "nlohmann/", "httplib.h", "png.h"],
        "the Python package's compiled read (tensormorph._native): the "
        "client library and its error reasons, nothing of the server"),
    "client/embedded/": (
        ["client/", "server/", "core/", "proto/", "tensormorph/v1/"], [],
        "Client::Embedded(): the service in-process behind a Client"),
    "client/cli/": (
        ["client/", "core/", "render/", "proto/", "tensormorph/v1/"], [],
        "the command's library: the client, core's local computations "
        "(check manifests, gates), render"),
    "client/cli/main.cc": (
        ["client/", "server/", "core/", "render/", "proto/",
         "tensormorph/v1/"], [],
        "the tensormorph binary's entry point: without --server it starts "
        "the embedded server"),
    "client/cli/health_command.cc": (
        ["client/", "server/", "core/", "render/", "proto/",
         "tensormorph/v1/"], [],
        "linked into the binary, not the library: it starts the embedded "
        "server to report its health"),
    "deploy/demo/": (
        ["tests/support/"], [],
        "the quick start's demo is written by the tests' fixture writers "
        "(built without GTest): the one outside user of tests/"),
    "tests/": (
        ["core/", "proto/", "render/", "server/", "client/", "deploy/",
         "tensormorph/v1/"], [],
        "tests may use every layer"),
}

# Folders of the tree an include can name (the first segment); a name
# outside them is a library's.
TREE_ROOTS = ("core/", "proto/", "render/", "server/", "client/", "deploy/",
              "tests/", "cmake/")
GENERATED = ("tensormorph/v1/",)

# CMake targets of the product and the layer (a folder in LAYERS) each is.
TARGETS = {
    "tensormorph_core": "core/",
    "tensormorph_diff_parts": "core/diff_parts/",
    "tensormorph_util": "core/util/",
    "tensormorph_peer_ledger": "core/util/",
    "tensormorph_proto": "proto/",
    "tensormorph_render": "render/",
    "tensormorph_server": "server/",
    "tensormorph_gateway": "server/http/",
    "tensormorphd": "server/main.cc",
    "tensormorph_client": "client/",
    "tensormorph_client_embedded": "client/embedded/",
    "tensormorph_python_native": "client/python/",
    "tensormorph_cli_lib": "client/cli/",
    "tensormorph": "client/cli/main.cc",
    "tensormorph_fixture_writers": "deploy/demo/",
    "tensormorph-make-demo": "deploy/demo/",
}
ALIASES = {
    "Tensormorph::core": "tensormorph_core",
    "Tensormorph::diff_parts": "tensormorph_diff_parts",
    "Tensormorph::proto": "tensormorph_proto",
    "Tensormorph::render": "tensormorph_render",
    "Tensormorph::server": "tensormorph_server",
    "Tensormorph::gateway": "tensormorph_gateway",
    "Tensormorph::client": "tensormorph_client",
    "Tensormorph::client_embedded": "tensormorph_client_embedded",
}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
CPP_EXT = (".h", ".hh", ".hpp", ".cc", ".cpp", ".cxx", ".c", ".inc")
SKIP_DIRS = {".git", "node_modules", "__pycache__"}


def layer_of(path):
    """The layer (a key of LAYERS) `path` is in, or None: longest prefix."""
    best = None
    for key in LAYERS:
        if path == key or (key.endswith("/") and path.startswith(key)):
            if best is None or len(key) > len(best):
                best = key
    return best


def within(path, folder):
    return path == folder or (folder.endswith("/") and path.startswith(folder))


def allowed(src_layer, target):
    """True when a file of `src_layer` may include the tree path `target`
    (or a target of that layer may link one of layer `target`)."""
    # Its own folder, but not a layer nested in it (client/ is not
    # client/embedded/); an entry point's (a file layer's) own folder too.
    own = src_layer if src_layer.endswith("/") else os.path.dirname(
        src_layer) + "/"
    if within(target, own) and layer_of(target) in (src_layer, own):
        return True
    # An allowed folder allows everything under it.
    return any(within(target, ok) for ok in LAYERS[src_layer][0])


def tracked_files(src):
    try:
        out = subprocess.run(["git", "-C", src, "ls-files", "-z"],
                             check=True, capture_output=True).stdout
        files = [f for f in out.decode().split("\0") if f]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for root, dirs, names in os.walk(src):
        rel = os.path.relpath(root, src)
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and
                   not (rel == "." and d.startswith("build"))]
        for n in names:
            files.append(os.path.normpath(os.path.join(rel, n)))
    return files


def check_includes(src, files, failures):
    existing = set(files)
    for path in files:
        if not path.endswith(CPP_EXT):
            continue
        layer = layer_of(path)
        if layer is None:
            continue
        with open(os.path.join(src, path), encoding="utf-8",
                  errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                name = m.group(2)
                where = f"{path}:{lineno}"
                if name.startswith(TREE_ROOTS):
                    if name not in existing:
                        failures.append(f"{where}: includes \"{name}\", which "
                                        "is no file of the tree (a stale path?)")
                    elif not allowed(layer, name):
                        failures.append(
                            f"{where}: {layer} may not include \"{name}\" "
                            f"({layer_of(name)}); {layer} may include "
                            f"{', '.join(LAYERS[layer][0]) or 'only itself'}: "
                            f"{LAYERS[layer][2]}")
                elif name.startswith(GENERATED):
                    if not allowed(layer, name):
                        failures.append(f"{where}: {layer} may not include the "
                                        f"generated API \"{name}\": "
                                        f"{LAYERS[layer][2]}")
                else:
                    for bad in LAYERS[layer][1]:
                        if name.startswith(bad):
                            failures.append(
                                f"{where}: {layer} may not include <{name}>: "
                                f"{LAYERS[layer][2]}")
                            break


LINK = re.compile(r"target_link_libraries\s*\(\s*([\w:.-]+)([^)]*)\)", re.S)


def check_links(src, files, failures):
    for path in files:
        if os.path.basename(path) != "CMakeLists.txt" or path.startswith(
                "tests/"):
            continue
        with open(os.path.join(src, path), encoding="utf-8") as f:
            text = f.read()
        for m in LINK.finditer(text):
            target = ALIASES.get(m.group(1), m.group(1))
            if target not in TARGETS:
                continue
            layer = TARGETS[target]
            lineno = text.count("\n", 0, m.start()) + 1
            for dep in m.group(2).split():
                dep = ALIASES.get(dep, dep)
                if dep not in TARGETS or dep == target:
                    continue
                dep_layer = TARGETS[dep]
                if not allowed(layer, dep_layer):
                    failures.append(
                        f"{path}:{lineno}: {target} ({layer}) may not link "
                        f"{dep} ({dep_layer}): {LAYERS[layer][2]}")


def main(argv):
    src = os.path.abspath(argv[1] if len(argv) > 1 else
                          os.path.join(os.path.dirname(__file__), "..", ".."))
    files = tracked_files(src)
    failures = []
    check_includes(src, files, failures)
    check_links(src, files, failures)
    for f in failures:
        print(f"FAIL {f}")
    n = sum(1 for p in files if p.endswith(CPP_EXT))
    print(f"layout_layers: {n} C++ files, {len(LAYERS)} layers, "
          f"{len(failures)} violations")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
