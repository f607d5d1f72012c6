#include "tests/support/demo_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "tests/support/gguf_writer.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::testing {
namespace {

constexpr int kVocab = 256, kHidden = 256, kInter = 512, kLayers = 2;

struct Weight {
  std::string hf_name, gguf_name;
  std::vector<int64_t> shape;  // [out, in] (HF order)
  std::vector<float> values;   // already rounded to BF16
  bool is_norm;
};

float RoundToBF16(float f) {
  const uint32_t u = static_cast<uint32_t>(F32ToBF16Bits(f)) << 16;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

std::vector<Weight> MakeWeights() {
  std::vector<Weight> w;
  uint64_t seed = 1;
  auto add = [&](std::string hf, std::string gguf, std::vector<int64_t> shape,
                 bool norm) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    std::vector<float> v;
    if (norm) {
      v = Gaussian(n, seed++, 0.05f);
      for (float& x : v) x += 1.0f;
    } else {
      v = Gaussian(n, seed++, 0.02f);
      // A few outliers and pruned zeros, as real checkpoints have.
      for (size_t i = 0; i < n; i += 97) v[i] *= 20.0f;
      for (size_t i = 5; i < n; i += 13) v[i] = 0.0f;
    }
    for (float& x : v) x = RoundToBF16(x);
    w.push_back(
        {std::move(hf), std::move(gguf), std::move(shape), std::move(v), norm});
  };
  add("model.embed_tokens.weight", "token_embd.weight", {kVocab, kHidden},
      false);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string b = "blk." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", b + "attn_norm.weight", {kHidden}, true);
    add(p + "self_attn.q_proj.weight", b + "attn_q.weight", {kHidden, kHidden},
        false);
    add(p + "self_attn.k_proj.weight", b + "attn_k.weight", {kHidden, kHidden},
        false);
    add(p + "self_attn.v_proj.weight", b + "attn_v.weight", {kHidden, kHidden},
        false);
    add(p + "self_attn.o_proj.weight", b + "attn_output.weight",
        {kHidden, kHidden}, false);
    add(p + "post_attention_layernorm.weight", b + "ffn_norm.weight", {kHidden},
        true);
    add(p + "mlp.gate_proj.weight", b + "ffn_gate.weight", {kInter, kHidden},
        false);
    add(p + "mlp.up_proj.weight", b + "ffn_up.weight", {kInter, kHidden},
        false);
    add(p + "mlp.down_proj.weight", b + "ffn_down.weight", {kHidden, kInter},
        false);
  }
  add("model.norm.weight", "output_norm.weight", {kHidden}, true);
  add("lm_head.weight", "output.weight", {kVocab, kHidden}, false);
  return w;
}

constexpr char kLlamaConfig[] = R"({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 256,
  "intermediate_size": 512,
  "num_attention_heads": 4,
  "num_key_value_heads": 4,
  "num_hidden_layers": 2,
  "vocab_size": 256,
  "torch_dtype": "bfloat16")";

// An importance matrix of the blocks' weights in llama-imatrix's legacy
// .dat form (save_imatrix_legacy): per entry, sorted by name, its name,
// ncall 4 and each column's mean square times ncall (here 0.5 to 10.5,
// varying by column); then the chunk count and the dataset's name.
std::string DemoImatrix(const std::vector<Weight>& weights) {
  auto i32 = [](int32_t v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
  };
  std::vector<const Weight*> blocks;
  for (const Weight& w : weights) {
    if (!w.is_norm && w.gguf_name.rfind("blk.", 0) == 0) blocks.push_back(&w);
  }
  std::sort(blocks.begin(), blocks.end(), [](const Weight* a, const Weight* b) {
    return a->gguf_name < b->gguf_name;
  });
  constexpr int32_t kNcall = 4;
  std::string out = i32(static_cast<int32_t>(blocks.size()));
  for (const Weight* w : blocks) {
    const int64_t cols = w->shape.back();
    std::vector<float> values(static_cast<size_t>(cols));
    for (int64_t j = 0; j < cols; ++j) {
      values[j] = (0.5f + static_cast<float>((j * 37) % 11)) * kNcall;
    }
    out += i32(static_cast<int32_t>(w->gguf_name.size())) + w->gguf_name;
    out += i32(kNcall) + i32(static_cast<int32_t>(cols)) + ToF32Bytes(values);
  }
  const std::string dataset = "demo-calibration.txt";
  return out + i32(kNcall) + i32(static_cast<int32_t>(dataset.size())) +
         dataset;
}

}  // namespace

