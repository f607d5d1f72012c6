#include "tests/support/check_cases.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>

#include "nlohmann/json.hpp"
#include "tests/support/fixture_copy.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::testing {
namespace {

constexpr int kRows = 4, kCols = 64;

struct CtCheckpoint {
  std::vector<int8_t> codes;
  std::vector<float> scales;
  std::string scale_dtype = "F32";
  std::vector<uint16_t> scale_bits;  // F16 bits, when scale_dtype is F16
  std::vector<std::string> ignore = {"lm_head"};
  std::vector<std::string> targets = {"Linear"};
  // The structure cases: what is stored and what the config says.
  bool with_weight = true, with_scale = true;
  std::string weight_dtype = "I8";  // "U8": codes + 128; "F32": dense
  std::vector<int64_t> scale_shape = {kRows, 1};
  nlohmann::json weights_config = {{"num_bits", 8},
                                   {"type", "int"},
                                   {"symmetric", true},
                                   {"strategy", "channel"}};
  std::string status = "compressed";
};

CtCheckpoint Clean() {
  CtCheckpoint c;
  const std::vector<float> g = Gaussian(kRows * kCols, 21);
  for (float x : g) {
    c.codes.push_back(static_cast<int8_t>(
        std::clamp(std::lround(x * 30.0f), long{-127}, long{127})));
  }
  c.scales = {0.01f, 0.02f, 0.015f, 0.005f};
  return c;
}

std::string Write(const CtCheckpoint& c) {
  const std::string dir = MakeTempDir();
  std::string scale_bytes;
  if (c.scale_dtype == "F16") {
    scale_bytes = Bytes(c.scale_bits);
  } else {
    scale_bytes = Bytes(c.scales);
  }
  std::vector<float> head = Gaussian(2 * 8, 5);
  std::vector<StTensor> tensors = {
      {"lm_head.weight", "F32", {2, 8}, Bytes(head)}};
  if (c.with_weight) {
    std::string weight = Bytes(c.codes);
    if (c.weight_dtype == "U8") {
      for (char& b : weight)
        b = static_cast<char>(static_cast<uint8_t>(b) + 128);
    } else if (c.weight_dtype == "F32") {
      // Saved uncompressed: the fake-quantized values themselves.
      std::vector<float> dense;
      for (size_t i = 0; i < c.codes.size(); ++i) {
        dense.push_back(c.codes[i] * c.scales[i / kCols]);
      }
      weight = Bytes(dense);
    }
    tensors.push_back({kCheckWeight, c.weight_dtype, {kRows, kCols}, weight});
  }
  if (c.with_scale) {
    tensors.push_back({kCheckScale, c.scale_dtype, c.scale_shape, scale_bytes});
  }
  WriteFile(dir + "/model.safetensors", BuildSafetensors(tensors));
  nlohmann::json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"quantization_config",
       {{"quant_method", "compressed-tensors"},
        {"format", "int-quantized"},
        {"quantization_status", c.status},
        {"config_groups",
         {{"group_0",
           {{"targets", c.targets}, {"weights", c.weights_config}}}}},
        {"ignore", c.ignore}}}};
  WriteJson(dir + "/config.json", config);
  return dir;
}

std::string WritePlain(const std::vector<StTensor>& tensors) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/model.safetensors", BuildSafetensors(tensors));
  return dir;
}

// The GPTQ fixture with every qzeros word set to `word` under
// checkpoint_format `format`, and sym as the zeros say.
std::string WriteGptq(uint32_t word, const std::string& format) {
  const std::string dir = MakeTempDir();
  CopyFixtureInto("gptq_4bit_g32", dir);
  EditSafetensors(dir + "/model.safetensors", [&](std::vector<StTensor>& ts) {
    for (StTensor& t : ts) {
      if (!t.name.ends_with("qzeros")) continue;
      std::vector<uint32_t> words(t.data.size() / 4, word);
      t.data = Bytes(words);
    }
  });
  for (const char* name : {"config.json", "quantize_config.json"}) {
    nlohmann::json j = ReadJson(dir + "/" + name);
    nlohmann::json& q =
        j.contains("quantization_config") ? j["quantization_config"] : j;
    q["checkpoint_format"] = format;
    q["sym"] = true;
    WriteJson(dir + "/" + name, j);
  }
  return dir;
}

