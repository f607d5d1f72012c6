#include "tests/oracle/llama_test_model.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"

namespace tensormorph::testing {
namespace {

using D = LlamaTestDims;

constexpr uint32_t kGgufF32 = 6, kGgufI32 = 5, kGgufString = 8;

float RoundToBF16(float f) {
  const uint32_t u = static_cast<uint32_t>(F32ToBF16Bits(f)) << 16;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// A matrix of `rows` x `cols` (HF order) with heavy tails, outlier input
// channels and zero rows.
std::vector<float> Matrix(int64_t rows, int64_t cols, uint64_t seed) {
  const std::vector<float> g = Gaussian(rows * cols, seed, 0.02f);
  const std::vector<float> tail = Gaussian(rows * cols, seed + 1000, 0.6f);
  std::vector<float> v(g.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = g[i] * std::exp(tail[i]);
  for (int64_t c : LlamaTestOutlierColumns()) {
    for (int64_t r = 0; r < rows; ++r) v[r * cols + c] *= 16.0f;
  }
  for (int64_t r : LlamaTestZeroRows()) {
    if (r < rows) std::fill_n(&v[r * cols], cols, 0.0f);
  }
  for (float& x : v) x = RoundToBF16(x);
  return v;
}

std::vector<float> Norm(int64_t n, uint64_t seed) {
  std::vector<float> v = Gaussian(n, seed, 0.05f);
  for (float& x : v) x = RoundToBF16(1.0f + x);
  return v;
}

// convert_hf_to_gguf.py's LlamaModel.permute: per head, the rows viewed as
// [2, head_dim/2] are transposed to [head_dim/2, 2].
std::vector<float> PermuteForRope(const LlamaTestWeight& w, int64_t heads) {
  const int64_t rows = w.shape[0], cols = w.shape[1], hd = rows / heads;
  std::vector<float> out(w.values.size());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t half = 0; half < 2; ++half) {
      for (int64_t i = 0; i < hd / 2; ++i) {
        const int64_t hf_row = h * hd + half * (hd / 2) + i;
        const int64_t gguf_row = h * hd + 2 * i + half;
        std::copy_n(&w.values[hf_row * cols], cols, &out[gguf_row * cols]);
      }
    }
  }
  return out;
}

std::string ConfigJson() {
  return absl::StrCat(R"({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": )",
                      D::kHidden, R"(,
  "intermediate_size": )",
                      D::kFfn, R"(,
  "num_attention_heads": )",
                      D::kHeads, R"(,
  "num_key_value_heads": )",
                      D::kKvHeads, R"(,
  "head_dim": )",
                      D::kHeadDim, R"(,
  "num_hidden_layers": )",
                      D::kLayers, R"(,
  "vocab_size": )",
                      D::kVocab, R"(,
  "max_position_embeddings": 2048,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "torch_dtype": "bfloat16"
}
)");
}

// The metadata convert_hf_to_gguf.py writes for this config (in its order),
// with a vocabulary of <unk>, <s>, </s> and plain tokens.
std::vector<std::pair<std::string, GgufValueBytes>> GgufMetadata() {
  std::vector<std::pair<std::string, GgufValueBytes>> kv = {
      {"general.architecture", GgufString("llama")},
      {"general.type", GgufString("model")},
      {"general.name", GgufString("Tensormorph Llama Oracle")},
      {"llama.block_count", GgufU32(D::kLayers)},
      {"llama.context_length", GgufU32(2048)},
      {"llama.embedding_length", GgufU32(D::kHidden)},
      {"llama.feed_forward_length", GgufU32(D::kFfn)},
      {"llama.attention.head_count", GgufU32(D::kHeads)},
      {"llama.attention.head_count_kv", GgufU32(D::kKvHeads)},
      {"llama.rope.freq_base", GgufF32(10000.0f)},
      {"llama.attention.layer_norm_rms_epsilon", GgufF32(1e-5f)},
      {"general.file_type", GgufU32(0)},  // LLAMA_FTYPE_ALL_F32
      {"llama.vocab_size", GgufU32(D::kVocab)},
      {"llama.rope.dimension_count", GgufU32(D::kHeadDim)},
  };
  std::vector<GgufValueBytes> tokens, scores, types;
  for (int t = 0; t < D::kVocab; ++t) {
    const char* special[] = {"<unk>", "<s>", "</s>"};
    tokens.push_back(
        GgufString(t < 3 ? special[t] : absl::StrCat("\xE2\x96\x81t", t)));
    scores.push_back(GgufF32(t < 3 ? 0.0f : -static_cast<float>(t)));
    // llama_token_type: UNKNOWN 2, CONTROL 3, NORMAL 1.
    types.push_back(GgufI32(t == 0 ? 2 : t < 3 ? 3 : 1));
  }
  kv.push_back({"tokenizer.ggml.model", GgufString("llama")});
  kv.push_back({"tokenizer.ggml.pre", GgufString("default")});
  kv.push_back({"tokenizer.ggml.tokens", GgufArray(kGgufString, tokens)});
  kv.push_back({"tokenizer.ggml.scores", GgufArray(kGgufF32, scores)});
  kv.push_back({"tokenizer.ggml.token_type", GgufArray(kGgufI32, types)});
  kv.push_back({"tokenizer.ggml.bos_token_id", GgufU32(1)});
  kv.push_back({"tokenizer.ggml.eos_token_id", GgufU32(2)});
  kv.push_back({"tokenizer.ggml.unknown_token_id", GgufU32(0)});
  kv.push_back({"general.quantization_version", GgufU32(2)});
  return kv;
}

}  // namespace

