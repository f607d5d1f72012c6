// `tensormorph check` on the ModelOpt checkpoints of
// tests/python/writers/modelopt.py with one thing broken at a time: a
// global scale (weight_scale_2) of 0, NaN or Inf, a zero or NaN group scale,
// a zero pre_quant_scale, and modules excluded from quantization yet stored
// quantized are each the finding of their rule, on the tensor, file and
// element they concern.
#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/check/check.h"
#include "core/format/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixture_copy.h"
#include "tests/support/python_writer.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::modelopt_check_test {
namespace {

using ::tensormorph::testing::CopyDir;
using ::tensormorph::testing::EditSafetensors;
using ::tensormorph::testing::ReadJson;
using ::tensormorph::testing::StTensor;
using ::tensormorph::testing::WriteJson;
using ::tensormorph::testing::WriterOutput;
using ::testing::EndsWith;
using Json = nlohmann::json;

constexpr char kDown[] = "model.layers.0.mlp.down_proj";
constexpr char kQ[] = "model.layers.0.self_attn.q_proj";

// A copy of fixture `name` with the stored tensor `tensor` edited.
std::string Broken(const std::string& name, const std::string& tensor,
                   const std::function<void(StTensor&)>& edit) {
  const std::string dir = CopyDir(WriterOutput("modelopt.py") + "/" + name);
  EditSafetensors(dir + "/model.safetensors", [&](std::vector<StTensor>& ts) {
    for (StTensor& t : ts) {
      if (t.name == tensor) edit(t);
    }
  });
  return dir;
}

std::vector<Finding> Check(const std::string& dir) {
  auto ckpt = Checkpoint::Open(dir, {.lenient = true});
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<Finding> out;
  if (!ckpt.ok()) return out;
  auto s = CheckCheckpoint(**ckpt, CheckOptions{}, nullptr, nullptr,
                           [&](const Finding& f) { out.push_back(f); });
  EXPECT_TRUE(s.ok()) << s.status();
  return out;
}

// The findings of `rule`.
std::vector<Finding> Of(const std::vector<Finding>& found,
                        const std::string& rule) {
  std::vector<Finding> out;
  std::copy_if(found.begin(), found.end(), std::back_inserter(out),
               [&](const Finding& f) { return f.rule == rule; });
  return out;
}

// The one finding of `rule` on `tensor`.
Finding One(const std::vector<Finding>& found, const std::string& rule,
            const std::string& tensor) {
  Finding none;
  int n = 0;
  for (const Finding& f : Of(found, rule)) {
    if (f.tensor == tensor) {
      none = f;
      ++n;
    }
  }
  EXPECT_EQ(n, 1) << rule << " on " << tensor;
  return none;
}

std::string F32Bytes(float v) {
  std::string b(4, '\0');
  std::memcpy(b.data(), &v, 4);
  return b;
}

// weight_scale_2 set to `v`: a finding of `rule` on that tensor, in the
// one shard, at its only element.
void ExpectGlobalScaleFinding(float v, const std::string& rule) {
  const std::string scale2 = std::string(kDown) + ".weight_scale_2";
  const auto found = Check(
      Broken("nvfp4", scale2, [&](StTensor& t) { t.data = F32Bytes(v); }));
  const Finding f = One(found, rule, scale2);
  EXPECT_THAT(f.file, EndsWith("model.safetensors"));
  EXPECT_EQ(f.count, 1);
  EXPECT_EQ(f.worst_group, 0);
}

TEST(ModelOptCheckRulesTest, AGlobalScaleOfZeroIsAZeroScale) {
  ExpectGlobalScaleFinding(0.0f, "zero-scale");
}

TEST(ModelOptCheckRulesTest, ANanGlobalScaleIsANanScaleAndNanValues) {
  ExpectGlobalScaleFinding(std::numeric_limits<float>::quiet_NaN(),
                           "nan-scale");
  // The weight still resolves, every value NaN: the decoded-value rule.
  const std::string scale2 = std::string(kDown) + ".weight_scale_2";
  const auto found = Check(Broken("nvfp4", scale2, [&](StTensor& t) {
    t.data = F32Bytes(std::numeric_limits<float>::quiet_NaN());
  }));
  const Finding v = One(found, "nan-value", std::string(kDown) + ".weight");
  EXPECT_EQ(v.count, 48 * 128);
  EXPECT_TRUE(Of(found, "companion-shape").empty());
}

TEST(ModelOptCheckRulesTest, AnInfGlobalScaleIsAnInfScale) {
  ExpectGlobalScaleFinding(std::numeric_limits<float>::infinity(), "inf-scale");
}

TEST(ModelOptCheckRulesTest, ZeroAndNanBlockScalesNameTheirElement) {
  // NVFP4's F8_E4M3 block scales: 0x00 is 0, 0x7F NaN. Element 5 of row 1
  // (8 blocks a row) is scale element 13.
  const std::string scale = std::string(kDown) + ".weight_scale";
  for (const auto& [byte, rule] : std::vector<std::pair<char, std::string>>{
           {'\x00', "zero-scale"}, {'\x7f', "nan-scale"}}) {
    SCOPED_TRACE(rule);
    const auto found =
        Check(Broken("nvfp4", scale, [&](StTensor& t) { t.data[13] = byte; }));
    const Finding f = One(found, rule, scale);
    EXPECT_THAT(f.file, EndsWith("model.safetensors"));
    EXPECT_EQ(f.count, 1);
    EXPECT_EQ(f.worst_group, 13);
  }
}

TEST(ModelOptCheckRulesTest, W4a8ZeroGroupScaleAndZeroPreQuantScale) {
  // W4A8_AWQ's F32 group scales [48, 2]: element 3 is row 1's second group.
  const std::string scale = std::string(kDown) + ".weight_scale";
  auto found = Check(Broken("w4a8_awq", scale, [&](StTensor& t) {
    std::memset(t.data.data() + 3 * 4, 0, 4);
  }));
  Finding f = One(found, "zero-scale", scale);
  EXPECT_EQ(f.worst_group, 3);
  // A BF16 pre_quant_scale of 0 at column 7 zeroes that input column.
  const std::string pqs = std::string(kDown) + ".pre_quant_scale";
  found = Check(Broken("w4a8_awq", pqs, [&](StTensor& t) {
    std::memset(t.data.data() + 7 * 2, 0, 2);
  }));
  f = One(found, "zero-scale", pqs);
  EXPECT_EQ(f.worst_group, 7);
  EXPECT_THAT(f.file, EndsWith("model.safetensors"));
}

TEST(ModelOptCheckRulesTest, ExcludeModulesStoredQuantizedIsExcludedQuantized) {
  const std::string dir = CopyDir(WriterOutput("modelopt.py") + "/nvfp4");
  Json j = ReadJson(dir + "/hf_quant_config.json");
  j["quantization"]["exclude_modules"] = {"lm_head", "*.q_proj"};
  WriteJson(dir + "/hf_quant_config.json", j);
  const auto found = Check(dir);
  const Finding f =
      One(found, "excluded-quantized", std::string(kQ) + ".weight");
  EXPECT_THAT(f.file, EndsWith("hf_quant_config.json"));
  EXPECT_EQ(Of(found, "excluded-quantized").size(), 1u);
}

TEST(ModelOptCheckRulesTest, MixedPrecisionExcludedOrUnlistedIsExcluded) {
  // The fixture's model.layers.1.self_attn* exclusion, and an NVFP4 layer
  // its map no longer lists: both stored quantized.
  const std::string dir =
      CopyDir(WriterOutput("modelopt.py") + "/mixed_precision");
  Json j = ReadJson(dir + "/hf_quant_config.json");
  j["quantization"]["exclude_modules"] = {"lm_head",
                                          "model.layers.0.self_attn*"};
  j["quantization"]["quantized_layers"].erase("model.layers.1.mlp.down_proj");
  WriteJson(dir + "/hf_quant_config.json", j);
  const auto found = Check(dir);
  EXPECT_EQ(Of(found, "excluded-quantized").size(), 2u);
  for (const char* t : {"model.layers.0.self_attn.q_proj.weight",
                        "model.layers.1.mlp.down_proj.weight"}) {
    const Finding f = One(found, "excluded-quantized", t);
    EXPECT_THAT(f.file, EndsWith("hf_quant_config.json"));
  }
}

TEST(ModelOptCheckRulesTest, TheW4a8AndAwqFixturesAreClean) {
  for (const char* name : {"w4a8_awq", "nvfp4_awq", "w4a8_awq_sharded"}) {
    SCOPED_TRACE(name);
    const auto found = Check(WriterOutput("modelopt.py") + "/" + name);
    for (const Finding& f : found) {
      EXPECT_NE(f.severity, Severity::kError) << f.rule << " " << f.tensor;
    }
  }
}

}  // namespace
}  // namespace tensormorph::modelopt_check_test
