"""Builds the Python package `tensormorph`: stubs, staging, and a wheel.

The gRPC stubs are generated from proto/tensormorph/v1/tensormorph.proto with
Debian's `protoc` and `grpc_python_plugin` every time the package is built,
never committed. Two callers:

* CMake (client/python/CMakeLists.txt) runs
  ``python3 tensormorph_build.py stage --proto-dir DIR --out BUILD/python``,
  which copies the package's .py files and writes the stubs beside them.
* pip: pyproject.toml names this file as an in-tree PEP 517 backend
  (``backend-path = ["."]``, ``requires = []``). Why not setuptools: pip
  builds in an isolated environment that must download setuptools, which
  fails without network; this backend needs only the standard library, so
  ``pip install ./client/python`` works offline in a
  ``python3 -m venv --system-site-packages`` venv.

Environment: TENSORMORPH_PROTO_DIR (the directory holding tensormorph/v1/),
PROTOC and GRPC_PYTHON_PLUGIN override the defaults.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

NAME = "tensormorph"
VERSION = "0.1.0"
HERE = Path(__file__).resolve().parent
PROTO_REL = Path("tensormorph/v1/tensormorph.proto")


def _tool(env: str, name: str) -> str:
    path = os.environ.get(env) or shutil.which(name) or f"/usr/bin/{name}"
    if not Path(path).exists():
        raise RuntimeError(
            f"{name} not found (set {env}); on Debian: apt-get install "
            "protobuf-compiler protobuf-compiler-grpc")
    return path


def default_proto_dir() -> Path:
    """The repository's proto/ directory (client/python/../../proto)."""
    env = os.environ.get("TENSORMORPH_PROTO_DIR")
    return Path(env) if env else HERE.parent.parent / "proto"


def generate_stubs(proto_dir: Path, out_dir: Path) -> List[Path]:
    """Writes tensormorph/v1/tensormorph_pb2{,_grpc}.py under out_dir, and
    tensormorph_pb2.pyi: the messages' types, for type checkers (the
    package is typed, py.typed).

    The grpc module's import of the messages is rewritten to be
    package-relative, so the package works wherever it is put.
    """
    proto = proto_dir / PROTO_REL
    if not proto.is_file():
        raise RuntimeError(f"{proto}: no such file (set TENSORMORPH_PROTO_DIR)")
    out_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run([
        _tool("PROTOC", "protoc"), f"-I{proto_dir}", f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--plugin=protoc-gen-grpc_python="
        f"{_tool('GRPC_PYTHON_PLUGIN', 'grpc_python_plugin')}", str(proto)
    ], check=True)
    v1 = out_dir / "tensormorph" / "v1"
    grpc_py = v1 / "tensormorph_pb2_grpc.py"
    text = grpc_py.read_text()
    fixed, n = re.subn(r"^from tensormorph\.v1 import tensormorph_pb2 as",
                       "from . import tensormorph_pb2 as", text, flags=re.M)
    if n != 1:
        raise RuntimeError(f"{grpc_py}: expected one import of tensormorph_pb2 "
                           f"to make relative, found {n}")
    # grpc_python_plugin copies the proto's comments into docstrings
    # verbatim; their "\\xHH" would be a (broken) escape in Python.
    fixed = re.sub(r'"""(.*?)"""',
                   lambda m: '"""' + m.group(1).replace("\\", "\\\\") + '"""',
                   fixed, flags=re.S)
    grpc_py.write_text(fixed)
    return [v1 / "tensormorph_pb2.py", v1 / "tensormorph_pb2.pyi", grpc_py]


# Package data shipped beside the .py files: py.typed marks the package as
# typed (PEP 561), so mypy and pyright read its hints.
PACKAGE_DATA = ("py.typed",)


def package_sources() -> List[Path]:
    """The package's own .py files and PACKAGE_DATA, relative to
    client/python."""
    files = [p for p in (HERE / NAME).rglob("*.py") if "__pycache__" not in p.parts]
    files += [HERE / NAME / d for d in PACKAGE_DATA]
    return sorted(p.relative_to(HERE) for p in files)


def stage(proto_dir: Path, out: Path) -> None:
    """Puts an importable package at out/tensormorph (sources + stubs)."""
    for rel in package_sources():
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HERE / rel, dst)
    generate_stubs(proto_dir, out)


# ---- PEP 517 backend ------------------------------------------------------

_METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: Python client of tensormorphd: checkpoints, tensors as numpy, quantization diffs
Requires-Python: >=3.9
Requires-Dist: grpcio
Requires-Dist: protobuf
Requires-Dist: numpy
"""

_WHEEL = """Wheel-Version: 1.0
Generator: tensormorph_build
Root-Is-Purelib: true
Tag: py3-none-any
"""


def _dist_info() -> str:
    return f"{NAME}-{VERSION}.dist-info"


def get_requires_for_build_wheel(config_settings: Optional[Dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[Dict] = None) -> str:
    d = Path(metadata_directory) / _dist_info()
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text(_METADATA)
    (d / "WHEEL").write_text(_WHEEL)
    return d.name


def build_wheel(wheel_directory: str, config_settings: Optional[Dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        stage(default_proto_dir(), Path(tmp))
        files: Dict[str, bytes] = {}
        staged = list(Path(tmp).rglob("*.py")) + list(Path(tmp).rglob("*.pyi"))
        staged += [Path(tmp) / NAME / d for d in PACKAGE_DATA]
        for p in sorted(staged):
            files[p.relative_to(tmp).as_posix()] = p.read_bytes()
    files[f"{_dist_info()}/METADATA"] = _METADATA.encode()
    files[f"{_dist_info()}/WHEEL"] = _WHEEL.encode()
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(data)}")
    record.append(f"{_dist_info()}/RECORD,,")
    files[f"{_dist_info()}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / wheel, "w",
                         zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return wheel


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("stage", help="copy the package and generate its stubs")
    st.add_argument("--proto-dir", type=Path, default=default_proto_dir())
    st.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    stage(args.proto_dir, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
