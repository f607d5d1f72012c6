// `tensormorph check` on the MLX model of tests/python/writers/mlx_writer.py
// with one thing broken at a time: each breakage is the finding its rule
// names, on the tensor it concerns, and the rest of the model still checks.
#include <algorithm>
#include <cstring>
#include <functional>
#include <set>
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

namespace tensormorph::mlx_check_test {
namespace {

using ::tensormorph::testing::CopyDir;
using ::tensormorph::testing::EditSafetensors;
using ::tensormorph::testing::ReadFileBytes;
using ::tensormorph::testing::StTensor;
using ::tensormorph::testing::WriterOutput;
using Json = nlohmann::json;

constexpr char kQ[] = "model.layers.0.self_attn.q_proj";  // int4, BF16
constexpr char kUp[] = "model.layers.0.mlp.up_proj";      // int8, F16

// A copy of the model with its tensors and config edited.
std::string Broken(const std::function<void(std::vector<StTensor>&)>& tensors,
                   const std::function<void(Json&)>& config = {}) {
  const std::string dir = CopyDir(WriterOutput("mlx_writer.py") + "/model");
  if (tensors) EditSafetensors(dir + "/model.safetensors", tensors);
  if (config) {
    Json c = Json::parse(ReadFileBytes(dir + "/config.json"));
    config(c);
    testing::WriteFile(dir + "/config.json", c.dump());
  }
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

// The finding of `rule`, which must be there once.
Finding One(const std::vector<Finding>& found, const std::string& rule) {
  Finding none;
  const auto n =
      std::count_if(found.begin(), found.end(),
                    [&](const Finding& f) { return f.rule == rule; });
  EXPECT_EQ(n, 1) << rule;
  for (const Finding& f : found) {
    if (f.rule == rule) return f;
  }
  return none;
}

void Erase(std::vector<StTensor>& ts, const std::string& name) {
  std::erase_if(ts, [&](const StTensor& t) { return t.name == name; });
}

TEST(MlxCheckTest, MissingBiasesAreAMissingCompanion) {
  const auto found = Check(Broken([](std::vector<StTensor>& ts) {
    Erase(ts, std::string(kQ) + ".biases");
  }));
  EXPECT_EQ(One(found, "missing-companion").tensor,
            std::string(kQ) + ".weight");
}

TEST(MlxCheckTest, ScalesWithoutTheirWeightAreAnOrphan) {
  const auto found = Check(Broken([](std::vector<StTensor>& ts) {
    Erase(ts, std::string(kQ) + ".weight");
  }));
  EXPECT_EQ(One(found, "orphan-companion").tensor, std::string(kQ) + ".scales");
}

TEST(MlxCheckTest, ConfigContradictingTheTensorsIsCompanionShape) {
  // Bits the tensors do not hold.
  auto found =
      Check(Broken({}, [](Json& c) { c["quantization"][kUp]["bits"] = 4; }));
  EXPECT_EQ(One(found, "companion-shape").tensor, std::string(kUp) + ".weight");
  // A module the config excludes, quantized anyway.
  found = Check(Broken({}, [](Json& c) { c["quantization"][kUp] = false; }));
  EXPECT_THAT(One(found, "companion-shape").actual + "",
              ::testing::Not(::testing::IsEmpty()));
}

TEST(MlxCheckTest, NanAndZeroScalesAreFound) {
  const auto found = Check(Broken([](std::vector<StTensor>& ts) {
    for (StTensor& t : ts) {
      if (t.name != std::string(kQ) + ".scales") continue;
      const uint16_t nan = 0x7FC0, zero = 0;
      std::memcpy(t.data.data(), &nan, 2);       // group 0
      std::memcpy(t.data.data() + 2, &zero, 2);  // group 1
    }
  }));
  EXPECT_EQ(One(found, "nan-scale").tensor.rfind(kQ, 0), 0u);
  EXPECT_EQ(One(found, "zero-scale").tensor.rfind(kQ, 0), 0u);
}

TEST(MlxCheckTest, BadConfigKeysAreFindingsByKeyPath) {
  const auto found =
      Check(Broken({}, [](Json& c) { c["quantization"]["bits"] = 7; }));
  std::set<std::string> keys;
  for (const Finding& f : found) {
    if (f.rule == "config-key") keys.insert(f.actual + " @ " + f.expected);
  }
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_THAT(*keys.begin(), ::testing::HasSubstr("7"));
}

}  // namespace
}  // namespace tensormorph::mlx_check_test
