#include "tests/support/sharded_diff_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "nlohmann/json.hpp"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::testing {
namespace {

constexpr int kLayers = 3, kHidden = 64, kInter = 128;

float RoundToBF16(float f) {
  const uint32_t u = static_cast<uint32_t>(F32ToBF16Bits(f)) << 16;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

std::string ShardName(int i, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i, n);
  return buf;
}

// Writes `shards` (tensors per file) and the index naming them.
void WriteSharded(const std::string& dir,
                  const std::vector<std::vector<StTensor>>& shards) {
  std::filesystem::create_directories(dir);
  nlohmann::json map = nlohmann::json::object();
  int64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name =
        ShardName(static_cast<int>(i + 1), static_cast<int>(shards.size()));
    for (const StTensor& t : shards[i]) {
      map[t.name] = name;
      total += static_cast<int64_t>(t.data.size());
    }
    WriteFile(dir + "/" + name,
              BuildSafetensors(shards[i], {{"format", "pt"}}));
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}},
                          {"weight_map", map}};
  WriteFile(dir + "/model.safetensors.index.json", index.dump(1));
}

}  // namespace

ShardedDiffCheckpoint WriteShardedDiffCheckpoint(
    const ShardedDiffOptions& options) {
  ShardedDiffCheckpoint c;
  c.root = MakeTempDir();
  c.quant = "quant";
  c.reference = "source";
  c.only_in_quant = "model.extra.weight";
  c.only_in_reference = "model.orphan.weight";
  c.shape_mismatch = "model.mismatch.weight";
  std::vector<std::vector<StTensor>> quant(4), source(2);
  uint64_t seed = 7;
  auto values = [&](int64_t n, bool norm) {
    std::vector<float> v = Gaussian(static_cast<size_t>(n), seed++, 0.02f);
    for (size_t i = 0; i < v.size(); ++i) {
      if (norm)
        v[i] += 1.0f;
      else if (i % 89 == 0)
        v[i] *= 12.0f;  // outliers stretch the scales
      v[i] = RoundToBF16(v[i]);
    }
    return v;
  };
  auto plain = [&](const std::string& name, std::vector<int64_t> shape,
                   int shard, bool norm) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const std::string bytes = ToBF16Bytes(values(n, norm));
    quant[shard].push_back({name, "BF16", shape, bytes});
    source[shard < 2 ? 0 : 1].push_back({name, "BF16", shape, bytes});
    c.compared.push_back(name);
  };
  auto linear = [&](const std::string& name, int64_t rows, int64_t cols,
                    int shard) {
    const std::vector<float> w = values(rows * cols, false);
    std::string q(static_cast<size_t>(rows * cols), '\0');
    std::vector<float> scales(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      float amax = 0;
      for (int64_t k = 0; k < cols; ++k)
        amax = std::max(amax, std::fabs(w[r * cols + k]));
      float s = RoundToBF16(amax / 127.0f);
      if (options.quantizer_faults && r == 0) s = RoundToBF16(amax / 254.0f);
      if (options.quantizer_faults && r == 2) s = 0;
      scales[r] = s;
      for (int64_t k = 0; k < cols; ++k) {
        const long v = s != 0 ? std::lround(w[r * cols + k] / s) : 0;
        q[r * cols + k] = static_cast<char>(std::clamp<long>(v, -128, 127));
      }
      if (options.quantizer_faults && r == 1) {
        char& code = q[r * cols + 1];
        code = static_cast<char>(code >= 0 ? code - 2 : code + 2);
      }
    }
    quant[shard].push_back({name, "I8", {rows, cols}, q});
    quant[shard].push_back(
        {name + "_scale", "BF16", {rows, 1}, ToBF16Bytes(scales)});
    source[shard < 2 ? 0 : 1].push_back(
        {name, "BF16", {rows, cols}, ToBF16Bytes(w)});
    c.compared.push_back(name);
  };
  plain("model.embed_tokens.weight", {kInter, kHidden}, 3, false);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    plain(p + "input_layernorm.weight", {kHidden}, l, true);
    for (const char* m : {"q", "k", "v", "o"}) {
      linear(p + "self_attn." + m + "_proj.weight", kHidden, kHidden, l);
    }
    plain(p + "post_attention_layernorm.weight", {kHidden}, l, true);
    linear(p + "mlp.gate_proj.weight", kInter, kHidden, l);
    linear(p + "mlp.up_proj.weight", kInter, kHidden, l);
    linear(p + "mlp.down_proj.weight", kHidden, kInter, l);
  }
  plain("model.norm.weight", {kHidden}, 3, true);
  // The odd ones out: in the pairing lists, compared by no part.
  quant[3].push_back(
      {c.only_in_quant, "BF16", {8}, ToBF16Bytes(std::vector<float>(8, 1.0f))});
  source[1].push_back({c.only_in_reference,
                       "BF16",
                       {8},
                       ToBF16Bytes(std::vector<float>(8, 1.0f))});
  quant[3].push_back({c.shape_mismatch,
                      "BF16",
                      {4, 8},
                      ToBF16Bytes(std::vector<float>(32, 1.0f))});
  source[1].push_back({c.shape_mismatch,
                       "BF16",
                       {8, 4},
                       ToBF16Bytes(std::vector<float>(32, 1.0f))});
  WriteSharded(c.root + "/" + c.quant, quant);
  WriteSharded(c.root + "/" + c.reference, source);
  constexpr char kConfig[] = R"({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "torch_dtype": "bfloat16")";
  WriteFile(c.root + "/source/config.json", std::string(kConfig) + "\n}\n");
  WriteFile(c.root + "/quant/config.json", std::string(kConfig) + R"(,
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
  std::sort(c.compared.begin(), c.compared.end());
  return c;
}

}  // namespace tensormorph::testing
