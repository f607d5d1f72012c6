#!/usr/bin/python3
"""Writes HQQ checkpoints as transformers saves HQQLinear (numpy only).

    hqq.py OUT_DIR

Each fixture directory holds model.safetensors, config.json, `ref/<name>.npy`
(the float32 reference of every quantized weight) and `source/` (the float32
weights that were quantized).

From the format's definition (mobiusml/hqq core/quantize.py, bitpack.py,
utils.encode_safetensor_type):
  grouped W: the flat weight as [n/G, G] (axis 1) or [G, n/G] (axis 0);
  per group (a row, axis 1; a column, axis 0): s' = (2^b - 1) / (max - min),
  z = -min * s', W_q = clamp(round(W * s' + z)); stored scale = 1 / s' and
  zero = z, both in the compute dtype; W_q packed along dim 0 in 8/b slices
  (slice j in the bits below 8 - j*b; 3-bit: ten slices below bit 30 of an
  int32, rows padded to ten);
  metadata as tensors: ints and bools U8 scalars, strings U8 character codes,
  the shape I64.
  Dequantization in the compute dtype, each operation rounded once:
    w = round_cd(round_cd(W_q - zero) * scale)
"""

import json
import os
import struct
import sys

import numpy as np

PRECISION = {"torch.float16": (11, -14, 65504.0),
             "torch.bfloat16": (8, -126, 3.3895313892515355e38)}


def round_to(x, compute):
    """x (float64) rounded once to the compute dtype, ties to even."""
    p, emin, vmax = PRECISION[compute]
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros_like(x)
    nz = x != 0
    _, e = np.frexp(x[nz])
    q = np.maximum(e - 1, emin) - (p - 1)
    y = np.rint(np.ldexp(x[nz], -q)) * np.ldexp(1.0, q)
    y = np.where(np.abs(y) > vmax, np.copysign(np.inf, y), y)
    out[nz] = y
    return out