// Safetensors shards of plain F32 tensors and an index whose weight_map is
// `index` (tensor -> shard file name).
std::string WriteSharded(
    const std::map<std::string, std::vector<std::string>>& shards,
    const std::map<std::string, std::string>& index) {
  const std::string dir = MakeTempDir();
  int seed = 40;
  for (const auto& [file, names] : shards) {
    std::vector<StTensor> ts;
    for (const std::string& n : names) {
      ts.push_back({n, "F32", {2, 32}, Bytes(Gaussian(64, ++seed))});
    }
    WriteFile(dir + "/" + file, BuildSafetensors(ts));
  }
  nlohmann::json map = nlohmann::json::object();
  for (const auto& [t, f] : index) map[t] = f;
  WriteJson(dir + "/model.safetensors.index.json",
            {{"metadata", {{"total_size", 0}}}, {"weight_map", map}});
  return dir;
}

// The FP8 block fixture with weight_block_size set to `block`.
std::string WriteFp8Block(int64_t block) {
  const std::string dir = MakeTempDir();
  CopyFixtureInto("fp8_block_sharded", dir);
  nlohmann::json j = ReadJson(dir + "/config.json");
  j["quantization_config"]["weight_block_size"] = {block, block};
  WriteJson(dir + "/config.json", j);
  return dir;
}

}  // namespace

std::string WriteCleanCheckCheckpoint() { return Write(Clean()); }

std::pair<std::string, std::string> WriteCheckAndSource(double codes_scale,
                                                        int off,
                                                        double off_steps) {
  CtCheckpoint c = Clean();
  const std::vector<float> g = Gaussian(kRows * kCols, 21);
  c.codes.clear();
  for (float x : g) {
    c.codes.push_back(static_cast<int8_t>(
        std::clamp(std::lround(x * codes_scale), long{-127}, long{127})));
  }
  // The source: each decoded value moved by a fixed pattern of at most
  // 0.45 steps, as rounding to nearest leaves it.
  std::vector<float> source;
  for (size_t i = 0; i < c.codes.size(); ++i) {
    const int64_t row = static_cast<int64_t>(i) / kCols;
    double u = 0.45 * std::sin(static_cast<double>(i) * 1.7);
    if (row == 1 && static_cast<int64_t>(i) - kCols < off) u = off_steps;
    source.push_back(static_cast<float>((c.codes[i] + u) * c.scales[row]));
  }
  const std::string dir = Write(c);
  const std::string src = MakeTempDir();
  std::vector<float> head = Gaussian(2 * 8, 5);
  WriteFile(src + "/model.safetensors",
            BuildSafetensors({
                {"lm_head.weight", "F32", {2, 8}, Bytes(head)},
                {kCheckWeight, "F32", {kRows, kCols}, Bytes(source)},
            }));
  return {dir, src};
}

