#!/usr/bin/python3
"""Writes llama.cpp importance matrices (numpy and struct only) in both of
llama-imatrix's forms, from the definitions in its tools/imatrix/imatrix.cpp:

GGUF (save_imatrix): general.type "imatrix", imatrix.datasets (array of
strings), imatrix.chunk_count and imatrix.chunk_size (uint32), and per entry
NAME.in_sum2 (F32, ne = [columns, experts]) and NAME.counts (F32, ne = [1,
experts]); ggml writes n_dims without trailing 1s, tensors 32-byte aligned.

legacy .dat (save_imatrix_legacy): int32 entry count; per entry (sorted by
name) int32 name length, name, int32 ncall = ceil(max count / chunk_size),
int32 nval, float32 (in_sum2 / count) * ncall per value (1 * ncall where the
expert's count is 0); then int32 chunk count, int32 dataset name length, the
name.

And llama-quantize's weights of each form (load_imatrix / load_legacy_imatrix):
GGUF in_sum2 / count in float32 (1 where the count is 0); legacy value /
ncall in float32.
"""
import math
import struct

import numpy as np


class Entry:
    def __init__(self, name, in_sum2, counts):
        self.name = name
        self.in_sum2 = np.asarray(in_sum2, dtype=np.float32)  # [experts, columns]
        self.counts = np.asarray(counts, dtype=np.float32)    # [experts]
        assert self.in_sum2.ndim == 2 and self.in_sum2.shape[0] == self.counts.size

    def ncall(self, chunk_size):
        return int(math.ceil(float(self.counts.max()) / chunk_size))


def _gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _kv_string(key, value):
    return _gguf_string(key) + struct.pack("<I", 8) + _gguf_string(value)


def _kv_u32(key, value):
    return _gguf_string(key) + struct.pack("<II", 4, value)


def _kv_str_array(key, values):
    out = _gguf_string(key) + struct.pack("<IIQ", 9, 8, len(values))
    for v in values:
        out += _gguf_string(v)
    return out


def _ne(shape_ggml):
    """ggml_n_dims: trailing dimensions of 1 dropped (at least one kept)."""
    ne = list(shape_ggml)
    while len(ne) > 1 and ne[-1] == 1:
        ne.pop()
    return ne


def gguf_bytes(entries, chunk_count, chunk_size, datasets, extra_tensors=()):
    """The GGUF form. extra_tensors: (name, float32 array in ggml order)."""
    tensors = []
    for e in sorted(entries, key=lambda e: e.name):
        experts, columns = e.in_sum2.shape
        tensors.append((e.name + ".in_sum2", [columns, experts], e.in_sum2))
        tensors.append((e.name + ".counts", [1, experts], e.counts))
    for name, arr in extra_tensors:
        arr = np.asarray(arr, dtype=np.float32)
        tensors.append((name, list(arr.shape[::-1]), arr))
    kv = (_kv_string("general.type", "imatrix") + _kv_str_array("imatrix.datasets", datasets)
          + _kv_u32("imatrix.chunk_count", chunk_count)
          + _kv_u32("imatrix.chunk_size", chunk_size))
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 4) + kv
    data = b""
    for name, ne, arr in tensors:
        ne = _ne(ne)
        head += _gguf_string(name) + struct.pack("<I", len(ne))
        head += b"".join(struct.pack("<q", n) for n in ne)
        head += struct.pack("<IQ", 0, len(data))  # GGML_TYPE_F32, offset
        data += arr.astype("<f4").tobytes()
        data += b"\0" * (-len(data) % 32)
    head += b"\0" * (-len(head) % 32)
    return head + data


def legacy_values(e, chunk_size):
    """What save_imatrix_legacy stores per value, in float32."""
    ncall = np.float32(e.ncall(chunk_size))
    per_value_count = np.repeat(e.counts, e.in_sum2.shape[1])
    values = e.in_sum2.reshape(-1).copy()
    zero = per_value_count == 0
    values[zero] = np.float32(1)
    count = np.where(zero, np.float32(1), per_value_count).astype(np.float32)
    return ((values / count).astype(np.float32) * ncall).astype(np.float32)


def legacy_bytes(entries, chunk_count, chunk_size, dataset):
    out = struct.pack("<i", len(entries))
    for e in sorted(entries, key=lambda e: e.name):
        name = e.name.encode()
        values = legacy_values(e, chunk_size)
        out += struct.pack("<i", len(name)) + name
        out += struct.pack("<ii", e.ncall(chunk_size), values.size)
        out += values.astype("<f4").tobytes()
    ds = dataset.encode()
    return out + struct.pack("<ii", chunk_count, len(ds)) + ds


def gguf_weights(e):
    """llama-quantize's weights of a GGUF entry: [experts, columns] float32."""
    out = np.ones_like(e.in_sum2)
    for j, c in enumerate(e.counts):
        if c > 0:
            out[j] = (e.in_sum2[j] / np.float32(c)).astype(np.float32)
    return out


def legacy_weights(e, chunk_size):
    """llama-quantize's weights of the legacy entry: flat float32."""
    ncall = e.ncall(chunk_size)
    values = legacy_values(e, chunk_size)
    return (values / np.float32(ncall)).astype(np.float32) if ncall > 0 else values
