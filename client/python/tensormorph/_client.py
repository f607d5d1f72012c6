"""The client: one gRPC channel to a tensormorphd, answers as Python values.

Thin on purpose: each method is one call of proto/tensormorph/v1's service,
its reply turned into dataclasses, dicts and numpy arrays. Dict keys are the
proto's field names (snake_case); enums are their names; int64 are ints.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Optional, Sequence,
                    Tuple, Union)

import grpc
import numpy as np

from .v1 import tensormorph_pb2 as pb
from .v1 import tensormorph_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from ._router import RoutedClient

# Replies are at most Limits.max_reply_bytes (64 MiB by default).
_MAX_MESSAGE = 256 * 1024 * 1024


class Error(Exception):
    """A failed call: `code` is the gRPC code's name ("NOT_FOUND", ...),
    `message` the server's message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _error(e: grpc.RpcError) -> Error:
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    return Error(code.name if code is not None else "UNKNOWN", details or "")


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


class RawArray(np.ndarray):
    """Stored bytes (numpy.uint8) of a raw read. `stored_dtype` names the
    stored dtype ("Q8_0", "BF16", ...) and `stored_shape` the result's shape
    in elements; the array is [rows, bytes per row] (flat for a scalar)."""

    stored_dtype: str
    stored_shape: Tuple[int, ...]

    def __array_finalize__(self, obj: Any) -> None:
        self.stored_dtype = getattr(obj, "stored_dtype", "")
        self.stored_shape = getattr(obj, "stored_shape", ())


_HEATMAP_MODES = {
    "mean": pb.HEATMAP_MODE_MEAN, "absmax": pb.HEATMAP_MODE_ABSMAX,
    "error": pb.HEATMAP_MODE_ERROR, "group": pb.HEATMAP_MODE_GROUP,
    "zeros": pb.HEATMAP_MODE_ZEROS,
}


