"""The compiled read path: ReadSlice through the C++ client (tensormorph._native,
built from client/python/native) straight into the result's numpy array,
with the GIL released while bytes arrive. grpcio's read copies each reply
twice more under the GIL (tests/bench/NOTES.md); this one copies once, from
where gRPC received the bytes.

A Client uses it when the module imports (a build with Python's headers
staged it beside these files) and the Client was made from settings the
C++ client can take (connect(), dial(), local()); otherwise it reads through
grpcio, with the same results and errors. `Client.read_path` says which.
"""

from __future__ import annotations

import importlib
import math
import os
import threading
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ._client import Error
from .v1 import tensormorph_pb2 as pb

_native: Any = None  # the module, when it imports
_IMPORT_ERROR: Optional[ImportError] = None
try:
    _native = importlib.import_module("._native", __package__)
except ImportError as e:  # a pure-Python install
    _IMPORT_ERROR = e

#: The process whose gRPC (the system's libgrpc, not grpcio's) the module
#: started, with its first C++ client. A fork()ed child has none of its
#: threads: a C++ client made there waits forever, and the parent's share
#: their sockets. Children read through grpcio, as a pure-Python install.
_grpc_pid: Optional[int] = None


def available() -> bool:
    """True when tensormorph._native imports and can be used in this
    process (not a fork()ed child of one that used it)."""
    return _native is not None and _grpc_pid in (None, os.getpid())


def require() -> None:
    """Raises ImportError, saying why, when the module does not import."""
    if _native is None:
        raise ImportError(f"tensormorph._native is not available ({_IMPORT_ERROR}); "
                          "build the package with Python's headers (python3-dev)")


@dataclass(frozen=True)
class NativeSettings:
    """What the C++ client connects with: the target as connect() took it
    (a server list and dns:/// included), the token, and the TLS files'
    PEM bytes (b"" for none)."""

    target: str
    token: str = ""
    tls_ca: bytes = b""
    tls_cert: bytes = b""
    tls_key: bytes = b""


def _error(e: Exception) -> Error:
    """A tm.Error equal to the grpcio path's: code, message, reason and
    metadata. `details` names the reason when the server attached one; a
    code's generic reason is left to Error.reason, as gRPC's C++ client
    does not tell it apart from no reason at all."""
    code, message, reason, metadata, attached = e.args
    details: Dict[str, Any] = ({"reason": reason, "domain": _native.ERROR_DOMAIN,
                                "metadata": dict(metadata)} if attached else {})
    return Error(code, message, details)


class NativeReads:
    """The C++ clients of one Python Client, made on first use: one per
    deadline a read asks for (the C++ client's deadline is its option; in
    practice one, the Client's), the _MAX_READERS last used kept (a read
    in flight keeps its own alive)."""

    _MAX_READERS = 4

    def __init__(self, settings: NativeSettings) -> None:
        require()
        self._settings = settings
        self._readers: Dict[float, Any] = {}
        self._lock = threading.Lock()

    def _reader(self, deadline: Optional[float]) -> Any:
        global _grpc_pid
        key = math.inf if deadline is None else float(deadline)
        with self._lock:
            reader = self._readers.pop(key, None)
            if reader is None:
                s = self._settings
                try:
                    reader = _native.connect(s.target, s.token, s.tls_ca, s.tls_cert,
                                             s.tls_key, key)
                except _native.CallError as e:
                    raise _error(e) from None
                _grpc_pid = _grpc_pid or os.getpid()
                while len(self._readers) >= self._MAX_READERS:
                    del self._readers[next(iter(self._readers))]  # the least recent
            self._readers[key] = reader  # the most recent last
            return reader

    def read(self, request: "pb.ReadSliceRequest",
             deadline: Optional[float]) -> Tuple["pb.SliceHeader", np.ndarray]:
        """The slice's header and its bytes (uint8, header.total_bytes);
        `deadline` in seconds, None for none. Ctrl-C cancels the call and
        raises KeyboardInterrupt."""
        got: Dict[str, Any] = {}

        def alloc(header_bytes: bytes) -> np.ndarray:
            got["header"] = pb.SliceHeader.FromString(header_bytes)
            got["buf"] = np.empty(got["header"].total_bytes, dtype=np.uint8)
            return got["buf"]

        reader = self._reader(deadline)
        try:
            reader.read(request.SerializeToString(), alloc)
        except _native.CallError as e:
            raise _error(e) from None
        return got["header"], got["buf"]

    def close(self) -> None:
        """Drops the C++ clients (their channels close)."""
        with self._lock:
            self._readers.clear()
