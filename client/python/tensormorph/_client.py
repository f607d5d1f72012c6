"""The client: gRPC channels to a tensormorphd (or to several equivalent
ones), answers as Python values.

Thin on purpose: each method is one call of proto/tensormorph/v1's service,
its reply turned into dataclasses, dicts and numpy arrays. Dict keys are the
proto's field names (snake_case); enums are their names; int64 are ints.
Several servers are what a standard gRPC client does with them, as the C++
client (client/client.h): calls take turns, and fail over once.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import warnings
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Optional,
                    Sequence, Tuple, Union)

import grpc
import numpy as np

from .v1 import tensormorph_pb2 as pb
from .v1 import tensormorph_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from ._native_read import NativeReads, NativeSettings
    from ._tensor import Tensor

# Replies are at most Limits.max_reply_bytes (64 MiB by default).
_MAX_MESSAGE = 256 * 1024 * 1024

#: Seconds a unary call may take when neither the client nor the call sets a
#: timeout: client/client.h's kDefaultUnaryTimeout. A reply that takes longer
#: is a server in trouble, and a script must not wait for it forever.
#: Streams (reads, listings, diffs, checks) get no default deadline, as in
#: C++: a diff of 400 GB takes time.
DEFAULT_UNARY_TIMEOUT = 60.0

#: A path as the calls take it: str or any os.PathLike (pathlib.Path).
PathLike = Union[str, "os.PathLike[str]"]
#: A call's progress callback: called with each progress event as a dict.
ProgressCallback = Callable[[Dict[str, Any]], None]


class Error(Exception):
    """A failed call: `code` is the gRPC code's name ("NOT_FOUND",
    "DEADLINE_EXCEEDED", "UNAVAILABLE", ...), `message` the server's message
    and `details` a dict of machine-readable details: from a
    google.rpc.ErrorInfo in the status, "reason" (e.g. "TENSOR_NOT_FOUND"),
    "domain" and "metadata"; empty when the server sent none (and on the
    native read path when the reason is its code's generic one: `reason`
    and `metadata` are the same on both read paths).

    Errors pickle with all three, so an error raised in a
    `concurrent.futures.ProcessPoolExecutor` or `multiprocessing.Pool`
    worker arrives in the parent as the same error."""

    def __init__(self, code: str, message: str,
                 details: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details: Dict[str, Any] = dict(details or {})

    @property
    def reason(self) -> str:
        """The machine-readable reason ("TENSOR_NOT_FOUND", "LIMIT_EXCEEDED",
        ...; docs/errors.md lists them): the server's google.rpc.ErrorInfo
        reason, or the code's generic one when none came (a refusal made
        before the server's handler ran, a transport error), as the C++
        client's ErrorReasonOf. Branch on this, not on the message."""
        sent = self.details.get("reason")
        return str(sent) if sent else _GENERIC_REASONS.get(self.code, "UNKNOWN")

    @property
    def metadata(self) -> Dict[str, str]:
        """The ErrorInfo's metadata ({"limit": "max_slice_bytes", ...})."""
        return dict(self.details.get("metadata") or {})

    def __reduce__(self) -> Tuple[Any, ...]:
        # Exception's default rebuilds from self.args, the one formatted
        # string, which is not this constructor's signature.
        return (self.__class__, (self.code, self.message, self.details))


#: Each code's generic reason: core/util/error_reason.cc's table (the
#: reasons marked generic), for errors that carry no ErrorInfo.
_GENERIC_REASONS: Dict[str, str] = {
    "CANCELLED": "CANCELLED", "UNKNOWN": "UNKNOWN",
    "INVALID_ARGUMENT": "REQUEST_INVALID", "DEADLINE_EXCEEDED": "DEADLINE_EXCEEDED",
    "NOT_FOUND": "NOT_FOUND", "ALREADY_EXISTS": "ALREADY_EXISTS",
    "PERMISSION_DENIED": "PERMISSION_DENIED", "RESOURCE_EXHAUSTED": "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION": "FAILED_PRECONDITION", "ABORTED": "ABORTED",
    "OUT_OF_RANGE": "OUT_OF_RANGE", "UNIMPLEMENTED": "UNIMPLEMENTED",
    "INTERNAL": "INTERNAL", "UNAVAILABLE": "UNAVAILABLE", "DATA_LOSS": "DATA_LOSS",
    "UNAUTHENTICATED": "UNAUTHENTICATED",
}


def _error(e: grpc.RpcError) -> Error:
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    trailers = e.trailing_metadata() if hasattr(e, "trailing_metadata") else None
    status = next((v for k, v in (trailers or ()) if k == "grpc-status-details-bin"), None)
    return Error(code.name if code is not None else "UNKNOWN", details or "",
                 _status_details(status) if isinstance(status, bytes) else None)


_ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"