namespace {
std::vector<LlamaTestWeight> MakeWeights();
}  // namespace

std::vector<int64_t> LlamaTestOutlierColumns() { return {7, 100, 201}; }
std::vector<int64_t> LlamaTestZeroRows() { return {3, 70}; }

const std::vector<LlamaTestWeight>& LlamaTestWeights() {
  static const auto* weights = new std::vector<LlamaTestWeight>(MakeWeights());
  return *weights;
}

namespace {
std::vector<LlamaTestWeight> MakeWeights() {
  std::vector<LlamaTestWeight> w;
  uint64_t seed = 29;
  auto matrix = [&](std::string hf, std::string gguf, int64_t out, int64_t in) {
    w.push_back(
        {std::move(hf), std::move(gguf), {out, in}, Matrix(out, in, seed)});
    seed += 2;
  };
  auto norm = [&](std::string hf, std::string gguf) {
    w.push_back({std::move(hf),
                 std::move(gguf),
                 {D::kHidden},
                 Norm(D::kHidden, seed++)});
  };
  const int64_t kv = D::kKvHeads * D::kHeadDim;
  matrix("model.embed_tokens.weight", "token_embd.weight", D::kVocab,
         D::kHidden);
  for (int l = 0; l < D::kLayers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    const std::string b = absl::StrCat("blk.", l, ".");
    norm(p + "input_layernorm.weight", b + "attn_norm.weight");
    matrix(p + "self_attn.q_proj.weight", b + "attn_q.weight", D::kHidden,
           D::kHidden);
    matrix(p + "self_attn.k_proj.weight", b + "attn_k.weight", kv, D::kHidden);
    matrix(p + "self_attn.v_proj.weight", b + "attn_v.weight", kv, D::kHidden);
    matrix(p + "self_attn.o_proj.weight", b + "attn_output.weight", D::kHidden,
           D::kHidden);
    norm(p + "post_attention_layernorm.weight", b + "ffn_norm.weight");
    matrix(p + "mlp.gate_proj.weight", b + "ffn_gate.weight", D::kFfn,
           D::kHidden);
    matrix(p + "mlp.up_proj.weight", b + "ffn_up.weight", D::kFfn, D::kHidden);
    matrix(p + "mlp.down_proj.weight", b + "ffn_down.weight", D::kHidden,
           D::kFfn);
  }
  norm("model.norm.weight", "output_norm.weight");
  matrix("lm_head.weight", "output.weight", D::kVocab, D::kHidden);
  return w;
}
}  // namespace

std::string BuildLlamaTestGguf() {
  GgufSpec spec;
  spec.kv = GgufMetadata();
  for (const LlamaTestWeight& w : LlamaTestWeights()) {
    std::vector<float> v = w.values;
    if (w.gguf_name.find(".attn_q.") != std::string::npos) {
      v = PermuteForRope(w, D::kHeads);
    } else if (w.gguf_name.find(".attn_k.") != std::string::npos) {
      // With GQA the converter permutes K by the KV heads.
      v = PermuteForRope(w, D::kKvHeads);
    }
    spec.tensors.push_back(
        {w.gguf_name, std::vector<int64_t>(w.shape.rbegin(), w.shape.rend()), 0,
         ToF32Bytes(v)});
  }
  return BuildGguf(spec);
}

absl::StatusOr<LlamaTestModelPaths> WriteLlamaTestModel(
    const std::string& dir) {
  LlamaTestModelPaths paths{.hf_dir = dir + "/hf",
                            .gguf = dir + "/model-f32.gguf"};
  std::error_code ec;
  std::filesystem::create_directories(paths.hf_dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", paths.hf_dir, ": ", ec.message()));
  }
  std::vector<StTensor> hf;
  for (const LlamaTestWeight& w : LlamaTestWeights()) {
    hf.push_back({w.hf_name, "BF16", w.shape, ToBF16Bytes(w.values)});
  }
  const std::pair<std::string, std::string> files[] = {
      {paths.hf_dir + "/config.json", ConfigJson()},
      {paths.hf_dir + "/model.safetensors",
       BuildSafetensors(hf, {{"format", "pt"}})},
      {paths.gguf, BuildLlamaTestGguf()}};
  for (const auto& [path, bytes] : files) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) {
      return absl::InternalError(absl::StrCat("cannot write ", path));
    }
  }
  return paths;
}

}  // namespace tensormorph::testing
