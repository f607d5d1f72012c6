// MLX's config.json "quantization", through Checkpoint::Open on a copy of
// the mlx_writer.py model with one value changed: a wrong type, a mode, bits
// or group size MLX does not have, or a config that contradicts the stored
// tensors is DATA_LOSS naming the file, the key path and expected vs actual;
// accepted spellings decode bit for bit as the written model does.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/format/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/python_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CopyDir;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ReadFileBytes;
using ::tensormorph::testing::WriterOutput;
using Json = nlohmann::json;

constexpr char kUp[] = "model.layers.0.mlp.up_proj";  // 8-bit, group 64

Json Config() {
  return Json::parse(
      ReadFileBytes(WriterOutput("mlx_writer.py") + "/model/config.json"));
}

// The model with `config` as its config.json, opened.
absl::StatusOr<std::shared_ptr<const Checkpoint>> OpenWith(const Json& config) {
  const std::string dir = CopyDir(WriterOutput("mlx_writer.py") + "/model");
  std::FILE* f = std::fopen((dir + "/config.json").c_str(), "w");
  const std::string text = config.dump();
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  return Checkpoint::Open(dir);
}

std::map<std::string, std::vector<uint32_t>> DecodeAll(const Checkpoint& c) {
  std::map<std::string, std::vector<uint32_t>> out;
  for (const LogicalTensor& t : c.tensors()) {
    std::vector<float> v(t.num_elements);
    EXPECT_TRUE(t.encoding->Decode(0, t.num_elements, v.data()).ok());
    std::vector<uint32_t>& b = out[t.name];
    b.resize(v.size());
    if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * 4);
  }
  return out;
}

// Opening with `config` fails with `reason` (a DATA_LOSS one), the message
// naming each of `named`: the key path, the value got, the tensor.
void ExpectDataLoss(const Json& config, ErrorReason reason,
                    const std::vector<std::string>& named) {
  auto c = OpenWith(config);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c, HasReason(reason));
  for (const std::string& value : named) {
    EXPECT_THAT(c, MessageNames(value));
  }
}

TEST(MlxConfigTest, BitsMlxDoesNotHaveAreDataLossNamingTheKey) {
  for (const Json& bits : {Json(7), Json(1), Json(16)}) {
    Json c = Config();
    c["quantization"]["bits"] = bits;
    ExpectDataLoss(
        c, ErrorReason::kHeaderInvalid,
        {"quantization.bits", "2, 3, 4, 5, 6 or 8", "integer " + bits.dump()});
  }
}

TEST(MlxConfigTest, WrongTypesAreDataLossNamingTheKey) {
  Json c = Config();
  c["quantization"]["bits"] = "4";
  ExpectDataLoss(c, ErrorReason::kHeaderInvalid,
                 {"quantization.bits", "[1, 1024]", "string \"4\""});
  c = Config();
  c["quantization"]["group_size"] = 64.0;
  ExpectDataLoss(c, ErrorReason::kHeaderInvalid,
                 {"quantization.group_size", "number 64.0"});
  c = Config();
  c["quantization"]["mode"] = 4;
  ExpectDataLoss(c, ErrorReason::kHeaderInvalid,
                 {"quantization.mode", "integer 4"});
  c = Config();
  c["quantization"] = Json::array();
  ExpectDataLoss(c, ErrorReason::kHeaderInvalid,
                 {"config.json: quantization: "});
}

TEST(MlxConfigTest, AbsurdGroupSizesAndUnknownModesAreDataLoss) {
  Json c = Config();
  c["quantization"]["group_size"] = 48;
  ExpectDataLoss(c, ErrorReason::kHeaderInvalid,
                 {"quantization.group_size", "32, 64 or 128", "integer 48"});
  c = Config();
  c["quantization"]["group_size"] = int64_t{1} << 40;
  ExpectDataLoss(c, ErrorReason::kHeaderInvalid, {"quantization.group_size"});
  c = Config();
  c["quantization"]["mode"] = "int4";
  ExpectDataLoss(
      c, ErrorReason::kHeaderInvalid,
      {"quantization.mode", "\"affine\", \"mxfp4\", \"mxfp8\", \"nvfp4\"",
       "string \"int4\""});
  c = Config();
  c["quantization"]["model.layers.1.self_attn.v_proj"]["group_size"] = 32;
  ExpectDataLoss(c, ErrorReason::kHeaderInvalid,
                 {"quantization.model.layers.1.self_attn.v_proj.group_size",
                  "16", "integer 32"});
}

TEST(MlxConfigTest, PerModuleEntriesAreCheckedByTheirPath) {
  Json c = Config();
  c["quantization"][kUp]["bits"] = 9;
  ExpectDataLoss(c, ErrorReason::kHeaderInvalid,
                 {std::string("quantization.") + kUp + ".bits"});
}

TEST(MlxConfigTest, ConfigContradictingTheTensorsIsDataLoss) {
  // 4 bits where 8 are stored: the words hold 256 codes a row, the scales
  // groups of 64 of only 128.
  Json c = Config();
  c["quantization"][kUp]["bits"] = 4;
  ExpectDataLoss(c, ErrorReason::kConventionMismatch,
                 {std::string(kUp) + ".scales"});
  // A module the config leaves unquantized whose scales are stored.
  c = Config();
  c["quantization"][kUp] = false;
  ExpectDataLoss(
      c, ErrorReason::kConventionMismatch,
      {"quantization." + std::string(kUp), std::string(kUp) + ".scales"});
  // A float mode over affine tensors: float scales where codes belong.
  c = Config();
  c["quantization"][kUp] = {{"mode", "mxfp8"}};
  ExpectDataLoss(c, ErrorReason::kConventionMismatch,
                 {std::string(kUp) + ".scales' is F16", "U8"});
}

TEST(MlxConfigTest, AcceptedSpellingsDecodeAsTheWrittenModel) {
  auto base = OpenWith(Config());
  ASSERT_TRUE(base.ok()) << base.status();
  const auto want = DecodeAll(**base);
  // Only quantization_config (no "quantization"), as a hub copy may have.
  Json c = Config();
  c.erase("quantization");
  // Unknown keys, null defaults, a module's `true`.
  Json d = Config();
  d["quantization"]["quant_method_note"] = "x";
  d["quantization"]["group_size"] = nullptr;
  d["quantization"]["model.layers.0.self_attn.q_proj"] = true;
  for (const Json& cfg : {c, d}) {
    auto got = OpenWith(cfg);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_THAT((*got)->conventions(), ::testing::ElementsAre("mlx"));
    EXPECT_EQ(DecodeAll(**got), want);
  }
}

}  // namespace
}  // namespace tensormorph