def _fields(b: bytes) -> Iterator[Tuple[int, Union[int, bytes]]]:
    """A serialized message's (field number, value) pairs: varints as int,
    length-delimited fields as bytes; fixed-width fields skipped."""
    i, n = 0, len(b)
    while i < n:
        key, i = _varint(b, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(b, i)
            yield number, value
        elif wire == 2:
            size, i = _varint(b, i)
            if size > n - i:
                raise Error("INTERNAL", "a field runs past its message")
            yield number, b[i:i + size]
            i += size
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise Error("INTERNAL", f"wire type {wire} of field {number}")


def _status_details(status: bytes) -> Dict[str, Any]:
    """The machine-readable part of a google.rpc.Status (the trailer
    grpc-status-details-bin): from its google.rpc.ErrorInfo, "reason",
    "domain" and "metadata" (a dict). Read with a small wire-format walk,
    as googleapis-common-protos is not a dependency; a trailer that does
    not parse gives no details rather than hiding the error."""
    out: Dict[str, Any] = {}
    try:
        for number, any_msg in _fields(status):
            if number != 3 or not isinstance(any_msg, bytes):
                continue  # google.rpc.Status.details: repeated Any
            parts = {k: v for k, v in _fields(any_msg) if isinstance(v, bytes)}
            if parts.get(1, b"").decode() != _ERROR_INFO_TYPE:
                continue
            metadata: Dict[str, str] = {}
            for k, v in _fields(parts.get(2, b"")):
                if k == 1 and isinstance(v, bytes):
                    out["reason"] = v.decode()
                elif k == 2 and isinstance(v, bytes):
                    out["domain"] = v.decode()
                elif k == 3 and isinstance(v, bytes):
                    entry = {ek: ev for ek, ev in _fields(v) if isinstance(ev, bytes)}
                    metadata[entry.get(1, b"").decode()] = entry.get(2, b"").decode()
            out["metadata"] = metadata
    except (Error, UnicodeDecodeError):
        return {}
    return out


def _fspath(p: PathLike) -> str:
    return os.fspath(p)


def _check_timeout(timeout: Optional[float]) -> None:
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout {timeout!r}: expected seconds > 0, math.inf or None")


def _check_budgets(budget_bpw: Optional[float], budget_bytes: Optional[int]) -> None:
    # Checked here rather than left to protobuf, whose raw errors name no
    # argument (a budget_bytes past int64 raised "Value out of range").
    if budget_bpw is not None and not (
            isinstance(budget_bpw, (int, float)) and not isinstance(budget_bpw, bool)
            and math.isfinite(budget_bpw) and budget_bpw > 0):
        raise ValueError(f"budget_bpw {budget_bpw!r}: expected a positive finite number "
                         "of bits per weight")
    if budget_bytes is not None and not (
            isinstance(budget_bytes, (int, np.integer)) and not isinstance(budget_bytes, bool)
            and 0 < budget_bytes < 2 ** 63):
        raise ValueError(f"budget_bytes {budget_bytes!r}: expected a whole number of bytes "
                         "from 1 to 2**63 - 1")


def to_dict(msg: Any) -> Dict[str, Any]:
    """A proto message as a dict: every field, by its proto name, with enums
    as names, unset `optional` fields and unset sub-messages as None."""
    out: Dict[str, Any] = {}
    for f in msg.DESCRIPTOR.fields:
        value = getattr(msg, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            out[f.name] = dict(value)
        elif f.label == f.LABEL_REPEATED:
            if f.message_type is not None:
                out[f.name] = [to_dict(v) for v in value]
            elif f.enum_type is not None:
                out[f.name] = [f.enum_type.values_by_number[v].name for v in value]
            else:
                out[f.name] = list(value)
        elif f.message_type is not None:
            out[f.name] = to_dict(value) if msg.HasField(f.name) else None
        elif f.containing_oneof is not None and not msg.HasField(f.name):
            # proto3 `optional` (a synthetic oneof) left unset
            out[f.name] = None
        elif f.enum_type is not None:
            ev = f.enum_type.values_by_number.get(value)
            out[f.name] = ev.name if ev is not None else value
        else:
            out[f.name] = value
    return out


@dataclass(frozen=True)
class StoredPart:
    """A stored tensor a logical tensor is decoded from."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    file: str
    offset: int
    size_bytes: int


@dataclass(frozen=True)
class TensorInfo:
    """A logical tensor of a checkpoint (ListTensors' TensorInfo).

    `dtype` is the encoding's scheme ("Q4_K", "BF16", ...); `encoding` the
    whole Encoding as a dict (convention, bits, granularity, ...)."""

    name: str
    shape: Tuple[int, ...]
    dtype: str
    encoding: Dict[str, Any]
    parts: List[StoredPart] = field(default_factory=list)
    num_elements: int = 0
    stored_bytes: int = 0

    @staticmethod
    def from_proto(t: "pb.TensorInfo") -> "TensorInfo":
        return TensorInfo(
            name=t.name, shape=tuple(t.shape), dtype=t.encoding.scheme,
            encoding=to_dict(t.encoding),
            parts=[StoredPart(p.name, p.dtype, tuple(p.shape), p.file, p.offset,
                              p.size_bytes) for p in t.parts],
            num_elements=t.num_elements, stored_bytes=t.stored_bytes)


def _varint(b: bytes, i: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(b) or shift > 63:
            raise Error("INTERNAL", "ReadSlice reply: a varint runs past its message")
        c = b[i]
        i += 1
        value |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return value, i


class _SliceChunkView:
    """Where a serialized SliceChunk's fields are, without copying its data:
    header (the serialized SliceHeader, or None), element_offset,
    element_count, and the data's start and size in the message. Unknown
    fields are skipped as the wire format says; a message that does not
    parse is INTERNAL."""

    __slots__ = ("header", "element_offset", "element_count", "data_start", "data_size")

    def __init__(self, b: bytes) -> None:
        self.header: Optional[bytes] = None
        self.element_offset = self.element_count = self.data_start = self.data_size = 0
        i, n = 0, len(b)
        while i < n:
            key, i = _varint(b, i)
            field_number, wire = key >> 3, key & 7
            if wire == 0:
                value, i = _varint(b, i)
                if field_number == 2:
                    self.element_offset = value
                elif field_number == 3:
                    self.element_count = value
            elif wire == 2:
                size, i = _varint(b, i)
                if size > n - i:
                    raise Error("INTERNAL", "ReadSlice reply: a field runs past its message")
                if field_number == 1:
                    self.header = b[i:i + size]
                elif field_number == 4:
                    self.data_start, self.data_size = i, size
                i += size
            elif wire in (1, 5):
                i += 8 if wire == 1 else 4
                if i > n:
                    raise Error("INTERNAL", "ReadSlice reply: a field runs past its message")
            else:
                raise Error("INTERNAL", f"ReadSlice reply: wire type {wire} of field "
                            f"{field_number}")


class RawArray(np.ndarray):
    """Stored bytes (numpy.uint8) of a raw read. `stored_dtype` names the
    stored dtype ("Q8_0", "BF16", ...) and `stored_shape` the result's shape
    in elements; the array is [rows, bytes per row] (flat for a scalar)."""

    stored_dtype: str
    stored_shape: Tuple[int, ...]

    def __array_finalize__(self, obj: Any) -> None:
        self.stored_dtype = getattr(obj, "stored_dtype", "")
        self.stored_shape = getattr(obj, "stored_shape", ())


# The names `tensormorph heatmap --mode` takes.
_HEATMAP_MODES = {
    "value": pb.HEATMAP_MODE_MEAN, "absmax": pb.HEATMAP_MODE_ABSMAX,
    "error": pb.HEATMAP_MODE_ERROR, "group": pb.HEATMAP_MODE_GROUP,
    "zeros": pb.HEATMAP_MODE_ZEROS, "sq-error": pb.HEATMAP_MODE_SQ_ERROR,
}
# Names this client took before it used the CLI's: old name -> CLI's name.
_OLD_HEATMAP_MODES = {"mean": "value"}


class _Backend:
    """One server of a client's target: its address as written (a list's
    entry; "" for a channel handed to Client), its channel and the stubs."""

    __slots__ = ("address", "channel", "stub", "raw_streams")

    def __init__(self, address: str, channel: grpc.Channel) -> None:
        self.address = address
        self.channel = channel
        self.stub = pb_grpc.TensormorphStub(channel)
        self.raw_streams = {"ReadSlice": channel.unary_stream(
            "/tensormorph.v1.Tensormorph/ReadSlice",
            request_serializer=pb.ReadSliceRequest.SerializeToString,
            response_deserializer=None)}


# Failures that depend on which server a call went to: named after it.
_NAMED_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


class Client:
    """A connection to a tensormorphd, or to several equivalent ones. Use
    `connect()` or `local()`.

    Checkpoint paths are as the server sees them: relative to one of its
    roots, or absolute inside one. A client from `local()` makes relative
    paths absolute against the current directory first.

    Several servers (connect("a:7431,b:7431")): a channel per entry (a
    dns:/// entry's spread over its addresses by gRPC's round_robin); each
    call goes to the next entry in turn, from a random first one; a call
    that fails UNAVAILABLE before any reply reached the caller is tried once
    more on the next entry (a lone dns:/// entry: on its channel again);
    UNAVAILABLE and DEADLINE_EXCEEDED messages then start "server ADDRESS: ".
    Nothing is placed, routed by data or merged: the servers are equivalent
    (they fetch the bytes they lack themselves)."""

    def __init__(self, channel: grpc.Channel, token: Optional[str] = None,
                 path_base: Optional[str] = None, timeout: Optional[float] = None,
                 address: str = "",
                 others: Sequence[Tuple[str, grpc.Channel]] = ()) -> None:
        """`timeout` (seconds) is every call's deadline; None: C++'s
        defaults (DEFAULT_UNARY_TIMEOUT for unary calls, none for streams);
        math.inf: none at all. `address` names `channel`'s server in
        messages; `others` are more servers, (address, channel) each."""
        _check_timeout(timeout)
        self._channel = channel
        self._backends = [_Backend(address, channel)] + [_Backend(a, c) for a, c in others]
        self._retry_on_same = not others and address.startswith("dns:///")
        # A random first server: each process would otherwise start at the
        # first. (next() of a count is atomic under the GIL.)
        self._turn = itertools.count(random.randrange(len(self._backends)))
        self._metadata = [("authorization", f"Bearer {token}")] if token else None
        self._path_base = path_base
        self._timeout = timeout
        self._native: Optional["NativeReads"] = None

    def _read_natively(self, settings: "NativeSettings", native: Optional[bool]) -> None:
        """Reads through the C++ client from `settings` (the ones this
        client's channels were made from): with `native` None when
        tensormorph._native imports, True always (ImportError without it),
        False never. connect(), dial() and local() call it."""
        from ._native_read import NativeReads, available
        if native or (native is None and available()):
            self._native = NativeReads(settings)

    @property
    def read_path(self) -> str:
        """How read() and tensor(...)[...] receive a slice: "native" (the
        C++ client, tensormorph._native: one copy, the GIL released) or
        "grpcio". Same results and errors either way. A fork()ed child of a
        process that read natively reads through grpcio."""
        from ._native_read import available
        return "native" if self._native is not None and available() else "grpcio"

    def __repr__(self) -> str:
        addresses = ",".join(b.address for b in self._backends) or "a channel"
        return f"<tensormorph.Client of {addresses}, reads: {self.read_path}>"

    # -- plumbing -----------------------------------------------------------

    def _path(self, p: PathLike) -> str:
        p = _fspath(p)
        if self._path_base is not None and p and not os.path.isabs(p):
            return os.path.join(self._path_base, p)
        return p

    def _deadline(self, timeout: Optional[float], stream: bool) -> Optional[float]:
        """The seconds gRPC is given for a call: the call's timeout, else
        the client's, else C++'s default; None for no deadline."""
        _check_timeout(timeout)
        t = timeout if timeout is not None else self._timeout
        if t is None:
            return None if stream else DEFAULT_UNARY_TIMEOUT
        return None if math.isinf(t) else t

    def _attempts(self) -> List[_Backend]:
        """The servers a call may try, in order: one, or with several (or a
        dns:/// name) a first one in turn and the one to fail over to."""
        n = len(self._backends)
        if n == 1 and not self._retry_on_same:
            return self._backends
        i = next(self._turn) % n
        return [self._backends[i], self._backends[(i + 1) % n]]

    def _named(self, err: Error, b: _Backend,
               before: Optional[Tuple[_Backend, Error]] = None) -> Error:
        """`err` of a call to `b`, its message naming `b` (and the server
        tried before it) when the client has several."""
        if (len(self._backends) == 1 and not self._retry_on_same) or \
                err.code not in _NAMED_CODES:
            return err
        message = f"server {b.address}: {err.message}"
        if before is not None:
            message += f" (tried after server {before[0].address}: {before[1].message})"
        return Error(err.code, message, err.details)

    def _unary(self, method: str, request: Any, timeout: Optional[float] = None) -> Any:
        attempts = self._attempts()
        before: Optional[Tuple[_Backend, Error]] = None
        for k, b in enumerate(attempts):
            try:
                return getattr(b.stub, method)(request, metadata=self._metadata,
                                               timeout=self._deadline(timeout, False))
            except grpc.RpcError as e:
                err = _error(e)
            if k + 1 == len(attempts) or err.code != "UNAVAILABLE":
                raise self._named(err, b, before) from None
            before = (b, err)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _stream(self, method: str, request: Any, timeout: Optional[float] = None,
                raw: bool = False) -> Iterator[Any]:
        """The call's replies as messages, or with `raw` as their
        serialized bytes. Tried on the next server only while no reply has
        been yielded."""
        attempts = self._attempts()
        before: Optional[Tuple[_Backend, Error]] = None
        delivered = False
        for k, b in enumerate(attempts):
            stub = b.raw_streams[method] if raw else getattr(b.stub, method)
            call = stub(request, metadata=self._metadata, timeout=self._deadline(timeout, True))
            try:
                for reply in call:
                    delivered = True
                    yield reply
                return
            except grpc.RpcError as e:
                err = _error(e)
            finally:
                call.cancel()
            if delivered or k + 1 == len(attempts) or err.code != "UNAVAILABLE":
                raise self._named(err, b, before) from None
            before = (b, err)

    def close(self) -> None:
        """Closes the channels."""
        for b in self._backends:
            b.channel.close()
        if self._native is not None:
            self._native.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- calls --------------------------------------------------------------
    # Every call takes `timeout` (seconds; None: the client's, see __init__)
    # and paths as str or pathlib.Path.

    def server_info(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """GetServerInfo: version, roots, limits and counters."""
        return to_dict(self._unary("GetServerInfo", pb.GetServerInfoRequest(), timeout))

    def checkpoint(self, ckpt: PathLike, timeout: Optional[float] = None) -> Dict[str, Any]:
        """GetCheckpoint: format, files, sizes and metadata of a checkpoint."""
        return to_dict(self._unary("GetCheckpoint",
                                   pb.GetCheckpointRequest(checkpoint=self._path(ckpt)),
                                   timeout))

    def info(self, ckpt: PathLike, tensor: Optional[str] = None, part: bool = False,
             timeout: Optional[float] = None) -> Union[Dict[str, Any], TensorInfo]:
        """As `tensormorph info`: without `tensor`, the checkpoint
        (GetCheckpoint, as checkpoint()); with it, that one tensor
        (GetTensor) as a TensorInfo with its stored parts."""
        if tensor is None:
            return self.checkpoint(ckpt, timeout=timeout)
        rep = self._unary("GetTensor", pb.GetTensorRequest(
            checkpoint=self._path(ckpt), tensor=tensor, part=part), timeout)
        return TensorInfo.from_proto(rep.tensor)

    def arch(self, ckpt: PathLike, timeout: Optional[float] = None) -> Dict[str, Any]:
        """GetArchitecture, as `tensormorph arch`: {"root": the module tree
        (nested dicts: name, path, params, bytes, tensors, scheme,
        scheme_params, boundary, children), "boundaries": how many nodes
        start a new quantization scheme}."""
        return to_dict(self._unary("GetArchitecture", pb.GetArchitectureRequest(
            checkpoint=self._path(ckpt)), timeout))

    def checkpoints(self, root: PathLike = "", max_depth: Optional[int] = None,
                    timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """ListCheckpoints under `root` (every page): dicts with path, format,
        file_count, total_bytes, stored_tensor_count, modified_unix_seconds,
        and broken (what the header read found broken; empty if nothing).
        A safetensors directory is listed first, then the .gguf files and
        the checkpoints in subdirectories beside its shards; the directory's
        own path opens its safetensors alone."""
        out: List[Dict[str, Any]] = []
        token = ""
        while True:
            req = pb.ListCheckpointsRequest(directory=self._path(root), page_token=token)
            if max_depth is not None:
                req.max_depth = max_depth
            token = ""
            for e in self._stream("ListCheckpoints", req, timeout):
                if e.path:
                    d = to_dict(e)
                    d.pop("next_page_token")
                    out.append(d)
                token = e.next_page_token or token
            if not token:
                return out

    def tensors(self, ckpt: PathLike, filter: str = "", parts: bool = False,
                timeout: Optional[float] = None, page_size: int = 0) -> List[TensorInfo]:
        """ListTensors: the checkpoint's tensors sorted by name, optionally
        those matching the glob `filter`; with `parts`, the stored tensors.
        Every page: `page_size` (0: the whole list in one call) bounds each
        call, and the pages' tokens are followed to the end."""
        out: List[TensorInfo] = []
        token = ""
        while True:
            req = pb.ListTensorsRequest(checkpoint=self._path(ckpt), filter=filter,
                                        parts=parts, page_size=page_size, page_token=token)
            token = ""
            for t in self._stream("ListTensors", req, timeout):
                if t.next_page_token:  # the page's last message: only the token
                    token = t.next_page_token
                else:
                    out.append(TensorInfo.from_proto(t))
            if not token:
                return out

    def tensor(self, ckpt: PathLike, name: str, part: bool = False,
               timeout: Optional[float] = None) -> "Tensor":
        """A lazy handle of one tensor that indexes like a numpy array:
        `c.tensor(ckpt, name)[3:7, ::2]` reads only the rows and columns it
        needs and returns float32 numpy, by numpy's basic indexing rules
        (see tensormorph.Tensor). Nothing is read until it is indexed or
        its shape asked for; `timeout` applies to each of its calls."""
        from ._tensor import Tensor
        return Tensor(self, self._path(ckpt), name, part=part, timeout=timeout)

    def read(self, ckpt: PathLike, tensor: str, slice: Optional[str] = None,
             raw: bool = False, part: bool = False, max_chunk_bytes: int = 0,
             timeout: Optional[float] = None) -> np.ndarray:
        """ReadSlice: a numpy-syntax slice ("0:4, ::2"; None = all) of a
        tensor as float32, or with `raw` its stored bytes as a `RawArray`
        (uint8 with `stored_dtype`). The stream is written into one buffer
        allocated from the header's total_bytes, chunk by chunk (of at most
        `max_chunk_bytes`; 0 = the server's limit, 1 MiB by default), by
        the C++ client with the GIL released, or by grpcio (`read_path`
        says which). Ctrl-C ends a read (KeyboardInterrupt) on either.
        For numpy indexing (`[3:7, ::2]`), see tensor()."""
        req = pb.ReadSliceRequest(
            checkpoint=self._path(ckpt), tensor=tensor, slice=slice or "",
            mode=pb.OUTPUT_MODE_RAW if raw else pb.OUTPUT_MODE_FLOAT32, part=part,
            max_chunk_bytes=max_chunk_bytes)
        if self.read_path == "native":
            assert self._native is not None
            header, buf = self._native.read(req, self._deadline(timeout, True))
        else:
            header, buf = self._read_grpcio(req, timeout)
        shape = tuple(header.shape)
        if not raw:
            return buf.view("<f4").reshape(shape)
        rows = math.prod(shape[:-1]) if shape else 1
        if shape and rows and header.total_bytes % rows == 0:
            arr = buf.reshape(shape[:-1] + (header.total_bytes // rows,))
        else:
            arr = buf
        out = arr.view(RawArray)
        out.stored_dtype = header.dtype
        out.stored_shape = shape
        return out

    def _read_grpcio(self, req: "pb.ReadSliceRequest",
                     timeout: Optional[float]) -> Tuple["pb.SliceHeader", np.ndarray]:
        """read()'s slice through grpcio: its header and bytes."""
        buf: Optional[np.ndarray] = None
        header = None
        pos = 0
        elements = 0
        # Each reply arrives as its serialized bytes and is copied once, by
        # numpy, from where its data field lies into the result: parsing
        # it into a SliceChunk would copy every MiB once more (a 256 MiB
        # read went at 0.4 GB/s that way, at 0.9 this way).
        for message in self._stream("ReadSlice", req, timeout, raw=True):
            chunk = _SliceChunkView(message)
            if header is None:
                if chunk.header is None:
                    raise Error("INTERNAL", "ReadSlice's first message has no header")
                header = pb.SliceHeader.FromString(chunk.header)
                buf = np.empty(header.total_bytes, dtype=np.uint8)
            if chunk.element_offset != elements:
                raise Error("INTERNAL", f"ReadSlice chunk at element {chunk.element_offset}, "
                            f"expected {elements}")
            n = chunk.data_size
            if pos + n > header.total_bytes:
                raise Error("INTERNAL", f"ReadSlice sent more than its {header.total_bytes} bytes")
            if n:
                buf[pos:pos + n] = np.frombuffer(message, np.uint8, n, chunk.data_start)
            pos += n
            elements += chunk.element_count
        if header is None:
            raise Error("INTERNAL", "ReadSlice ended without a header")
        if pos != header.total_bytes or elements != header.num_elements:
            raise Error("INTERNAL", f"ReadSlice ended after {pos} of {header.total_bytes} bytes")
        assert buf is not None  # a header allocates it
        return header, buf

    def scalars(self, ckpt: PathLike, tensor: str,
                indices: Iterable[Union[Sequence[int], int]],
                part: bool = False, reference: PathLike = "",
                reference_tensor: str = "",
                timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """InspectScalars: per index (a coordinate tuple, or an int as a flat
        index; tuples' results come first) a dict with index, raw_code,
        scale, zero_point, offset, group, level, step, value, params, ...;
        with `reference` (a source checkpoint) also "source": the source
        element paired as the diff pairs it (index, value, error = value -
        source, error_steps)."""
        coords: List[int] = []
        flat: List[int] = []
        for i in indices:
            if isinstance(i, (int, np.integer)):
                flat.append(int(i))
            else:
                coords.extend(int(c) for c in i)
        rep = self._unary("InspectScalars", pb.InspectScalarsRequest(
            checkpoint=self._path(ckpt), tensor=tensor, coords=coords,
            flat_indices=flat, part=part,
            reference=self._path(reference) if reference else "",
            reference_tensor=reference_tensor), timeout)
        return [to_dict(s) for s in rep.scalars]

    def diff(self, quant: PathLike, source: PathLike, filter: Optional[str] = None,
             fail_on: Optional[Sequence[str]] = None, top_k: Optional[int] = None,
             worst_groups: Optional[int] = None,
             progress: Optional[ProgressCallback] = None,
             timeout: Optional[float] = None,
             imatrix: PathLike = "") -> Iterator[Dict[str, Any]]:
        """QuantDiff: yields one dict per tensor (TensorDiffReport's fields,
        "event": "tensor") as each finishes, then the summary ("event":
        "summary"). `fail_on` gates look like "sqnr_db<25". `progress`, if
        given, is called with each progress event (DiffProgress's fields:
        tensors_done, tensors_total, bytes_done, bytes_total,
        elapsed_seconds), at least once a second while the diff runs.
        `imatrix`, a llama.cpp importance matrix (GGUF or .dat), adds each
        tensor's weighted_sq_err, weighted_source_energy and
        weighted_sqnr_db (imatrix_use says whether it applied)."""
        req = pb.QuantDiffRequest(checkpoint=self._path(quant), reference=self._path(source),
                                  filter=filter or "", fail_on=list(fail_on or []),
                                  imatrix=self._path(imatrix) if imatrix else "")
        if top_k is not None:
            req.top_k = top_k
        if worst_groups is not None:
            req.worst_groups = worst_groups
        for ev in self._stream("QuantDiff", req, timeout):
            kind = ev.WhichOneof("event")
            if kind == "tensor":
                yield {"event": "tensor", **to_dict(ev.tensor)}
            elif kind == "summary":
                yield {"event": "summary", **to_dict(ev.summary)}
            elif kind == "progress" and progress is not None:
                progress(to_dict(ev.progress))

    def compare(self, source: PathLike, quantizations: Sequence[PathLike],
                filter: Optional[str] = None, budget_bpw: Optional[float] = None,
                budget_bytes: Optional[int] = None, base: int = 0,
                progress: Optional[ProgressCallback] = None,
                timeout: Optional[float] = None,
                imatrix: PathLike = "") -> Dict[str, Any]:
        """CompareQuantizations, as `tensormorph compare`: {"rows": one flat
        dict per (source tensor, quantization) that holds it (reference_name,
        shape, count, quantization: its index, checkpoint, then CompareCell's
        fields), ready for pandas.DataFrame(rows); "summary": the
        CompareSummary (totals, layers, and with a budget the mix)}.
        `budget_bpw` or `budget_bytes` (one at most) asks for the mix;
        `progress` is called with each progress event. `imatrix`, a
        llama.cpp importance matrix, adds each cell's weighted figures
        (imatrix_use, weighted_error, weighted_sqnr_db, as diff's) and puts
        dominance and the mix on the weighted error (summary["weighted"]).
        Raises TypeError when `quantizations` is one path rather than a
        sequence of them (a str would be taken a character at a time), and
        ValueError when both budgets are given (the request holds one) or
        one is out of range: budget_bpw not a positive finite number,
        budget_bytes not a whole number from 1 to 2**63 - 1 (the request's
        int64), as the CLI refuses --budget-bpw and --budget-bytes."""
        if isinstance(quantizations, (str, bytes, os.PathLike)):
            raise TypeError("quantizations must be a sequence of paths, not one path: "
                            f"[{quantizations!r}]")
        if budget_bpw is not None and budget_bytes is not None:
            raise ValueError("give budget_bpw or budget_bytes, not both")
        _check_budgets(budget_bpw, budget_bytes)
        req = pb.CompareQuantizationsRequest(
            source=self._path(source), quantizations=[self._path(q) for q in quantizations],
            filter=filter or "", base=base)
        if imatrix:  # set only when given: a set but empty path is refused
            req.imatrix = self._path(imatrix)
        if budget_bpw is not None:
            req.budget_bits_per_weight = budget_bpw
        if budget_bytes is not None:
            req.budget_bytes = budget_bytes
        out: Dict[str, Any] = {"rows": [], "summary": None}
        for ev in self._stream("CompareQuantizations", req, timeout):
            kind = ev.WhichOneof("event")
            if kind == "row":
                for q, cell in enumerate(ev.row.cells):
                    if not cell.present:
                        continue
                    out["rows"].append({
                        "reference_name": ev.row.reference_name,
                        "shape": list(ev.row.shape), "count": ev.row.count,
                        "quantization": q, "checkpoint": req.quantizations[q],
                        **to_dict(cell)})
            elif kind == "summary":
                out["summary"] = to_dict(ev.summary)
            elif kind == "progress" and progress is not None:
                progress(to_dict(ev.progress))
        return out
    def importance_matrix(self, path: PathLike,
                          timeout: Optional[float] = None) -> Dict[str, Any]:
        """GetImportanceMatrix: a llama.cpp imatrix file (GGUF or legacy
        .dat) as a dict: form, chunk_count, chunk_size, datasets and
        "entries" (per tensor name, columns, experts, counts, chunks,
        experts_never_reached)."""
        rep = self._unary("GetImportanceMatrix",
                          pb.GetImportanceMatrixRequest(path=self._path(path)), timeout)
        return to_dict(rep)

    def check(self, ckpt: PathLike, fail_level: str = "error", hashes: bool = False,
              manifest: Optional[str] = None, source: PathLike = "",
              progress: Optional[ProgressCallback] = None,
              timeout: Optional[float] = None) -> Dict[str, Any]:
        """CheckCheckpoint, as `tensormorph check`: {"findings": [dicts with
        rule, severity, tensor, file, expected, actual, hint, count,
        worst_group], "hashes": [per stored tensor, with `hashes`],
        "summary": {errors, warnings, infos, rules, failed, ...}}.
        `fail_level` ("info", "warning", "error") sets summary["failed"];
        `manifest` is a manifest's JSON text to verify the bytes against;
        `source` a full-precision checkpoint to hold the quantized tensors
        to. `progress` is called with each progress event (CheckProgress's
        fields)."""
        levels = {"info": pb.CHECK_SEVERITY_INFO, "warning": pb.CHECK_SEVERITY_WARNING,
                  "error": pb.CHECK_SEVERITY_ERROR}
        if fail_level not in levels:
            raise ValueError(f"fail_level {fail_level!r}: expected one of {sorted(levels)}")
        req = pb.CheckCheckpointRequest(checkpoint=self._path(ckpt),
                                        fail_level=levels[fail_level], hashes=hashes,
                                        verify_manifest=manifest or "",
                                        source=self._path(source) if source else "")
        out: Dict[str, Any] = {"findings": [], "hashes": [], "summary": None}
        for ev in self._stream("CheckCheckpoint", req, timeout):
            kind = ev.WhichOneof("event")
            if kind == "finding":
                out["findings"].append(to_dict(ev.finding))
            elif kind == "hash":
                out["hashes"].append(to_dict(ev.hash))
            elif kind == "summary":
                out["summary"] = to_dict(ev.summary)
            elif kind == "progress" and progress is not None:
                progress(to_dict(ev.progress))
        return out

    def stats(self, ckpt: PathLike, tensor: str, bins: int = 0,
              range: Optional[Tuple[float, float]] = None, reference: PathLike = "",
              reference_tensor: str = "", group: Optional[int] = None,
              timeout: Optional[float] = None) -> Dict[str, Any]:
        """ComputeStats: moments, zeros, a histogram and level usage; the
        histogram, code_histogram and levels are numpy arrays."""
        req = pb.ComputeStatsRequest(checkpoint=self._path(ckpt), tensor=tensor, bins=bins,
                                     reference=self._path(reference),
                                     reference_tensor=reference_tensor)
        if range is not None:
            req.range_min, req.range_max = range
        if group is not None:
            req.group = group
        d = to_dict(self._unary("ComputeStats", req, timeout))
        d["histogram"] = np.asarray(d["histogram"], dtype=np.int64)
        d["code_histogram"] = np.asarray(d["code_histogram"], dtype=np.int64)
        d["levels"] = np.asarray(d["levels"], dtype=np.float64)
        return d

    def heatmap(self, ckpt: PathLike, tensor: str, mode: str = "group", width: int = 256,
                height: int = 256, leading: Sequence[int] = (), reference: PathLike = "",
                reference_tensor: str = "",
                region: Optional[Tuple[int, int, int, int]] = None,
                timeout: Optional[float] = None,
                imatrix: PathLike = "") -> Dict[str, Any]:
        """GetHeatmap: `cells` (height x width float64: the mode's reduction)
        and `groups` (height x width int64 group ids, -1 without groups),
        with the edges and range. `mode` is one of `tensormorph heatmap
        --mode`'s: value (a cell's mean), absmax, error (needs `reference`),
        group, zeros, sq-error (each cell's sum of squared errors against
        `reference`); "mean" still works and warns (DeprecationWarning).
        `region` is (row_begin, row_end, col_begin, col_end). `imatrix`, a
        llama.cpp importance matrix (GGUF or .dat), weighs sq-error's terms
        by their columns' importance (imatrix_use says it did)."""
        if mode in _OLD_HEATMAP_MODES:
            new = _OLD_HEATMAP_MODES[mode]
            warnings.warn(f"heatmap mode {mode!r} is now {new!r}, as the CLI names it",
                          DeprecationWarning, stacklevel=2)
            mode = new
        if mode not in _HEATMAP_MODES:
            raise ValueError(f"mode {mode!r}: expected one of {sorted(_HEATMAP_MODES)}")
        req = pb.GetHeatmapRequest(checkpoint=self._path(ckpt), tensor=tensor,
                                   mode=_HEATMAP_MODES[mode], width=width, height=height,
                                   leading=list(leading), reference=self._path(reference),
                                   reference_tensor=reference_tensor,
                                   imatrix=self._path(imatrix) if imatrix else "")
        if region is not None:
            req.row_begin, req.row_end, req.col_begin, req.col_end = region
        d = to_dict(self._unary("GetHeatmap", req, timeout))
        hw = (d["height"], d["width"])
        d["cells"] = np.asarray(d.pop("values"), dtype=np.float64).reshape(hw)
        d["groups"] = np.asarray(d["groups"], dtype=np.int64).reshape(hw)
        d["pruned"] = (np.asarray(d["pruned"], dtype=np.float64).reshape(hw)
                       if d["pruned"] else None)
        d["row_edges"] = np.asarray(d["row_edges"], dtype=np.int64)
        d["col_edges"] = np.asarray(d["col_edges"], dtype=np.int64)
        return d


def connect(address: str, token: Optional[str] = None,
            tls_ca: Optional[PathLike] = None,
            timeout: Optional[float] = None, tls_cert: Optional[PathLike] = None,
            tls_key: Optional[PathLike] = None, native: Optional[bool] = None) -> Client:
    """A client of the tensormorphd at "host:port". `token` is sent as
    "authorization: Bearer <token>"; `tls_ca` (a PEM file) makes the channel
    TLS, verifying the server against that CA. `tls_cert` and `tls_key`
    (PEM files, both or neither) are this client's certificate and key for
    mutual TLS (a server started with --tls-client-ca); without `tls_ca`
    the server is then verified against the system's roots.

    `timeout` (seconds) is the deadline of every call, which each call's
    own `timeout=` overrides. None: as the C++ client, unary calls get
    DEFAULT_UNARY_TIMEOUT (60 s) and streams (read, tensors, diff, check)
    none; math.inf: no deadline. A call past its deadline raises tm.Error
    DEADLINE_EXCEEDED; to a server that is down, UNAVAILABLE at once.

    Several equivalent servers, "a:7431,b:7431" or "dns:///name:7431" (every
    address the name resolves to, as a headless Service's, resolved by
    gRPC), give one Client whose calls take turns over them and fail over
    once when a server is unreachable (see Client). A bad list, an empty
    address or one without a port raises tm.Error INVALID_ARGUMENT naming
    the entry; a dns:/// name that does not resolve fails the first call
    UNAVAILABLE.

    `native`: reads (read(), tensor(...)[...]) go through the C++ client
    (tensormorph._native) when it imports (None), always (True; ImportError
    without it), or through grpcio (False); see Client.read_path."""
    from ._endpoints import check_server_list, is_endpoint_list, server_list_entries

    # A malformed address is the caller's to fix: INVALID_ARGUMENT naming
    # it, before gRPC would dial it (UNKNOWN, and C-core's log, for "").
    check_server_list(address)
    _check_client_cert(tls_cert, tls_key)
    _check_timeout(timeout)
    entries = server_list_entries(address) if is_endpoint_list(address) else [address]
    channels = [(e, channel(e, tls_ca, tls_cert, tls_key, round_robin=e.startswith("dns:///")))
                for e in entries]
    c = Client(channels[0][1], token=token, timeout=timeout, address=channels[0][0],
               others=channels[1:])
    c._read_natively(native_settings(address, token, tls_ca, tls_cert, tls_key), native)
    return c


def native_settings(address: str, token: Optional[str] = None,
                    tls_ca: Optional[PathLike] = None, tls_cert: Optional[PathLike] = None,
                    tls_key: Optional[PathLike] = None) -> "NativeSettings":
    """The C++ client's settings for the same target and credentials."""
    from ._native_read import NativeSettings
    return NativeSettings(address, token or "", _read_pem(tls_ca) or b"",
                          _read_pem(tls_cert) or b"", _read_pem(tls_key) or b"")


def _check_client_cert(tls_cert: Optional[PathLike], tls_key: Optional[PathLike]) -> None:
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("tls_cert and tls_key go together (mutual TLS): give both or neither")


def _read_pem(path: Optional[PathLike]) -> Optional[bytes]:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def channel_options() -> List[Tuple[str, int]]:
    """The C++ client's channel arguments (client/client.cc says why each):
    the message size limits replies need; a fixed 16 MiB stream window
    without gRPC's BDP probe, whose pings kept the window small on loopback
    and halved a large read; keepalive pings during calls, so that a
    stream to a peer that died without closing ends in about 80 s instead
    of never (60 s respects the server's 10 s minimum ping interval).
    And one Python-only option: a stream's replies are taken by the thread
    that iterates it, polling the call's own completion queue, instead of
    being handed from grpcio's channel thread to it one wake-up per reply;
    that cuts the client's CPU time per byte read by a third to a half
    (tests/bench/NOTES.md). Deadlines, cancel() and Ctrl-C work as
    before: grpcio's poll wakes every 200 ms to check for signals."""
    return [("grpc.max_receive_message_length", _MAX_MESSAGE),
            ("grpc.max_send_message_length", _MAX_MESSAGE),
            ("grpc.http2.bdp_probe", 0),
            ("grpc.http2.lookahead_bytes", 16 << 20),
            ("grpc.keepalive_time_ms", 60_000),
            ("grpc.keepalive_timeout_ms", 20_000),
            ("grpc.http2.max_pings_without_data", 0),
            (_SINGLE_THREADED_STREAMS, 1)]


# grpc.experimental.ChannelOptions.SingleThreadedUnaryStream's value: a
# grpcio without it passes the name on to gRPC core, which ignores it.
_SINGLE_THREADED_STREAMS = "SingleThreadedUnaryStream"


# gRPC's round_robin over every address a dns:/// name resolves to (gRPC
# resolves it again as connections fail or go): pick_first would send every
# call to the first address.
_ROUND_ROBIN = '{"loadBalancingConfig":[{"round_robin":{}}]}'


def channel(address: str, tls_ca: Optional[PathLike] = None,
            tls_cert: Optional[PathLike] = None,
            tls_key: Optional[PathLike] = None, round_robin: bool = False) -> grpc.Channel:
    """A gRPC channel to exactly one target with channel_options(): TLS
    verified against `tls_ca` (a PEM file) when given, presenting
    `tls_cert`/`tls_key` when given (mutual TLS); with `round_robin`, calls
    spread over every address the target resolves to."""
    options: List[Tuple[str, Any]] = list(channel_options())
    if round_robin:
        options.append(("grpc.service_config", _ROUND_ROBIN))
    _check_client_cert(tls_cert, tls_key)
    if tls_ca is not None or tls_cert is not None:
        creds = grpc.ssl_channel_credentials(root_certificates=_read_pem(tls_ca),
                                             private_key=_read_pem(tls_key),
                                             certificate_chain=_read_pem(tls_cert))
        return grpc.secure_channel(address, creds, options=options)
    return grpc.insecure_channel(address, options=options)


def dial(address: str, token: Optional[str] = None, tls_ca: Optional[PathLike] = None,
         timeout: Optional[float] = None, tls_cert: Optional[PathLike] = None,
         tls_key: Optional[PathLike] = None, native: Optional[bool] = None) -> Client:
    """A Client of exactly one gRPC target, as connect() gives for one
    "host:port"."""
    _check_timeout(timeout)
    c = Client(channel(address, tls_ca, tls_cert, tls_key), token=token, timeout=timeout)
    c._read_natively(native_settings(address, token, tls_ca, tls_cert, tls_key), native)
    return c

