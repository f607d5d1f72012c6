#!/usr/bin/python3
"""Writes MLX-quantized test checkpoints (numpy only), from the format's
definition in ml-explore/mlx (mlx/ops.cpp quantize / dequantize) and mlx-lm
(config.json "quantization" with per-module entries).

  mlx_writer.py OUT_DIR

writes OUT_DIR/model/{model.safetensors,config.json} (a mixed model: a base
entry plus per-module entries covering every mode, bits and group size,
three scale dtypes, a 3-D expert stack and a module left unquantized),
OUT_DIR/sharded/ (the same tensors in two shards with
model.safetensors.index.json, as mlx-lm saves large models, a weight's
scales in another shard than its codes),
OUT_DIR/source/model.safetensors (the float32 weights it was quantized
from) and OUT_DIR/expected/<logical name>.npy: the reference dequantization
of each quantized weight, computed here in float64 and cast as mx.dequantize
rounds (affine: T(T(q*s) + b) in the scales' dtype T; float modes:
bfloat16(level * scale)), as float32. OUT_DIR/expected/index.txt lists
"<name> <scheme>" per line.
"""
import json
import os
import struct
import sys

import numpy as np

E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])


def e4m3_table():
    out = np.zeros(256)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        e, m = (b >> 3) & 0xF, b & 7
        if e == 0xF and m == 7:
            out[b] = np.nan
        elif e == 0:
            out[b] = sign * m * 2.0**-9
        else:
            out[b] = sign * (1 + m / 8) * 2.0**(e - 7)
    return out


E4M3 = e4m3_table()


def bf16_bits(x):
    """float32 -> bfloat16 bits, nearest even (NaN kept)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), r)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def round_to(x64, dtype):
    """float64 -> the value of dtype nearest (via float32, as MLX computes)."""
    f = np.asarray(x64, np.float64).astype(np.float32)
    if dtype == "BF16":
        return bf16_value(bf16_bits(f)).astype(np.float64)
    if dtype == "F16":
        return f.astype(np.float16).astype(np.float64)
    return f.astype(np.float64)


def store(values64, dtype):
    """Stored bytes of float values already representable in dtype."""
    if dtype == "BF16":
        return bf16_bits(values64.astype(np.float32)).tobytes()
    if dtype == "F16":
        return values64.astype(np.float16).tobytes()
    return values64.astype(np.float32).tobytes()


def pack_rows(codes, bits):
    """[..., n] codes -> [..., n*bits/32] uint32: an LSB-first bit stream
    per row."""
    lead, n = codes.shape[:-1], codes.shape[-1]
    flat = codes.reshape(-1, n).astype(np.uint64)
    words = np.zeros((flat.shape[0], n * bits // 32), np.uint64)
    for i in range(n):
        bit = i * bits
        w, s = bit // 32, bit % 32
        v = flat[:, i] << np.uint64(s)
        words[:, w] |= v & np.uint64(0xFFFFFFFF)
        if s + bits > 32:
            words[:, w + 1] |= v >> np.uint64(32)
    return words.astype(np.uint32).reshape(*lead, n * bits // 32)


def quantize_affine(w, bits, group, dtype):
    """mx.quantize's affine fallback: scale and edge bias per group."""
    g = w.reshape(*w.shape[:-1], -1, group).astype(np.float32)
    wmax, wmin = g.max(-1, keepdims=True), g.min(-1, keepdims=True)
    n_bins = np.float32(2**bits - 1)
    mask = np.abs(wmin) > np.abs(wmax)
    scales = np.maximum((wmax - wmin) / n_bins, np.float32(1e-7))
    scales = np.where(mask, scales, -scales)
    edge = np.where(mask, wmin, wmax)
    q0 = np.round(edge / scales)
    scales = np.where(q0 != 0, edge / np.where(q0 != 0, q0, 1), scales)
    biases = np.where(q0 == 0, np.float32(0), edge)
    codes = np.clip(np.round((g - biases) / scales), 0, 2**bits - 1)
    s = round_to(scales[..., 0], dtype)
    b = round_to(biases[..., 0], dtype)
    codes = codes.astype(np.uint32).reshape(w.shape)
    # Reference: T(T(q * s) + b), q * s exact in float64.
    qs = codes.reshape(g.shape).astype(np.float64) * s[..., None]
    ref = round_to(round_to(qs, dtype) + b[..., None], dtype)
    return codes, s, b, ref.reshape(w.shape).astype(np.float32)


def nearest(table, x):
    """Index of the table entry nearest each x (NaN entries never)."""
    t = np.where(np.isnan(table), np.inf, table)
    return np.abs(x[..., None] - t).argmin(-1)


