"""`Tensor`: one tensor of a checkpoint that indexes like a numpy array.

Indexing follows numpy's basic indexing: ints (negative from the end),
slices with any step (negative too), Ellipsis, None (np.newaxis) and
tuples of them. The server is asked for the smallest slice that covers the
selection (each dimension's picked indices as start:stop:step with a
positive step); what is left (dropping a dimension for an int, reversing a
negative step, inserting new axes) is applied in numpy to what arrives.
Other keys (boolean or integer arrays: advanced indexing) read the whole
tensor and index it in numpy. Invalid keys raise numpy's own errors
(IndexError for an int out of range, before any call).
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

import numpy as np

if TYPE_CHECKING:
    from ._client import Client, TensorInfo


class Tensor:
    """A lazy handle of `checkpoint`'s tensor `name` (Client.tensor()).

    `shape` and `info` ask the server once (GetTensor) and are kept;
    `dtype` is float32, the dtype every read returns (the stored encoding
    is `scheme`). `t[...]` and `np.asarray(t)` read; the result is a new
    float32 array (or a numpy scalar for a full integer index), never a
    view of the file."""

    def __init__(self, client: "Client", checkpoint: str, name: str, part: bool = False,
                 timeout: Optional[float] = None) -> None:
        self._client = client
        self.checkpoint = checkpoint
        self.name = name
        self._part = part
        self._timeout = timeout
        self._info: Optional["TensorInfo"] = None

    @property
    def info(self) -> "TensorInfo":
        """The tensor's TensorInfo (GetTensor), fetched on first use."""
        if self._info is None:
            info = self._client.info(self.checkpoint, self.name, part=self._part,
                                     timeout=self._timeout)
            assert not isinstance(info, dict)
            self._info = info
        return self._info

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.info.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float32)

    @property
    def scheme(self) -> str:
        """The stored encoding's scheme ("Q4_K", "BF16", ...)."""
        return self.info.dtype

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __repr__(self) -> str:
        shape = self._info.shape if self._info is not None else "?"
        return f"<tensormorph.Tensor {self.checkpoint}:{self.name} shape={shape}>"

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self._read("")
        return a if dtype is None else a.astype(dtype, copy=False)

    def __getitem__(self, key: Any) -> Any:
        shape = self.shape
        keys = key if isinstance(key, tuple) else (key,)
        # numpy validates the key, and raises its own errors, against a
        # stand-in of the same shape that holds no data.
        stand_in = np.lib.stride_tricks.as_strided(
            np.zeros(1, np.float32), shape=shape, strides=(0,) * len(shape))
        picked = stand_in[key]
        plan = _plan(keys, shape)
        if plan is None:  # advanced indexing: numpy on the whole tensor
            return np.asarray(self)[key]
        request, after = plan
        if picked.size == 0:
            return np.empty(np.shape(picked), np.float32)
        return self._read(", ".join(request))[tuple(after)]

    def _read(self, slice_text: str) -> np.ndarray:
        return self._client.read(self.checkpoint, self.name, slice=slice_text or None,
                                 part=self._part, timeout=self._timeout)


def _plan(keys: Tuple[Any, ...], shape: Tuple[int, ...]) -> Optional[Tuple[List[str], List[Any]]]:
    """For a basic index (already validated by numpy): the server's slice
    text per dimension and the numpy index applied to its result. None
    for a key numpy reads as advanced indexing."""
    consumed = 0
    for k in keys:
        if k is None or k is Ellipsis:
            continue
        if isinstance(k, slice):
            consumed += 1
            continue
        if isinstance(k, (bool, np.bool_)):
            return None
        try:
            operator.index(k)  # an int, a numpy integer, a 0-d integer array
        except TypeError:
            return None
        consumed += 1
    request: List[str] = []
    after: List[Any] = []
    dim = 0
    for k in keys:
        if k is None:
            after.append(None)
        elif k is Ellipsis:
            for _ in range(len(shape) - consumed):
                request.append(":")
                after.append(slice(None))
                dim += 1
        elif isinstance(k, slice):
            start, stop, step = k.indices(shape[dim])
            count = len(range(start, stop, step))
            if count == 0:
                request.append("0:0")
                after.append(slice(None))
            elif step > 0:
                request.append(f"{start}:{start + (count - 1) * step + 1}:{step}")
                after.append(slice(None))
            else:  # read ascending, reverse here
                low = start + (count - 1) * step
                request.append(f"{low}:{start + 1}:{-step}")
                after.append(slice(None, None, -1))
            dim += 1
        else:
            i = operator.index(k)
            if i < 0:
                i += shape[dim]
            request.append(f"{i}:{i + 1}")
            after.append(0)
            dim += 1
    while dim < len(shape):
        request.append(":")
        dim += 1
    return request, after
