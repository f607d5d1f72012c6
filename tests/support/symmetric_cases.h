// Which fixture tensors are symmetric (no offset or zero-point term): one
// table, held at the core layer and through the CLI.
#ifndef TENSORMORPH_TESTS_SUPPORT_SYMMETRIC_CASES_H_
#define TENSORMORPH_TESTS_SUPPORT_SYMMETRIC_CASES_H_

namespace tensormorph::testing {

struct SymmetricCase {
  const char* path;    // under the fixtures directory
  const char* tensor;  // a quantized tensor of it
  bool symmetric;
};

inline constexpr SymmetricCase kSymmetricCases[] = {
    // ggml: a real-valued min ("m", "dmin") makes the type asymmetric;
    // Q4_0's fixed code - 8 and codebooks do not.
    {"gguf/Q4_0.gguf", "blk.0.attn_q.weight", true},
    {"gguf/Q4_1.gguf", "blk.0.attn_q.weight", false},
    {"gguf/Q5_0.gguf", "blk.0.attn_q.weight", true},
    {"gguf/Q5_1.gguf", "blk.0.attn_q.weight", false},
    {"gguf/Q8_0.gguf", "blk.0.attn_q.weight", true},
    {"gguf/Q2_K.gguf", "blk.0.attn_q.weight", false},
    {"gguf/Q3_K.gguf", "blk.0.attn_q.weight", true},
    {"gguf/Q4_K.gguf", "blk.0.attn_q.weight", false},
    {"gguf/Q5_K.gguf", "blk.0.attn_q.weight", false},
    {"gguf/Q6_K.gguf", "blk.0.attn_q.weight", true},
    {"gguf/IQ4_NL.gguf", "blk.0.attn_q.weight", true},
    {"gguf/IQ4_XS.gguf", "blk.0.attn_q.weight", true},
    {"gguf/TQ1_0.gguf", "blk.0.attn_q.weight", true},
    {"gguf/TQ2_0.gguf", "blk.0.attn_q.weight", true},
    {"gguf/MXFP4.gguf", "blk.0.attn_q.weight", true},
    {"gguf/NVFP4.gguf", "blk.0.attn_q.weight", true},
    {"gguf/F16.gguf", "blk.0.attn_q.weight", true},
    {"gguf/BF16.gguf", "blk.0.attn_q.weight", true},
    {"gguf/F32.gguf", "blk.0.attn_q.weight", true},
    // Conventions: zero-points make them asymmetric.
    {"safetensors/gptq_4bit_g32", "model.layers.0.mlp.down_proj.weight", false},
    {"safetensors/gptq_4bit_g32_actorder",
     "model.layers.0.mlp.down_proj.weight", false},
    {"safetensors/awq_4bit_g32", "model.layers.0.mlp.down_proj.weight", false},
    {"safetensors/ct_int8_channel", "model.layers.0.mlp.down_proj.weight",
     true},
    {"safetensors/ct_int8_tensor_asym", "model.layers.0.mlp.down_proj.weight",
     false},
    {"safetensors/ct_w4a16_group", "model.layers.0.mlp.down_proj.weight", true},
    {"safetensors/fp8_block_sharded", "model.layers.0.mlp.down_proj.weight",
     true},
    {"safetensors/mxfp4_gptoss", "model.layers.0.mlp.experts.down_proj", true},
    {"safetensors/bnb_nf4", "model.layers.0.self_attn.q_proj.weight", true},
};

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_SYMMETRIC_CASES_H_