def quantize_fp(w, mode):
    group = 16 if mode == "nvfp4" else 32
    table = E4M3 if mode == "mxfp8" else E2M1
    g = w.reshape(*w.shape[:-1], -1, group).astype(np.float64)
    amax = np.abs(g).max(-1)
    if mode == "nvfp4":
        codes_s = nearest(E4M3[:127], amax / 6.0)  # positive scales
        scale = E4M3[codes_s]
    else:
        maxval = 448.0 if mode == "mxfp8" else 6.0
        e = np.where(amax == 0, 0, np.round(np.log2(np.maximum(amax, 1e-30) / maxval)))
        codes_s = np.clip(e + 127, 0, 254).astype(np.int64)
        scale = 2.0 ** (codes_s - 127)
    safe = np.where(scale == 0, 1, scale)
    codes = nearest(table, g / safe[..., None])
    ref = round_to(table[codes] * scale[..., None], "BF16")
    return (codes.reshape(w.shape).astype(np.uint32), codes_s.astype(np.uint8),
            ref.reshape(w.shape).astype(np.float32))


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# (module, mode, bits, group, dtype, shape): every variant the format has.
MODULES = [
    ("model.layers.0.self_attn.q_proj", "affine", 4, 64, "BF16", (8, 128)),
    ("model.layers.0.self_attn.k_proj", "affine", 2, 32, "BF16", (4, 64)),
    ("model.layers.0.self_attn.v_proj", "affine", 3, 32, "F16", (5, 96)),
    ("model.layers.0.self_attn.o_proj", "affine", 5, 64, "BF16", (3, 128)),
    ("model.layers.0.mlp.gate_proj", "affine", 6, 128, "F32", (4, 256)),
    ("model.layers.0.mlp.up_proj", "affine", 8, 64, "F16", (6, 128)),
    ("model.layers.0.mlp.down_proj", "affine", 4, 128, "F16", (7, 256)),
    ("model.layers.1.mlp.experts", "affine", 3, 64, "BF16", (2, 3, 192)),
    ("model.layers.1.self_attn.q_proj", "mxfp4", 4, 32, None, (4, 64)),
    ("model.layers.1.self_attn.k_proj", "mxfp8", 8, 32, None, (3, 96)),
    ("model.layers.1.self_attn.v_proj", "nvfp4", 4, 16, None, (5, 48)),
]
BASE = ("affine", 4, 64)


def main():
    out = sys.argv[1]
    for d in ("model", "source", "expected", "sharded"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    rng = np.random.default_rng(30)
    model, source, index = {}, {}, []
    config = {"model_type": "llama",
              "quantization": {"group_size": BASE[2], "bits": BASE[1],
                               "mode": BASE[0]}}
    for name, mode, bits, group, dtype, shape in MODULES:
        w = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        # Outliers, so groups differ in range, and an all-zero group.
        w.reshape(-1)[::37] *= 20
        w.reshape(-1, shape[-1])[0, :group] = 0
        source[name + ".weight"] = ("F32", shape, w.tobytes())
        if mode == "affine":
            codes, s, b, ref = quantize_affine(w, bits, group, dtype)
            model[name + ".scales"] = (dtype, s.shape, store(s, dtype))
            model[name + ".biases"] = (dtype, b.shape, store(b, dtype))
            scheme = "int%d affine (scale, bias)" % bits
        else:
            codes, sc, ref = quantize_fp(w, mode)
            model[name + ".scales"] = ("U8", sc.shape, sc.tobytes())
            scheme = mode
        packed = pack_rows(codes, bits)
        model[name + ".weight"] = ("U32", packed.shape, packed.tobytes())
        if (mode, bits, group) != BASE:
            config["quantization"][name] = {"group_size": group, "bits": bits,
                                            "mode": mode}
        np.save(os.path.join(out, "expected", name + ".weight.npy"), ref)
        index.append("%s.weight %s" % (name, scheme))
    # A module the config leaves unquantized, stored as plain bf16.
    lm = (rng.standard_normal((4, 64)) * 0.05).astype(np.float32)
    model["lm_head.weight"] = ("BF16", lm.shape, bf16_bits(lm).tobytes())
    config["quantization"]["lm_head"] = False
    config["quantization_config"] = config["quantization"]
    write_safetensors(os.path.join(out, "model", "model.safetensors"), model)
    write_safetensors(os.path.join(out, "source", "model.safetensors"), source)
    for d in ("model", "sharded"):
        with open(os.path.join(out, d, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
    # Shards by order, split mid-module: q_proj's scales and biases in
    # the first shard, its codes in the second.
    names = sorted(model)
    cut = names.index("model.layers.0.self_attn.q_proj.weight")
    shards = [names[:cut], names[cut:]]
    weight_map = {}
    for i, part in enumerate(shards):
        fname = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        write_safetensors(os.path.join(out, "sharded", fname),
                          {n: model[n] for n in part})
        weight_map.update({n: fname for n in part})
    with open(os.path.join(out, "sharded", "model.safetensors.index.json"),
              "w") as f:
        json.dump({"metadata": {"total_size": sum(len(v[2]) for v in
                                                  model.values())},
                   "weight_map": weight_map}, f, indent=1)
    with open(os.path.join(out, "expected", "index.txt"), "w") as f:
        f.write("\n".join(index) + "\n")


if __name__ == "__main__":
    main()
