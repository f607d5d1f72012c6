"""A sharded safetensors checkpoint with a quantization convention, and
copies of it holding some of its shards: what tensormorphd --partial-shards
serves, each its own part. The Python twin of tests/support/sharded_checkpoint.h
(same layout; the plain tensors' values are numpy's, not the C++ writer's)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np

SHARDS = ["model-00001-of-00003.safetensors",
          "model-00002-of-00003.safetensors",
          "model-00003-of-00003.safetensors"]

# name -> (dtype, shape, bytes)
Tensors = Dict[str, Tuple[str, List[int], bytes]]


def read_safetensors(path: Path) -> Tensors:
    """The tensors of a safetensors file, in header order."""
    data = path.read_bytes()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out: Tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        out[name] = (t["dtype"], list(t["shape"]), data[base + begin:base + end])
    return out


def write_safetensors(path: Path, tensors: Tensors, metadata: Dict[str, str]) -> None:
    """A safetensors file: the JSON header (padded with spaces to 8 bytes),
    then the tensors' bytes in the order given."""
    header: Dict[str, object] = {"__metadata__": metadata}
    offset = 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, raw in tensors.values():
            f.write(raw)


def _gaussian(shape: List[int], seed: int, dtype: str) -> Tuple[str, List[int], bytes]:
    v = np.random.default_rng(seed).standard_normal(int(np.prod(shape)))
    return dtype, shape, v.astype("<f2" if dtype == "F16" else "<f4").tobytes()


def write_sharded_gptq(fixtures: Path, out: Path) -> Path:
    """Writes into `out` (created) the fixture gptq_4bit_g32's two modules and
    configs with plain F16 and F32 tensors, in three shards, each module's
    qweight, qzeros, scales and g_idx in one:
      model-00001-of-00003  embed_tokens (F16), mlp.down_proj
      model-00002-of-00003  self_attn.q_proj, input_layernorm (F32)
      model-00003-of-00003  model.norm (F32), lm_head (F16)
    each shard with its own __metadata__. Returns `out`."""
    src = fixtures / "safetensors" / "gptq_4bit_g32"
    out.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and f.name != "model.safetensors":
            shutil.copyfile(f, out / f.name)
    shards: List[Tensors] = [{}, {}, {}]
    shards[0]["model.embed_tokens.weight"] = _gaussian([16, 8], 1, "F16")
    for name, t in read_safetensors(src / "model.safetensors").items():
        shards[0 if name.startswith("model.layers.0.mlp.") else 1][name] = t
    shards[1]["model.layers.0.input_layernorm.weight"] = _gaussian([64], 2, "F32")
    shards[2]["model.norm.weight"] = _gaussian([64], 3, "F32")
    shards[2]["lm_head.weight"] = _gaussian([16, 64], 4, "F16")
    weight_map: Dict[str, str] = {}
    for i, tensors in enumerate(shards):
        for name in tensors:
            weight_map[name] = SHARDS[i]
        write_safetensors(out / SHARDS[i], tensors, {"format": "pt", "shard": str(i + 1)})
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return out


def copy_shards(checkpoint: Path, keep: Sequence[str], out: Path) -> None:
    """Copies the checkpoint's index and configs, and of its shards those in
    `keep`, into `out` (created): one server's part of the checkpoint."""
    out.mkdir(parents=True)
    for f in checkpoint.iterdir():
        if f.name.endswith(".safetensors") and f.name not in keep:
            continue
        shutil.copyfile(f, out / f.name)