std::vector<CheckCase> CheckCases() {
  std::vector<CheckCase> cases;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Structure: each read from a lenient open.
  cases.push_back(
      {"shard-missing",
       "error",
       WriteSharded({{"model-00001-of-00002.safetensors", {"model.a.weight"}}},
                    {{"model.a.weight", "model-00001-of-00002.safetensors"},
                     {"model.b.weight", "model-00002-of-00002.safetensors"}}),
       "model.b.weight",
       "model-00002-of-00002.safetensors' does not exist",
       {}});
  cases.push_back(
      {"index-tensor-missing",
       "error",
       WriteSharded(
           {{"model-00001-of-00001.safetensors", {"model.a.weight"}}},
           {{"model.a.weight", "model-00001-of-00001.safetensors"},
            {"model.norm.weight", "model-00001-of-00001.safetensors"}}),
       "model.norm.weight",
       "the shard lacks it",
       {}});
  cases.push_back(
      {"shard-tensor-unindexed",
       "warning",
       WriteSharded({{"model-00001-of-00001.safetensors",
                      {"model.a.weight", "model.extra.weight"}}},
                    {{"model.a.weight", "model-00001-of-00001.safetensors"}}),
       "model.extra.weight",
       "the weight_map does not place it there",
       {}});
  {
    // The second shard's header claims more bytes than the file has.
    const std::string dir =
        WriteSharded({{"model-00001-of-00002.safetensors", {"model.a.weight"}},
                      {"model-00002-of-00002.safetensors", {"model.b.weight"}}},
                     {{"model.a.weight", "model-00001-of-00002.safetensors"},
                      {"model.b.weight", "model-00002-of-00002.safetensors"}});
    std::string bytes(8, '\0');
    bytes[0] = static_cast<char>(0xff);
    bytes[1] = static_cast<char>(0xff);
    WriteFile(dir + "/model-00002-of-00002.safetensors", bytes + "{}");
    cases.push_back({"shard-corrupt",
                     "error",
                     dir,
                     "model.b.weight",
                     "model-00002-of-00002.safetensors",
                     {}});
  }
  {
    // An index whose weight_map is a list: the shards are checked alone.
    const std::string dir =
        WriteSharded({{"model-00001-of-00001.safetensors", {"model.a.weight"}}},
                     {{"model.a.weight", "model-00001-of-00001.safetensors"}});
    WriteJson(dir + "/model.safetensors.index.json",
              {{"metadata", {{"total_size", 0}}},
               {"weight_map", {"model-00001-of-00001.safetensors"}}});
    cases.push_back({"index-corrupt",
                     "error",
                     dir,
                     "",
                     "expected an object with a 'weight_map' object",
                     {}});
  }
  {
    // A re-save beside the old file: the same name in two files.
    const std::string dir = MakeTempDir();
    WriteFile(
        dir + "/model-old.safetensors",
        BuildSafetensors(
            {{"model.a.weight", "F32", {2, 32}, Bytes(Gaussian(64, 7))}}));
    WriteFile(
        dir + "/model.safetensors",
        BuildSafetensors(
            {{"model.a.weight", "F32", {2, 32}, Bytes(Gaussian(64, 8))}}));
    cases.push_back({"duplicate-name",
                     "error",
                     dir,
                     "model.a.weight",
                     "stored again in",
                     {}});
  }
  {
    CtCheckpoint c = Clean();
    c.with_scale = false;
    cases.push_back({"missing-companion",
                     "error",
                     Write(c),
                     kCheckWeight,
                     "down_proj.weight_scale', which every quantized weight",
                     {}});
  }
  {
    CtCheckpoint c = Clean();
    c.with_weight = false;
    cases.push_back({"orphan-companion",
                     "error",
                     Write(c),
                     kCheckScale,
                     "has no weight: neither",
                     {}});
  }
  {
    CtCheckpoint c = Clean();
    c.scales = {0.01f, 0.02f, 0.015f, 0.005f, 0.01f, 0.02f, 0.015f, 0.005f};
    c.scale_shape = {kRows, 2};  // per-group scales under a channel config
    cases.push_back(
        {"companion-shape",
         "error",
         Write(c),
         kCheckWeight,
         "is F32[4,2] but channel along out over [4,64] needs [4,1]",
         {}});
  }
  cases.push_back({"fp8-scale-layout",
                   "error",
                   WriteFp8Block(64),
                   "model.layers.0.mlp.down_proj.weight",
                   "is F32[2,3] but block 64x64 over [200,300] needs [4,5]",
                   {}});
  {
    CtCheckpoint c = Clean();
    c.weights_config["num_bits"] = "8";
    c.weights_config["symmetric"] = "yes";
    cases.push_back({"config-key",
                     "error",
                     Write(c),
                     "",
                     // Each key its own finding: num_bits and symmetric.
                     "quantization_config.config_groups.group_0.weights.",
                     {}});
  }
  {
    CtCheckpoint c = Clean();
    c.weights_config["strategy"] = "group";  // with no group_size
    cases.push_back({"unresolved-tensor",
                     "error",
                     Write(c),
                     kCheckWeight,
                     "strategy 'group' without a group_size >= 1",
                     {}});
  }
  // Values.
  {
    CtCheckpoint c = Clean();
    c.scales[2] = nan;
    cases.push_back({"nan-value",
                     "error",
                     Write(c),
                     kCheckWeight,
                     "64 of 256 values are NaN (first at flat index 128)",
                     {"nan-scale"}});
  }
  {
    CtCheckpoint c = Clean();
    c.scales[1] = inf;
    for (int i = 0; i < kCols; ++i) {
      if (c.codes[kCols + i] == 0) c.codes[kCols + i] = 1;
    }
    cases.push_back({"inf-value",
                     "error",
                     Write(c),
                     kCheckWeight,
                     "64 of 256 values are Inf (first at flat index 64)",
                     {"inf-scale"}});
  }
  {
    std::vector<float> v = Gaussian(64, 1);
    v[17] = nan;
    cases.push_back({"nan-stored-value",
                     "warning",
                     WritePlain({{"w", "F32", {2, 32}, Bytes(v)}}),
                     "w",
                     "1 of 64 values are NaN (first at flat index 17)",
                     {}});
  }
  {
    std::vector<float> v = Gaussian(64, 2);
    v[3] = -inf;
    v[40] = inf;
    cases.push_back({"inf-stored-value",
                     "warning",
                     WritePlain({{"w", "F32", {2, 32}, Bytes(v)}}),
                     "w",
                     "2 of 64 values are Inf (first at flat index 3)",
                     {}});
  }
  {
    CtCheckpoint c = Clean();
    c.scales[2] = nan;
    cases.push_back({"nan-scale",
                     "error",
                     Write(c),
                     kCheckScale,
                     "1 of 4 scales are NaN (first at element 2)",
                     {"nan-value"}});
  }
  {
    CtCheckpoint c = Clean();
    c.scales[1] = inf;
    // No zero code in the row: 0 * Inf would be NaN, another rule.
    for (int i = 0; i < kCols; ++i) {
      if (c.codes[kCols + i] == 0) c.codes[kCols + i] = 1;
    }
    cases.push_back({"inf-scale",
                     "error",
                     Write(c),
                     kCheckScale,
                     "1 of 4 scales are Inf (first at element 1)",
                     {"inf-value"}});
  }
  {
    CtCheckpoint c = Clean();
    c.scales[3] = 0;
    cases.push_back({"zero-scale",
                     "warning",
                     Write(c),
                     kCheckScale,
                     "1 of 4 scales are 0 (first at element 3)",
                     {"all-zero-group"}});
  }
  {
    CtCheckpoint c = Clean();
    c.scale_dtype = "F16";
    for (float s : c.scales) c.scale_bits.push_back(F32ToF16Bits(s));
    c.scale_bits[0] = 0x0010;  // 2^-20: an F16 denormal
    cases.push_back({"denormal-scale",
                     "warning",
                     Write(c),
                     kCheckScale,
                     "1 of 4 scales are denormal",
                     {}});
  }
  {
    CtCheckpoint c = Clean();
    c.scale_dtype = "F16";
    for (float s : c.scales) c.scale_bits.push_back(F32ToF16Bits(s));
    c.scale_bits[1] = 0x7BFF;  // 65504
    // Also found on the weight: its row decodes past fp16's range.
    cases.push_back({"fp16-saturated-scale",
                     "warning",
                     Write(c),
                     kCheckScale,
                     "are exactly +-65504",
                     {}});
  }
  {
    CtCheckpoint c = Clean();
    std::fill(c.codes.begin() + 2 * kCols, c.codes.begin() + 3 * kCols, 0);
    cases.push_back({"all-zero-group",
                     "warning",
                     Write(c),
                     kCheckWeight,
                     "1 of 4 groups decode to all zeros (e.g. group 2)",
                     {}});
  }
  {
    CtCheckpoint c = Clean();
    std::fill(c.codes.begin() + kCols, c.codes.begin() + 2 * kCols, 5);
    cases.push_back({"constant-group",
                     "warning",
                     Write(c),
                     kCheckWeight,
                     "1 of 4 groups decode to one non-zero value (e.g. group "
                     "1)",
                     {}});
  }
  {
    // 4096 codes (16 per level of the int8 grid), only even ones in
    // [-64, 64]: 65 of 256 levels, as a 7-bit tensor would.
    CtCheckpoint c = Clean();
    const std::vector<float> g = Gaussian(64 * kCols, 9);
    c.codes.clear();
    for (float x : g) {
      c.codes.push_back(static_cast<int8_t>(
          2 * std::clamp(std::lround(x * 12.0f), long{-32}, long{32})));
    }
    c.scales.assign(64, 0.01f);
    const std::string dir = MakeTempDir();
    std::vector<float> head = Gaussian(2 * 8, 5);
    WriteFile(dir + "/model.safetensors",
              BuildSafetensors({
                  {"lm_head.weight", "F32", {2, 8}, Bytes(head)},
                  {kCheckWeight, "I8", {64, kCols}, Bytes(c.codes)},
                  {kCheckScale, "F32", {64, 1}, Bytes(c.scales)},
              }));
    WriteFile(dir + "/config.json",
              ReadFileBytes(Write(Clean()) + "/config.json"));
    cases.push_back({"dead-levels",
                     "warning",
                     dir,
                     kCheckWeight,
                     "only 65 of 256 levels occur in 4096 values",
                     {}});
  }
  {
    CtCheckpoint c = Clean();
    for (int i = 0; i < kCols; ++i) {
      c.codes[i] = i % 2 == 0 ? int8_t{-128} : int8_t{127};
    }
    cases.push_back({"saturated-group",
                     "warning",
                     Write(c),
                     kCheckWeight,
                     "1 of 4 groups have more; worst group 0 with 100.0%",
                     {}});
  }
  {
    // ggml type 200, unknown to Tensormorph (a type newer than it): the
    // tensor is listed, not decoded, and the F32 tensor beside it is still
    // checked (its value past fp16's range is found).
    std::vector<float> norm = Gaussian(256, 6);
    norm[0] = 1e6f;
    GgufSpec spec;
    spec.tensors = {
        {"blk.0.attn_norm.weight", {256}, 0, Bytes(norm)},
        {"blk.0.ffn_down.weight", {256}, 200, std::string(66, '\x11')}};
    const std::string dir = MakeTempDir();
    WriteFile(dir + "/model.gguf", BuildGguf(spec));
    cases.push_back({"undecodable-tensor",
                     "warning",
                     dir + "/model.gguf",
                     "blk.0.ffn_down.weight",
                     "its values were not checked",
                     {"fp16-saturated-scale"}});
  }
  // Against a source.
  {
    auto [dir, src] = WriteCheckAndSource(30, 3, 0.8);
    cases.push_back({"source-err-steps",
                     "error",
                     dir,
                     kCheckWeight,
                     "max_excess_steps = 0.294 at flat index 64",
                     {},
                     src});
  }
  {
    // Codes spread over 7 levels of 256: a scale 30 times too large. Each
    // element is within half a step, and the SQNR ~12 dB, not 38.
    auto [dir, src] = WriteCheckAndSource(1, 0, 0);
    cases.push_back({"source-sqnr",
                     "warning",
                     dir,
                     kCheckWeight,
                     "SQNR against 'model.layers.0.mlp.down_proj.weight' of "
                     "a 8-bit grid",
                     {},
                     src});
  }
  cases.push_back({"gptq-zero-convention",
                   "error",
                   WriteGptq(0x77777777u, "gptq_v2"),
                   "model.layers.0.mlp.down_proj.weight",
                   "every qzeros code is 7 (zero - 1, as v1 stores it) in 2 "
                   "tensor(s)",
                   {}});
  {
    CtCheckpoint c = Clean();
    c.weight_dtype = "F32";  // saved uncompressed, said compressed
    cases.push_back({"quantization-status",
                     "error",
                     Write(c),
                     kCheckWeight,
                     "is F32, dense: the weights were saved uncompressed",
                     {}});
  }
  {
    CtCheckpoint c = Clean();
    c.weight_dtype = "U8";  // unsigned codes under a symmetric int8 config
    cases.push_back({"quantization-format",
                     "error",
                     Write(c),
                     kCheckWeight,
                     "I8 weight codes (int-quantized, int8 symmetric: signed "
                     "codes)",
                     {}});
  }
  {
    CtCheckpoint c = Clean();
    c.ignore = {"lm_head", "re:.*mlp\\.gate_projj$"};
    cases.push_back({"ignore-pattern-unused",
                     "warning",
                     Write(c),
                     "",
                     "\"re:.*mlp\\.gate_projj$\"",
                     {}});
  }
  {
    // ModelOpt FP8 with lm_head excluded, yet stored FP8 with its scale.
    const std::string dir = WritePlain(
        {{"lm_head.weight", "F8_E4M3", {2, 32}, std::string(64, '\x38')},
         {"lm_head.weight_scale", "F32", {}, Bytes(std::vector<float>{0.5f})},
         {"model.norm.weight", "F32", {32}, Bytes(Gaussian(32, 9))}});
    WriteJson(dir + "/hf_quant_config.json",
              {{"producer", {{"name", "modelopt"}}},
               {"quantization",
                {{"quant_algo", "FP8"}, {"exclude_modules", {"lm_head"}}}}});
    cases.push_back({"excluded-quantized",
                     "error",
                     dir,
                     "lm_head.weight",
                     "is stored F8_E4M3, quantized",
                     {}});
  }
  {
    std::vector<float> v = Gaussian(64, 3);
    cases.push_back(
        {"duplicate-tensor",
         "info",
         WritePlain({{"a", "F32", {2, 32}, Bytes(v)},
                     {"b", "F32", {2, 32}, Bytes(v)},
                     {"c", "F32", {2, 32}, Bytes(Gaussian(64, 4))}}),
         "a",
         "2 tensors hold the same 256 bytes",
         {}});
  }
  return cases;
}

}  // namespace tensormorph::testing
