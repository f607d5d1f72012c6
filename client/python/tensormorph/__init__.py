"""tensormorph: the Python client of tensormorphd.

    import tensormorph as tm
    c = tm.connect("gpu-box:7431", token=None, tls_ca=None)  # a remote server
    c = tm.connect("a:7431,b:7431")  # several (or "dns:///name:7431"), each
                                     # call sent to one holding its data
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
from ._router import RoutedClient, resolve_endpoints

__all__ = ["Client", "Error", "LocalClient", "RawArray", "RoutedClient", "StoredPart",
           "TensorInfo", "connect", "find_tensormorphd", "local", "resolve_endpoints", "to_dict"]
__version__ = "0.1.0"
