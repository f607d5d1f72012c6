"""tensormorph: the Python client of tensormorphd.

    import tensormorph as tm
    c = tm.connect("gpu-box:7431", token=None, tls_ca=None)  # a remote server
    c = tm.connect("a:7431,b:7431")  # several equivalent servers (or
                                     # "dns:///name:7431"): calls take turns
                                     # and fail over once
    c = tm.local()                # a private tensormorphd for local files
    c = tm.connect("gpu-box:7431", timeout=10)  # every call's deadline (s)
    c = tm.connect("gpu-box:7431", tls_ca="ca.pem", tls_cert="me.pem", tls_key="me.key")
    c.read_path                   # "native": reads through tensormorph._native (the C++
                                  # client) when built; "grpcio" else, or with native=False
    c.checkpoints("/models")      # ListCheckpoints
    c.tensors("model.gguf")       # [TensorInfo(name, shape, dtype, encoding, parts)]
    a = c.read("model.gguf", "blk.0.attn_q.weight", slice="0:4, ::2")  # float32
    t = c.tensor("model.gguf", "blk.0.attn_q.weight")  # lazy; t.shape, len(t)
    a = t[3:7, ::-2]              # numpy basic indexing, float32 numpy
    raw = c.read("model.gguf", "blk.0.attn_q.weight", raw=True)  # RawArray (uint8)
    c.scalars("model.gguf", "blk.0.attn_q.weight", [(3, 100), (0, 0)])
    for r in c.diff("quant.gguf", "source/", fail_on=["sqnr_db<25"],
                    progress=print): ...
    c.check("model.gguf", progress=print)  # {"findings", "hashes", "summary"}
    c.arch("model.gguf"); c.info("model.gguf"); c.info("model.gguf", "blk.0.attn_q.weight")
    c.stats("model.gguf", "blk.0.attn_q.weight")
    c.heatmap("model.gguf", "blk.0.attn_q.weight", mode="group")  # the CLI's --mode names

Paths may be str or pathlib.Path. Every call takes timeout= (seconds).
Failed calls raise tm.Error with .code ("NOT_FOUND", "DEADLINE_EXCEEDED",
...), .message and .details; errors pickle (ProcessPoolExecutor workers).
"""

from ._client import (DEFAULT_UNARY_TIMEOUT, Client, Error, RawArray, StoredPart, TensorInfo,
                      connect, to_dict)
from ._endpoints import resolve_endpoints
from ._local import LocalClient, find_tensormorphd, local
from ._tensor import Tensor

__all__ = ["DEFAULT_UNARY_TIMEOUT", "Client", "Error", "LocalClient", "RawArray",
           "StoredPart", "Tensor", "TensorInfo", "connect",
           "find_tensormorphd", "local", "resolve_endpoints", "to_dict"]
__version__ = "0.1.0"
