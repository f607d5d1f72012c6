"""tensormorph: the Python client of tensormorphd.

    import tensormorph as tm
    c = tm.connect("gpu-box:7431", token=None, tls_ca=None)  # a remote server
    c = tm.local()                # a private tensormorphd for local files
    c.checkpoints("/models")      # ListCheckpoints
    c.tensors("model.gguf")       # [TensorInfo(name, shape, dtype, encoding, parts)]
    a = c.read("model.gguf", "blk.0.attn_q.weight", slice="0:4, ::2")  # float32
    raw = c.read("model.gguf", "blk.0.attn_q.weight", raw=True)  # RawArray (uint8)
    c.scalars("model.gguf", "blk.0.attn_q.weight", [(3, 100), (0, 0)])
    for r in c.diff("quant.gguf", "source/", fail_on=["sqnr_db<25"]): ...
    c.stats("model.gguf", "blk.0.attn_q.weight")
    c.heatmap("model.gguf", "blk.0.attn_q.weight", mode="group")

Failed calls raise tm.Error with .code ("NOT_FOUND", ...) and .message.
"""

from ._client import Client, Error, RawArray, StoredPart, TensorInfo, connect, to_dict
from ._local import LocalClient, find_tensormorphd, local

__all__ = ["Client", "Error", "LocalClient", "RawArray", "StoredPart", "TensorInfo",
           "connect", "find_tensormorphd", "local", "to_dict"]
__version__ = "0.1.0"