class Client:
    """A connection to one tensormorphd. Use `connect()` or `local()`.

    Checkpoint paths are as the server sees them: relative to one of its
    roots, or absolute inside one. A client from `local()` makes relative
    paths absolute against the current directory first."""

    def __init__(self, channel: grpc.Channel, token: Optional[str] = None,
                 path_base: Optional[str] = None, timeout: Optional[float] = None) -> None:
        """`timeout` (seconds) is every call's deadline; None: none."""
        self._channel = channel
        self._stub = pb_grpc.TensormorphStub(channel)
        self._metadata = [("authorization", f"Bearer {token}")] if token else None
        self._path_base = path_base
        self._timeout = timeout

    # -- plumbing -----------------------------------------------------------

    def _path(self, p: str) -> str:
        if self._path_base is not None and p and not os.path.isabs(p):
            return os.path.join(self._path_base, p)
        return p

    def _unary(self, method: str, request: Any) -> Any:
        try:
            return getattr(self._stub, method)(request, metadata=self._metadata,
                                               timeout=self._timeout)
        except grpc.RpcError as e:
            raise _error(e) from None

    def _stream(self, method: str, request: Any) -> Iterator[Any]:
        call = getattr(self._stub, method)(request, metadata=self._metadata,
                                           timeout=self._timeout)
        try:
            yield from call
        except grpc.RpcError as e:
            raise _error(e) from None
        finally:
            call.cancel()

    def close(self) -> None:
        """Closes the channel."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- calls --------------------------------------------------------------

    def server_info(self) -> Dict[str, Any]:
        """GetServerInfo: version, roots, limits and counters."""
        return to_dict(self._unary("GetServerInfo", pb.GetServerInfoRequest()))

    def checkpoint(self, ckpt: str) -> Dict[str, Any]:
        """GetCheckpoint: format, files, sizes and metadata of a checkpoint."""
        return to_dict(self._unary("GetCheckpoint",
                                   pb.GetCheckpointRequest(checkpoint=self._path(ckpt))))

    def checkpoints(self, root: str = "", max_depth: Optional[int] = None) -> List[Dict[str, Any]]:
        """ListCheckpoints under `root` (every page): dicts with path, format,
        file_count, total_bytes, stored_tensor_count, modified_unix_seconds."""
        out: List[Dict[str, Any]] = []
        token = ""
        while True:
            req = pb.ListCheckpointsRequest(directory=self._path(root), page_token=token)
            if max_depth is not None:
                req.max_depth = max_depth
            token = ""
            for e in self._stream("ListCheckpoints", req):
                if e.path:
                    d = to_dict(e)
                    d.pop("next_page_token")
                    out.append(d)
                token = e.next_page_token or token
            if not token:
                return out

    def tensors(self, ckpt: str, filter: str = "", parts: bool = False) -> List[TensorInfo]:
        """ListTensors: the checkpoint's tensors sorted by name, optionally
        those matching the glob `filter`; with `parts`, the stored tensors."""
        req = pb.ListTensorsRequest(checkpoint=self._path(ckpt), filter=filter, parts=parts)
        out = [TensorInfo.from_proto(t) for t in self._stream("ListTensors", req)]
        return out

    def read(self, ckpt: str, tensor: str, slice: Optional[str] = None,
             raw: bool = False, part: bool = False, max_chunk_bytes: int = 0) -> np.ndarray:
        """ReadSlice: a numpy-syntax slice ("0:4, ::2"; None = all) of a
        tensor as float32, or with `raw` its stored bytes as a `RawArray`
        (uint8 with `stored_dtype`). The stream is written into one buffer
        allocated from the header's total_bytes, chunk by chunk (of at most
        `max_chunk_bytes`; 0 = the server's limit, 1 MiB by default)."""
        req = pb.ReadSliceRequest(
            checkpoint=self._path(ckpt), tensor=tensor, slice=slice or "",
            mode=pb.OUTPUT_MODE_RAW if raw else pb.OUTPUT_MODE_FLOAT32, part=part,
            max_chunk_bytes=max_chunk_bytes)
        buf: Optional[np.ndarray] = None
        view: Optional[memoryview] = None
        header = None
        pos = 0
        elements = 0
        for chunk in self._stream("ReadSlice", req):
            if header is None:
                if not chunk.HasField("header"):
                    raise Error("INTERNAL", "ReadSlice's first message has no header")
                header = chunk.header
                buf = np.empty(header.total_bytes, dtype=np.uint8)
                view = memoryview(buf)
            if chunk.element_offset != elements:
                raise Error("INTERNAL", f"ReadSlice chunk at element {chunk.element_offset}, "
                            f"expected {elements}")
            n = len(chunk.data)
            if pos + n > header.total_bytes:
                raise Error("INTERNAL", f"ReadSlice sent more than its {header.total_bytes} bytes")
            view[pos:pos + n] = chunk.data
            pos += n
            elements += chunk.element_count
        if header is None:
            raise Error("INTERNAL", "ReadSlice ended without a header")
        if pos != header.total_bytes or elements != header.num_elements:
            raise Error("INTERNAL", f"ReadSlice ended after {pos} of {header.total_bytes} bytes")
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

    def scalars(self, ckpt: str, tensor: str,
                indices: Iterable[Union[Sequence[int], int]],
                part: bool = False, reference: str = "",
                reference_tensor: str = "") -> List[Dict[str, Any]]:
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
            reference_tensor=reference_tensor))
        return [to_dict(s) for s in rep.scalars]

    def diff(self, quant: str, source: str, filter: Optional[str] = None,
             fail_on: Optional[Sequence[str]] = None, top_k: Optional[int] = None,
             worst_groups: Optional[int] = None) -> Iterator[Dict[str, Any]]:
        """QuantDiff: yields one dict per tensor (TensorDiffReport's fields,
        "event": "tensor") as each finishes, then the summary ("event":
        "summary"). `fail_on` gates look like "sqnr_db<25"."""
        req = pb.QuantDiffRequest(checkpoint=self._path(quant), reference=self._path(source),
                                  filter=filter or "", fail_on=list(fail_on or []))
        if top_k is not None:
            req.top_k = top_k
        if worst_groups is not None:
            req.worst_groups = worst_groups
        for ev in self._stream("QuantDiff", req):
            kind = ev.WhichOneof("event")
            if kind == "tensor":
                yield {"event": "tensor", **to_dict(ev.tensor)}
            elif kind == "summary":
                yield {"event": "summary", **to_dict(ev.summary)}

    def stats(self, ckpt: str, tensor: str, bins: int = 0,
              range: Optional[Tuple[float, float]] = None, reference: str = "",
              reference_tensor: str = "", group: Optional[int] = None) -> Dict[str, Any]:
        """ComputeStats: moments, zeros, a histogram and level usage; the
        histogram, code_histogram and levels are numpy arrays."""
        req = pb.ComputeStatsRequest(checkpoint=self._path(ckpt), tensor=tensor, bins=bins,
                                     reference=self._path(reference),
                                     reference_tensor=reference_tensor)
        if range is not None:
            req.range_min, req.range_max = range
        if group is not None:
            req.group = group
        d = to_dict(self._unary("ComputeStats", req))
        d["histogram"] = np.asarray(d["histogram"], dtype=np.int64)
        d["code_histogram"] = np.asarray(d["code_histogram"], dtype=np.int64)
        d["levels"] = np.asarray(d["levels"], dtype=np.float64)
        return d

    def heatmap(self, ckpt: str, tensor: str, mode: str = "group", width: int = 256,
                height: int = 256, leading: Sequence[int] = (), reference: str = "",
                reference_tensor: str = "",
                region: Optional[Tuple[int, int, int, int]] = None) -> Dict[str, Any]:
        """GetHeatmap: `cells` (height x width float64: the mode's reduction,
        mode one of mean, absmax, error, group, zeros) and `groups` (height x
        width int64 group ids, -1 without groups), with the edges and range.
        `region` is (row_begin, row_end, col_begin, col_end)."""
        if mode not in _HEATMAP_MODES:
            raise ValueError(f"mode {mode!r}: expected one of {sorted(_HEATMAP_MODES)}")
        req = pb.GetHeatmapRequest(checkpoint=self._path(ckpt), tensor=tensor,
                                   mode=_HEATMAP_MODES[mode], width=width, height=height,
                                   leading=list(leading), reference=self._path(reference),
                                   reference_tensor=reference_tensor)
        if region is not None:
            req.row_begin, req.row_end, req.col_begin, req.col_end = region
        d = to_dict(self._unary("GetHeatmap", req))
        hw = (d["height"], d["width"])
        d["cells"] = np.asarray(d.pop("values"), dtype=np.float64).reshape(hw)
        d["groups"] = np.asarray(d["groups"], dtype=np.int64).reshape(hw)
        d["pruned"] = (np.asarray(d["pruned"], dtype=np.float64).reshape(hw)
                       if d["pruned"] else None)
        d["row_edges"] = np.asarray(d["row_edges"], dtype=np.int64)
        d["col_edges"] = np.asarray(d["col_edges"], dtype=np.int64)
        return d


