#include "tests/support/check_cases.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

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
  WriteFile(dir + "/model.safetensors",
            BuildSafetensors({
                {"lm_head.weight", "F32", {2, 8}, Bytes(head)},
                {kCheckWeight, "I8", {kRows, kCols}, Bytes(c.codes)},
                {kCheckScale, c.scale_dtype, {kRows, 1}, scale_bytes},
            }));
  nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                           {"quantization_config",
                            {{"quant_method", "compressed-tensors"},
                             {"format", "int-quantized"},
                             {"quantization_status", "compressed"},
                             {"config_groups",
                              {{"group_0",
                                {{"targets", c.targets},
                                 {"weights",
                                  {{"num_bits", 8},
                                   {"type", "int"},
                                   {"symmetric", true},
                                   {"strategy", "channel"}}}}}}},
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

}  // namespace

std::string WriteCleanCheckCheckpoint() { return Write(Clean()); }

std::vector<CheckCase> CheckCases() {
  std::vector<CheckCase> cases;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  {
    std::vector<float> v = Gaussian(64, 1);
    v[17] = nan;
    cases.push_back({"nan-value",
                     "error",
                     WritePlain({{"w", "F32", {2, 32}, Bytes(v)}}),
                     "w",
                     "1 of 64 values are NaN (first at flat index 17)",
                     {}});
  }
  {
    std::vector<float> v = Gaussian(64, 2);
    v[3] = -inf;
    v[40] = inf;
    cases.push_back({"inf-value",
                     "error",
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
    // IQ2_XXS (type 16): recognised, not decoded; the F32 tensor beside it
    // is still checked (its value past fp16's range is found).
    std::vector<float> norm = Gaussian(256, 6);
    norm[0] = 1e6f;
    GgufSpec spec;
    spec.tensors = {
        {"blk.0.attn_norm.weight", {256}, 0, Bytes(norm)},
        {"blk.0.ffn_down.weight", {256}, 16, std::string(66, '\x11')}};
    const std::string dir = MakeTempDir();
    WriteFile(dir + "/model.gguf", BuildGguf(spec));
    cases.push_back({"undecodable-tensor",
                     "warning",
                     dir + "/model.gguf",
                     "blk.0.ffn_down.weight",
                     "its values were not checked",
                     {"fp16-saturated-scale"}});
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
    c.ignore = {"lm_head", "re:.*mlp\\.gate_projj$"};
    cases.push_back({"ignore-pattern-unused",
                     "warning",
                     Write(c),
                     "",
                     "\"re:.*mlp\\.gate_projj$\"",
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
