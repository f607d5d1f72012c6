#!/usr/bin/python3
"""Writes NVIDIA ModelOpt checkpoints from the format's definition (numpy only).

    modelopt.py OUT_DIR

Each fixture is a directory under OUT_DIR holding safetensors, the config
ModelOpt (or transformers) writes beside them, `ref/<tensor>.npy` (the
float32 reference dequantization of every quantized weight, computed in
float64 and cast exactly as the reference rounds) and `source/` (the
float32 weights that were quantized, as a checkpoint of their own).

Layouts (TensorRT-Model-Optimizer's HF export, vLLM's modelopt.py):
  FP8        weight F8_E4M3 [out, in], weight_scale F32 [] (per tensor),
             [out] (FP8_PER_CHANNEL_PER_TOKEN), or [out/128, 1, in/128, 1]
             (FP8_PB_WO); x = f32(fp8(q) * scale).
  NVFP4      weight U8 [out, in/2], two E2M1 codes a byte, element 2k in the
             low nibble; weight_scale F8_E4M3 [out, in/16]; weight_scale_2
             F32 []; input_scale F32 [];
             x = f32(e2m1(q) * f32(fp8(weight_scale) * weight_scale_2)).
  MXFP8      weight F8_E4M3, weight_scale U8 E8M0 [out, in/32];
             x = fp8(q) * 2^(e - 127).
  W4A8_AWQ   weight U8 [out/2, in]: signed INT4 codes paired along out,
             byte (k, j) = q[2k, j] & 15 | (q[2k+1, j] & 15) << 4
             (quant_utils.py pack_int4_in_uint8); weight_scale F32
             [out, in/128] = amax / 7; weight_scale_2 F32 [] = amax / 448 of
             the INT4-dequantized weight; x = f32(q * weight_scale).
  AWQ        (NVFP4_AWQ, W4A8_AWQ) ModelOpt's apply_pre_quant_scale_and_smooth:
             the weight quantized is f32(w * f32(1 / pqs)) per input column,
             pre_quant_scale BF16 [in] = pqs beside it; the reference is the
             weight the layer computes with, x = f32(dequant * pqs).
"""

import json
import os
import struct
import sys

import numpy as np

# --- number formats, from their definitions --------------------------------


def e4m3_values():
    """The 256 OCP FP8 E4M3 ("fn") values: bias 7, S.1111.111 NaN."""
    v = np.zeros(256, dtype=np.float64)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        e, m = (b >> 3) & 0xF, b & 0x7
        if e == 0xF and m == 0x7:
            v[b] = np.nan
        elif e == 0:
            v[b] = sign * m * 2.0**-9
        else:
            v[b] = sign * (1 + m / 8) * 2.0 ** (e - 7)
    return v


E4M3 = e4m3_values()
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
                dtype=np.float64)


def nearest_code(x, table):
    """The code of the table value nearest to each x (NaN codes never)."""
    codes = np.flatnonzero(~np.isnan(table))
    order = codes[np.argsort(table[codes], kind="stable")]
    vals = table[order]
    i = np.clip(np.searchsorted(vals, x), 1, len(vals) - 1)
    lo, hi = vals[i - 1], vals[i]
    pick = np.where(np.abs(x - lo) <= np.abs(hi - x), i - 1, i)
    return order[pick].astype(np.uint8)


def f32(x):
    return np.asarray(x, dtype=np.float64).astype(np.float32)


# --- safetensors -----------------------------------------------------------


def write_safetensors(path, tensors):
    """tensors: [(name, dtype string, shape, raw bytes)]."""
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


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)


# --- quantizers (any valid codes do: the test judges the decoding) ---------


def quant_fp8(w, scale):
    """FP8 codes of w / scale (scale broadcast), and the reference."""
    codes = nearest_code(np.clip(w / scale, -448, 448), E4M3)
    ref = f32(E4M3[codes] * np.float64(1) * scale.astype(np.float64))
    return codes, ref