def connect(address: str, token: Optional[str] = None,
            tls_ca: Optional[str] = None) -> "Union[Client, RoutedClient]":
    """A client of the tensormorphd at "host:port". `token` is sent as
    "authorization: Bearer <token>"; `tls_ca` (a PEM file) makes the channel
    TLS, verifying the server against that CA.

    Several servers, "a:7431,b:7431" or "dns:///name:7431" (every address
    the name resolves to, as a headless Service's does), give a
    `RoutedClient` with the same calls: each checkpoint is found on the
    servers holding it (whole, or some shard files each) and every call goes
    to one that holds its data (see _router.py). A bad list, an empty
    address or one without a port raises tm.Error INVALID_ARGUMENT naming
    the entry; a dns:/// name that does not resolve, UNAVAILABLE.

    A dns:/// name always gives a RoutedClient, even while it resolves to
    one address: it resolves the name again as pods come and go. A list of
    plain addresses that comes to one ("a:1, a:1") is a plain Client."""
    from ._router import (RoutedClient, check_server_list, has_dns_name, is_endpoint_list,
                          resolve_endpoints)
    # A malformed address is the caller's to fix: INVALID_ARGUMENT naming
    # it, before gRPC would dial it (UNKNOWN, and C-core's log, for "").
    check_server_list(address)
    if is_endpoint_list(address):
        endpoints = resolve_endpoints(address)
        if not endpoints:
            raise Error("UNAVAILABLE", f"server list '{address}' resolves to no address")
        if len(endpoints) > 1 or has_dns_name(address):
            return RoutedClient(endpoints, token=token, tls_ca=tls_ca, targets=address)
        return dial(endpoints[0], token=token, tls_ca=tls_ca)
    return dial(address, token=token, tls_ca=tls_ca)


def channel(address: str, tls_ca: Optional[str] = None) -> grpc.Channel:
    """A gRPC channel to exactly one target, TLS verified against `tls_ca`
    (a PEM file) when given, with the message size limits replies need."""
    options = [("grpc.max_receive_message_length", _MAX_MESSAGE),
               ("grpc.max_send_message_length", _MAX_MESSAGE)]
    if tls_ca is not None:
        with open(tls_ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        return grpc.secure_channel(address, creds, options=options)
    return grpc.insecure_channel(address, options=options)


def dial(address: str, token: Optional[str] = None, tls_ca: Optional[str] = None) -> Client:
    """A Client of exactly one gRPC target, as connect() gives for one
    "host:port"."""
    return Client(channel(address, tls_ca), token=token)