bool WriteDemoCheckpoints(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir + "/source", ec);
  fs::create_directories(dir + "/int8", ec);
  if (ec) return false;
  const std::vector<Weight> weights = MakeWeights();

  std::vector<StTensor> source, int8;
  for (const Weight& w : weights) {
    source.push_back({w.hf_name, "BF16", w.shape, ToBF16Bytes(w.values)});
    if (w.is_norm || w.hf_name == "lm_head.weight" ||
        w.hf_name == "model.embed_tokens.weight") {
      int8.push_back(source.back());
      continue;
    }
    // Symmetric per-channel int8, as compressed-tensors stores it.
    const int64_t rows = w.shape[0], cols = w.shape[1];
    std::string q(static_cast<size_t>(rows * cols), '\0');
    std::vector<float> scales(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      float amax = 0;
      for (int64_t c = 0; c < cols; ++c)
        amax = std::max(amax, std::fabs(w.values[r * cols + c]));
      const float s = RoundToBF16(amax / 127.0f);
      scales[r] = s;
      for (int64_t c = 0; c < cols; ++c) {
        const long v = s != 0 ? std::lround(w.values[r * cols + c] / s) : 0;
        q[r * cols + c] = static_cast<char>(std::clamp<long>(v, -128, 127));
      }
    }
    int8.push_back({w.hf_name, "I8", w.shape, q});
    int8.push_back(
        {w.hf_name + "_scale", "BF16", {rows, 1}, ToBF16Bytes(scales)});
  }
  WriteFile(dir + "/source/model.safetensors",
            BuildSafetensors(source, {{"format", "pt"}}));
  WriteFile(dir + "/source/config.json", std::string(kLlamaConfig) + "\n}\n");
  WriteFile(dir + "/int8/model.safetensors",
            BuildSafetensors(int8, {{"format", "pt"}}));
  WriteFile(dir + "/int8/config.json", std::string(kLlamaConfig) + R"(,
  "quantization_config": {
    "quant_method": "compressed-tensors",
    "format": "int-quantized",
    "quantization_status": "compressed",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
      "num_bits": 8, "type": "int", "symmetric": true, "strategy": "channel",
      "group_size": null, "block_structure": null, "dynamic": false}}},
    "ignore": ["lm_head"]
  }
}
)");

  // llama.cpp's converter permutes the rows of Q and K for its RoPE layout:
  // per head, view the rows as [2, head_dim/2] and swap the two axes.
  auto gguf_values = [](const Weight& w) {
    const bool q = w.gguf_name.find(".attn_q.") != std::string::npos;
    const bool k = w.gguf_name.find(".attn_k.") != std::string::npos;
    if (!q && !k) return w.values;
    const int64_t rows = w.shape[0], cols = w.shape[1], heads = 4,
                  hd = rows / heads;
    std::vector<float> out(w.values.size());
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t half = 0; half < 2; ++half) {
        for (int64_t i = 0; i < hd / 2; ++i) {
          const int64_t hf_row = h * hd + half * (hd / 2) + i;
          const int64_t gguf_row = h * hd + i * 2 + half;
          std::copy_n(&w.values[hf_row * cols], cols, &out[gguf_row * cols]);
        }
      }
    }
    return out;
  };
  GgufSpec gguf;
  gguf.kv.push_back({"general.architecture", GgufString("llama")});
  gguf.kv.push_back({"general.name", GgufString("tensormorph-demo")});
  gguf.kv.push_back({"llama.block_count", GgufU32(kLayers)});
  gguf.kv.push_back({"llama.embedding_length", GgufU32(kHidden)});
  gguf.kv.push_back({"llama.feed_forward_length", GgufU32(kInter)});
  gguf.kv.push_back({"llama.attention.head_count", GgufU32(4)});
  gguf.kv.push_back({"llama.attention.head_count_kv", GgufU32(4)});
  GgufSpec f32 = gguf;
  // The keys llama.cpp's loader requires of a llama model (llama-quantize
  // reads the hyperparameters before it quantizes), with the values the
  // tests' llama oracle model writes (tests/oracle/llama_test_model.cc), so
  // that the F32 GGUF can be quantized with llama.cpp. In it alone: the
  // other files' listings are what README.md and docs show.
  f32.kv.push_back({"llama.context_length", GgufU32(2048)});
  f32.kv.push_back({"llama.rope.freq_base", GgufF32(10000.0f)});
  f32.kv.push_back({"llama.attention.layer_norm_rms_epsilon", GgufF32(1e-5f)});
  f32.kv.push_back({"llama.vocab_size", GgufU32(kVocab)});
  f32.kv.push_back({"llama.rope.dimension_count", GgufU32(kHidden / 4)});
  // Like llama.cpp's Q4_K_M: Q4_K, with attn_v, ffn_down and output in Q6_K
  // and the norms in F32.
  GgufSpec q4km = gguf;
  q4km.kv[1] = {"general.name", GgufString("tensormorph-demo-Q4_K_M")};
  for (const Weight& w : weights) {
    std::vector<int64_t> ne(w.shape.rbegin(), w.shape.rend());
    const std::vector<float> v = gguf_values(w);
    f32.tensors.push_back({w.gguf_name, ne, 0, ToF32Bytes(v)});
    const bool q6 = w.gguf_name.find("attn_v") != std::string::npos ||
                    w.gguf_name.find("ffn_down") != std::string::npos ||
                    w.gguf_name == "output.weight";
    if (w.is_norm) {
      q4km.tensors.push_back({w.gguf_name, ne, 0, ToF32Bytes(v)});
    } else if (q6) {
      q4km.tensors.push_back({w.gguf_name, ne, 14, QuantizeQ6_K(v)});
    } else {
      q4km.tensors.push_back({w.gguf_name, ne, 12, QuantizeQ4_K(v)});
    }
    if (w.is_norm) {
      gguf.tensors.push_back({w.gguf_name, ne, 0, ToF32Bytes(v)});
    } else {
      gguf.tensors.push_back({w.gguf_name, ne, 8, QuantizeQ8_0(v)});
    }
  }
  WriteFile(dir + "/model-q8_0.gguf", BuildGguf(gguf));
  WriteFile(dir + "/model-f32.gguf", BuildGguf(f32));
  WriteFile(dir + "/model-q4_k_m.gguf", BuildGguf(q4km));
  return true;
}

bool WriteDemoImatrix(const std::string& path) {
  WriteFile(path, DemoImatrix(MakeWeights()));
  return true;
}

const std::string& DemoDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(MakeTempDir());
    if (!WriteDemoCheckpoints(*d)) std::abort();
    return d;
  }();
  return *dir;
}

}  // namespace tensormorph::testing