def fp8_tensor(prefix, w, algo):
    out, inn = w.shape
    if algo == "FP8":
        scale = f32(np.abs(w).max() / 448)
        codes, ref = quant_fp8(w, np.float64(scale))
        sc = (prefix + ".weight_scale", "F32", [], scale.tobytes())
    elif algo == "FP8_PER_CHANNEL_PER_TOKEN":
        scale = f32(np.abs(w).max(axis=1) / 448)
        codes, ref = quant_fp8(w, scale.astype(np.float64)[:, None])
        sc = (prefix + ".weight_scale", "F32", [out], scale.tobytes())
    else:  # FP8_PB_WO, 128x128 blocks
        ob, ib = -(-out // 128), -(-inn // 128)
        blocks = np.zeros((ob, ib), dtype=np.float32)
        for i in range(ob):
            for j in range(ib):
                blocks[i, j] = f32(np.abs(w[i*128:(i+1)*128, j*128:(j+1)*128]).max() / 448)
        full = np.repeat(np.repeat(blocks, 128, 0), 128, 1)[:out, :inn]
        codes, ref = quant_fp8(w, full.astype(np.float64))
        sc = (prefix + ".weight_scale", "F32", [ob, 1, ib, 1], blocks.tobytes())
    ins = (prefix + ".input_scale", "F32", [], f32(0.0125).tobytes())
    return [(prefix + ".weight", "F8_E4M3", [out, inn], codes.tobytes()), sc, ins], ref


def nvfp4_tensor(prefix, w):
    out, inn = w.shape
    g = inn // 16
    s2 = f32(np.abs(w).max() / (6.0 * 448.0))
    blocks = np.abs(w.reshape(out, g, 16)).max(axis=2) / (6.0 * np.float64(s2))
    sc_codes = nearest_code(blocks, E4M3)
    block_scale = f32(E4M3[sc_codes] * np.float64(s2))  # the reference's f32
    safe = np.where(block_scale == 0, 1, block_scale).astype(np.float64)
    q = nearest_code(w.reshape(out, g, 16) / safe[..., None], E2M1).reshape(out, inn)
    ref = f32(E2M1[q].reshape(out, g, 16) *
              block_scale.astype(np.float64)[..., None]).reshape(out, inn)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    ts = [(prefix + ".weight", "U8", [out, inn // 2], packed.tobytes()),
          (prefix + ".weight_scale", "F8_E4M3", [out, g], sc_codes.tobytes()),
          (prefix + ".weight_scale_2", "F32", [], s2.tobytes()),
          (prefix + ".input_scale", "F32", [], f32(0.0125).tobytes())]
    return ts, ref


def int4_awq_tensor(prefix, w, group=128):
    """W4A8_AWQ's INT4 stage, as ModelOpt's export computes it."""
    out, inn = w.shape
    g = inn // group
    amax = np.abs(w.reshape(out, g, group)).max(axis=2)
    scale = f32(amax / 7)
    scale[scale == 0] = 1.0  # get_scaling_factor_from_weight's guard
    full = np.repeat(scale.astype(np.float64), group, axis=1)
    q = np.clip(np.round(f32(w / full).astype(np.float64)), -8, 7).astype(np.int64)
    ref = f32(q * full)
    s2 = f32(np.abs(ref.astype(np.float64)).max() / 448)
    nib = (q & 0xF).astype(np.uint8)
    packed = (nib[0::2, :] | (nib[1::2, :] << 4)).astype(np.uint8)
    return [(prefix + ".weight", "U8", [out // 2, inn], packed.tobytes()),
            (prefix + ".weight_scale", "F32", [out, g], scale.tobytes()),
            (prefix + ".weight_scale_2", "F32", [], s2.tobytes()),
            (prefix + ".input_scale", "F32", [], f32(0.0125).tobytes())], ref


def pre_quant_scale(inn):
    """A positive scale per input column, exact in BF16 (k / 16)."""
    return (8 + (np.arange(inn) * 7) % 25) / 16.0


def awq(prefix, w, quantizer):
    """The AWQ variant of `quantizer`: the weight folded by 1/pqs, as
    ModelOpt stores it, and the reference times pqs."""
    pqs = pre_quant_scale(w.shape[1])
    folded = f32(w * f32(1.0 / pqs).astype(np.float64)[None, :])
    ts, ref = quantizer(prefix, folded.astype(np.float64))
    ref = f32(ref.astype(np.float64) * pqs[None, :])
    bits = (f32(pqs).view(np.uint32) >> 16).astype(np.uint16)
    ts.append((prefix + ".pre_quant_scale", "BF16", [w.shape[1]], bits.tobytes()))
    return ts, ref


def mxfp8_tensor(prefix, w):
    out, inn = w.shape
    g = inn // 32
    amax = np.abs(w.reshape(out, g, 32)).max(axis=2)
    e = np.clip(np.ceil(np.log2(np.maximum(amax, 1e-30) / 448)) + 127, 1, 254).astype(np.uint8)
    scale = 2.0 ** (e.astype(np.float64) - 127)
    full = np.repeat(scale, 32, axis=1)
    codes, ref = quant_fp8(w, full)
    return [(prefix + ".weight", "F8_E4M3", [out, inn], codes.tobytes()),
            (prefix + ".weight_scale", "U8", [out, g], e.tobytes())], ref


def quantize(prefix, w, algo):
    """algo, or "<algo> folded": an AWQ weight whose pre_quant_scale the
    export fused into the previous layer (none stored, weight as is)."""
    if algo.startswith("FP8"):
        return fp8_tensor(prefix, w, algo)
    if algo in ("NVFP4", "W4A16_NVFP4", "NVFP4_AWQ folded"):
        return nvfp4_tensor(prefix, w)
    if algo == "NVFP4_AWQ":
        return awq(prefix, w, nvfp4_tensor)
    if algo == "W4A8_AWQ folded":
        return int4_awq_tensor(prefix, w)
    if algo == "W4A8_AWQ":
        return awq(prefix, w, int4_awq_tensor)
    if algo == "MXFP8":
        return mxfp8_tensor(prefix, w)
    raise ValueError(algo)


# --- fixtures --------------------------------------------------------------


class Fixture:
    def __init__(self, root, name, seed):
        self.dir = os.path.join(root, name)
        os.makedirs(os.path.join(self.dir, "ref"), exist_ok=True)
        os.makedirs(os.path.join(self.dir, "source"), exist_ok=True)
        self.rng = np.random.default_rng(seed)
        self.tensors, self.source = [], []

    def weight(self, out, inn):
        w = self.rng.standard_normal((out, inn)) * 0.05
        w[0, :3] = [0.0, 0.3, -0.2]  # a zero and outliers
        return f32(w)

    def quantized(self, module, out, inn, algo):
        w = self.weight(out, inn)
        ts, ref = quantize(module, w.astype(np.float64), algo)
        self.tensors += ts
        np.save(os.path.join(self.dir, "ref", module + ".weight.npy"), ref)
        self.source.append((module + ".weight", "F32", [out, inn], w.tobytes()))

    def plain(self, name, out, inn):
        w = self.weight(out, inn)
        self.tensors.append((name, "F32", [out, inn], w.tobytes()))
        self.source.append((name, "F32", [out, inn], w.tobytes()))

    def finish(self, hf_quant=None, config=None, shards=None):
        if shards is None:
            write_safetensors(os.path.join(self.dir, "model.safetensors"), self.tensors)
        else:  # shards: [names of shard 1, ...]; the rest in the last
            files, weight_map, rest = [], {}, list(self.tensors)
            for k, names in enumerate(shards + [None]):
                fname = "model-%05d-of-%05d.safetensors" % (k + 1, len(shards) + 1)
                part = [t for t in rest if names is None or t[0] in names]
                rest = [t for t in rest if t not in part]
                write_safetensors(os.path.join(self.dir, fname), part)
                for t in part:
                    weight_map[t[0]] = fname
            write_json(os.path.join(self.dir, "model.safetensors.index.json"),
                       {"metadata": {"total_size": 0}, "weight_map": weight_map})
        write_safetensors(os.path.join(self.dir, "source", "model.safetensors"),
                          self.source)
        cfg = {"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"}
        if config is not None:
            cfg["quantization_config"] = config
        write_json(os.path.join(self.dir, "config.json"), cfg)
        if hf_quant is not None:
            write_json(os.path.join(self.dir, "hf_quant_config.json"),
                       {"producer": {"name": "modelopt", "version": "0.29.0"},
                        "quantization": hf_quant})


def hf(algo, **kw):
    q = {"quant_algo": algo, "kv_cache_quant_algo": None,
         "exclude_modules": ["lm_head"]}
    q.update(kw)
    return q


def main(root):
    # One fixture per algo, hf_quant_config.json beside a plain config.json.
    # AWQ: down_proj keeps its pre_quant_scale, q_proj's was fused into
    # the previous norm (ModelOpt's export does so for q/k/v and gate/up).
    for seed, algo in enumerate(["NVFP4", "NVFP4_AWQ", "FP8",
                                 "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO",
                                 "MXFP8", "W4A8_AWQ"]):
        f = Fixture(root, algo.lower(), 100 + seed)
        out, inn = {"FP8_PB_WO": (256, 384), "W4A8_AWQ": (48, 256)}.get(
            algo, (48, 128))
        f.quantized("model.layers.0.mlp.down_proj", out, inn, algo)
        awq_algo = algo + " folded" if algo.endswith("AWQ") else algo
        f.quantized("model.layers.0.self_attn.q_proj", 32,
                    128 if algo == "W4A8_AWQ" else 64, awq_algo)
        f.plain("lm_head.weight", 16, 64)
        gs = ({"group_size": 16} if algo.startswith("NVFP4") else
              {"group_size": 128, "has_zero_point": False,
               "pre_quant_scale": True} if algo == "W4A8_AWQ" else {})
        f.finish(hf_quant=hf(algo, **gs))
    # quant_method "modelopt" in config.json, flat, as FP8 read before.
    f = Fixture(root, "fp8_config_json", 200)
    f.quantized("model.layers.0.mlp.down_proj", 48, 128, "FP8")
    f.plain("lm_head.weight", 16, 64)
    f.finish(config={"quant_method": "modelopt", "quant_algo": "FP8",
                     "ignore": ["lm_head"]})
    # MIXED_PRECISION: FP8 and NVFP4 layers, an unquantized lm_head.
    f = Fixture(root, "mixed_precision", 300)
    f.quantized("model.layers.0.self_attn.q_proj", 32, 64, "FP8")
    f.quantized("model.layers.0.mlp.down_proj", 48, 128, "NVFP4")
    f.quantized("model.layers.1.mlp.down_proj", 48, 128, "NVFP4")
    f.plain("model.layers.1.self_attn.q_proj.weight", 32, 64)
    f.plain("lm_head.weight", 16, 64)
    f.finish(hf_quant={
        "quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": "FP8",
        "exclude_modules": ["lm_head", "model.layers.1.self_attn*"],
        "quantized_layers": {
            "model.layers.0.self_attn.q_proj": {"quant_algo": "FP8"},
            "model.layers.0.mlp.down_proj": {"quant_algo": "NVFP4", "group_size": 16},
            "model.layers.1.mlp.down_proj": {"quant_algo": "NVFP4", "group_size": 16}}})
    # Sharded NVFP4: each weight_scale_2 in another shard than its weight.
    f = Fixture(root, "nvfp4_sharded", 400)
    f.quantized("model.layers.0.mlp.down_proj", 48, 128, "NVFP4")
    f.quantized("model.layers.1.mlp.down_proj", 48, 128, "NVFP4")
    f.plain("lm_head.weight", 16, 64)
    f.finish(hf_quant=hf("NVFP4", group_size=16),
             shards=[["model.layers.0.mlp.down_proj.weight",
                      "model.layers.0.mlp.down_proj.weight_scale",
                      "model.layers.1.mlp.down_proj.weight_scale_2"],
                     ["model.layers.1.mlp.down_proj.weight",
                      "model.layers.0.mlp.down_proj.weight_scale_2"]])
    # Sharded W4A8_AWQ: weight_scale_2 and pre_quant_scale in another shard
    # than their weight.
    f = Fixture(root, "w4a8_awq_sharded", 500)
    f.quantized("model.layers.0.mlp.down_proj", 48, 256, "W4A8_AWQ")
    f.quantized("model.layers.1.mlp.down_proj", 48, 256, "W4A8_AWQ")
    f.plain("lm_head.weight", 16, 64)
    f.finish(hf_quant=hf("W4A8_AWQ", group_size=128),
             shards=[["model.layers.0.mlp.down_proj.weight",
                      "model.layers.0.mlp.down_proj.weight_scale",
                      "model.layers.1.mlp.down_proj.weight_scale_2",
                      "model.layers.1.mlp.down_proj.pre_quant_scale"],
                     ["model.layers.1.mlp.down_proj.weight",
                      "model.layers.0.mlp.down_proj.weight_scale_2",
                      "model.layers.0.mlp.down_proj.pre_quant_scale"]])


if __name__ == "__main__":
    main(sys.argv[1])
