#!/usr/bin/python3
"""Writes bitsandbytes LLM.int8 test checkpoints (numpy only), from the
format's definition in bitsandbytes (int8_vectorwise_quant: per-row absmax
SCB, q = round(w * 127 / SCB); Linear8bitLt._save_to_state_dict: weight I8,
SCB F32, weight_format U8 0 = "row") and transformers' config.

  bnb_int8_writer.py OUT_DIR

writes OUT_DIR/model/{model.safetensors,config.json}, OUT_DIR/source/
model.safetensors (the float32 weights), OUT_DIR/col32/ (one weight_format
of 1, which current bitsandbytes refuses to load) and OUT_DIR/expected/
<name>.npy: the reference dequantization A * SCB * 7.874015718698502e-3 in
float32, left to right, each product computed in float64 and cast to
float32 (exact products, so one rounding each as in PyTorch).
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlx_writer import bf16_bits, write_safetensors  # noqa: E402

INV127 = np.float64(np.float32(7.874015718698502e-3))

MODULES = [("model.layers.0.mlp.down_proj", (6, 40)),
           ("model.layers.0.self_attn.q_proj", (16, 32)),
           ("model.layers.1.mlp.up_proj", (3, 7))]


def main():
    out = sys.argv[1]
    for d in ("model", "source", "expected", "col32"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    rng = np.random.default_rng(8)
    model, source, index = {}, {}, []
    for name, shape in MODULES:
        w = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        w[0, 3] = 2.5  # an outlier row
        w[1, :] = 0    # a zero row: SCB 0
        scb = np.abs(w).max(1).astype(np.float32)
        safe = np.where(scb == 0, 1, scb)
        q = np.clip(np.round(w.astype(np.float64) * 127 / safe[:, None]),
                    -127, 127).astype(np.int8)
        ref = (q.astype(np.float64) * scb[:, None]).astype(np.float32)
        ref = (ref.astype(np.float64) * INV127).astype(np.float32)
        model[name + ".weight"] = ("I8", shape, q.tobytes())
        model[name + ".SCB"] = ("F32", scb.shape, scb.tobytes())
        model[name + ".weight_format"] = ("U8", (), np.uint8(0).tobytes())
        source[name + ".weight"] = ("F32", shape, w.tobytes())
        np.save(os.path.join(out, "expected", name + ".weight.npy"), ref)
        index.append(name + ".weight")
    head = (rng.standard_normal((4, 32)) * 0.05).astype(np.float32)
    model["lm_head.weight"] = ("BF16", head.shape, bf16_bits(head).tobytes())
    config = {"model_type": "llama",
              "quantization_config": {
                  "quant_method": "bitsandbytes", "load_in_8bit": True,
                  "load_in_4bit": False, "llm_int8_threshold": 6.0,
                  "llm_int8_skip_modules": ["lm_head"],
                  "llm_int8_has_fp16_weight": False}}
    for d, fmt in (("model", 0), ("col32", 1)):
        tensors = dict(model)
        name = MODULES[0][0] + ".weight_format"
        tensors[name] = ("U8", (), np.uint8(fmt).tobytes())
        write_safetensors(os.path.join(out, d, "model.safetensors"), tensors)
        with open(os.path.join(out, d, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
    write_safetensors(os.path.join(out, "source", "model.safetensors"), source)
    with open(os.path.join(out, "expected", "index.txt"), "w") as f:
        f.write("\n".join(index) + "\n")


if __name__ == "__main__":
    main()