def dtype_bytes(values, compute):
    """Values already in the compute dtype, as its stored bytes."""
    if compute == "torch.float16":
        return "F16", values.astype(np.float16).tobytes()
    bits = values.astype(np.float32).view(np.uint32) >> 16  # exact: bf16
    return "BF16", bits.astype(np.uint16).tobytes()


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def pack(q, bits):
    """q: [R, C] codes; packed along dim 0 as BitPack does."""
    if bits >= 5:
        return "U8", q.astype(np.uint8)
    if bits == 3:
        rows = -(-q.shape[0] // 10) * 10
        p = np.zeros((rows, q.shape[1]), dtype=np.int32)
        p[:q.shape[0]] = q
        step = rows // 10
        out = np.zeros((step, q.shape[1]), dtype=np.int32)
        for j in range(10):
            out |= p[j * step:(j + 1) * step] << (27 - 3 * j)
        return "I32", out
    slices = 8 // bits
    step = q.shape[0] // slices
    out = np.zeros((step, q.shape[1]), dtype=np.uint8)
    for j in range(slices):
        out |= (q[j * step:(j + 1) * step].astype(np.uint8) << (8 - bits * (j + 1))).astype(np.uint8)
    return "U8", out


def text(s):
    return np.frombuffer(s.encode(), dtype=np.uint8)


def hqq_layer(prefix, w, bits, group, axis, compute):
    """The tensors HQQLinear.state_dict() saves for `w`, and the reference."""
    out, inn = w.shape
    n = w.size
    g = w.reshape(-1, group) if axis == 1 else w.reshape(group, -1)
    mn = g.min(axis=axis, keepdims=True).astype(np.float32)
    mx = g.max(axis=axis, keepdims=True).astype(np.float32)
    max_v = 2 ** bits - 1
    inv = np.minimum(np.float32(max_v) / (mx - mn), np.float32(2e4)).astype(np.float32)
    zero = (-mn * inv).astype(np.float32)
    q = np.clip(np.rint(g.astype(np.float32) * inv + zero), 0, max_v).astype(np.int64)
    scale_cd = round_to((np.float32(1.0) / inv).astype(np.float64), compute)
    zero_cd = round_to(zero.astype(np.float64), compute)
    level = round_to(q.astype(np.float64) - zero_cd, compute)
    ref = round_to(level * scale_cd, compute).astype(np.float32).reshape(out, inn)
    wq_dtype, packed = pack(q, bits)
    sdt, sbytes = dtype_bytes(scale_cd, compute)
    _, zbytes = dtype_bytes(zero_cd, compute)
    u8 = lambda v: ("U8", [], bytes([v]))
    ts = [("W_q", wq_dtype, list(packed.shape), packed.tobytes()),
          ("scale", sdt, list(scale_cd.shape), sbytes),
          ("zero", sdt, list(zero_cd.shape), zbytes),
          ("shape", "I64", [2], np.array([out, inn], dtype=np.int64).tobytes()),
          ("nbits",) + u8(bits), ("group_size",) + u8(group), ("axis",) + u8(axis),
          ("packing", "U8", None, "3bit_32" if bits == 3 else
           "8bit_u8" if bits >= 5 else "%dbit_u8" % bits),
          ("unpack_view_dtype", "U8", None,
           "torch.int32" if bits == 3 else "torch.uint8"),
          ("compute_dtype", "U8", None, compute),
          ("view_as_float",) + u8(0), ("quant_scale",) + u8(0),
          ("quant_zero",) + u8(0), ("channel_wise",) + u8(1),
          ("optimize",) + u8(0), ("round_zero",) + u8(0),
          ("offload_meta",) + u8(0), ("encoded_state_dict",) + u8(1),
          ("stores_quant_config",) + u8(1)]
    tensors = []
    for name, dtype, shape, data in ts:
        if shape is None:  # a string
            data = text(data).tobytes()
            shape = [len(data)]
        tensors.append((prefix + "." + name, dtype, shape, data))
    return tensors, ref


def weight_params(bits, group, axis):
    return {"nbits": bits, "group_size": group, "axis": axis,
            "channel_wise": True, "optimize": True, "round_zero": False,
            "view_as_float": False}


def fixture(root, name, seed, layers, quant_config, compute):
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "ref"), exist_ok=True)
    os.makedirs(os.path.join(d, "source"), exist_ok=True)
    rng = np.random.default_rng(seed)
    tensors, source = [], []
    for module, (out, inn), bits, group, axis in layers:
        w = (rng.standard_normal((out, inn)) * 0.05).astype(np.float32)
        w[0, :3] = [0.0, 0.3, -0.2]
        ts, ref = hqq_layer(module, w, bits, group, axis, compute)
        tensors += ts
        np.save(os.path.join(d, "ref", module + ".weight.npy"), ref)
        source.append((module + ".weight", "F32", [out, inn], w.tobytes()))
    head = (rng.standard_normal((16, 64)) * 0.05).astype(np.float32)
    tensors.append(("lm_head.weight", "F32", [16, 64], head.tobytes()))
    source.append(("lm_head.weight", "F32", [16, 64], head.tobytes()))
    write_safetensors(os.path.join(d, "model.safetensors"), tensors)
    write_safetensors(os.path.join(d, "source", "model.safetensors"), source)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"],
                   "quantization_config": {"quant_method": "hqq",
                                           "quant_config": quant_config,
                                           "skip_modules": ["lm_head"]}},
                  f, indent=1)


def main(root):
    one = lambda bits, group, axis: {
        "weight_quant_params": weight_params(bits, group, axis),
        "scale_quant_params": None, "zero_quant_params": None,
        "offload_meta": False}
    fixture(root, "hqq_4bit_g64", 500,
            [("model.layers.0.self_attn.q_proj", (32, 128), 4, 64, 1),
             ("model.layers.0.mlp.down_proj", (48, 128), 4, 64, 1)],
            one(4, 64, 1), "torch.float16")
    fixture(root, "hqq_axis0_bf16", 501,
            [("model.layers.0.mlp.down_proj", (64, 96), 4, 32, 0)],
            one(4, 32, 0), "torch.bfloat16")
    # Per-layer configs (transformers' dynamic_config): a bit width each.
    tags = {"self_attn.q_proj": (2, 32), "self_attn.o_proj": (1, 32),
            "mlp.down_proj": (3, 64), "mlp.up_proj": (8, 128)}
    fixture(root, "hqq_mixed_bits", 502,
            [("model.layers.0.self_attn.q_proj", (32, 128), 2, 32, 1),
             ("model.layers.0.self_attn.o_proj", (32, 128), 1, 32, 1),
             ("model.layers.0.mlp.down_proj", (48, 128), 3, 64, 1),
             ("model.layers.0.mlp.up_proj", (48, 128), 8, 128, 1)],
            {t: one(b, g, 1) for t, (b, g) in tags.items()}, "torch.float16")


if __name__ == "__main__":
    main(sys.argv[1])
