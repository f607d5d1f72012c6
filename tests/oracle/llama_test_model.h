// A small llama-shaped model for the llama.cpp oracle tests, written twice:
// as the Hugging Face directory a trainer leaves (config.json and a BF16
// model.safetensors under HF names) and as the F32 GGUF that llama.cpp's
// convert_hf_to_gguf.py --outtype f32 makes of it (llama.cpp names, Q and K
// rows permuted for RoPE, llama.* metadata and a minimal SentencePiece-style
// vocabulary). llama_quantizer.h quantizes the GGUF with llama.cpp itself.
//
// Shape: 2 layers, hidden 256, 4 query heads over 2 KV heads (GQA), FFN 512,
// vocabulary 256; every weight row is a multiple of 256 long, so every ggml
// type (K-quants and IQ ones included) applies to every matrix. Values are
// what quantizers find hard: heavy-tailed (a Gaussian scaled by a
// log-normal), a few input channels (columns) 16x larger than the rest, and
// whole rows planted at zero.
#ifndef TENSORMORPH_TESTS_ORACLE_LLAMA_TEST_MODEL_H_
#define TENSORMORPH_TESTS_ORACLE_LLAMA_TEST_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tensormorph::testing {

struct LlamaTestDims {
  static constexpr int kLayers = 2;
  static constexpr int kHidden = 256;
  static constexpr int kHeads = 4;
  static constexpr int kKvHeads = 2;
  static constexpr int kHeadDim = kHidden / kHeads;
  static constexpr int kFfn = 512;
  static constexpr int kVocab = 256;
};

struct LlamaTestWeight {
  std::string hf_name;         // model.layers.0.self_attn.q_proj.weight
  std::string gguf_name;       // blk.0.attn_q.weight
  std::vector<int64_t> shape;  // numpy order: [out, in], or [n] for norms
  std::vector<float> values;   // HF row order, exactly representable in BF16
};

// The model's weights (deterministic; made once per process).
const std::vector<LlamaTestWeight>& LlamaTestWeights();

// The input channels made outliers and the rows planted at zero (in HF row
// order) of every 2-D weight.
std::vector<int64_t> LlamaTestOutlierColumns();
std::vector<int64_t> LlamaTestZeroRows();

// Writes `dir`/hf/config.json, `dir`/hf/model.safetensors and
// `dir`/model-f32.gguf. Errors: INTERNAL when a file cannot be written.
struct LlamaTestModelPaths {
  std::string hf_dir;
  std::string gguf;
};
absl::StatusOr<LlamaTestModelPaths> WriteLlamaTestModel(const std::string& dir);

// The GGUF's bytes as written (for hashing: a cache of llama.cpp's outputs
// is keyed by them).
std::string BuildLlamaTestGguf();

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_ORACLE_LLAMA_TEST_MODEL_H_
