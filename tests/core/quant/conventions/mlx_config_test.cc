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
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CopyDir;
using ::tensormorph::testing::ReadFileBytes;
using ::tensormorph::testing::WriterOutput;
using ::testing::AllOf;
using ::testing::HasSubstr;
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

void ExpectDataLoss(const Json& config, const std::vector<std::string>& parts) {
  auto c = OpenWith(config);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss) << c.status();
  for (const std::string& p : parts) {
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(p));
  }
}

TEST(MlxConfigTest, BitsMlxDoesNotHaveAreDataLossNamingTheKey) {
  for (const Json& bits : {Json(7), Json(1), Json(16)}) {
    Json c = Config();
    c["quantization"]["bits"] = bits;
    ExpectDataLoss(c, {"config.json: quantization.bits: expected 2, 3, 4, 5, "
                       "6 or 8 (affine bits), got integer " +
                       bits.dump()});
  }
}

TEST(MlxConfigTest, WrongTypesAreDataLossNamingTheKey) {
  Json c = Config();
  c["quantization"]["bits"] = "4";
  ExpectDataLoss(c, {"quantization.bits: expected an integer in [1, 1024], "
                     "got string \"4\""});
  c = Config();
  c["quantization"]["group_size"] = 64.0;
  ExpectDataLoss(
      c, {"quantization.group_size: expected an integer", "got number 64.0"});
  c = Config();
  c["quantization"]["mode"] = 4;
  ExpectDataLoss(c, {"quantization.mode: expected a string, got integer 4"});
  c = Config();
  c["quantization"] = Json::array();
  ExpectDataLoss(c, {"config.json: quantization: expected an object"});
}

TEST(MlxConfigTest, AbsurdGroupSizesAndUnknownModesAreDataLoss) {
  Json c = Config();
  c["quantization"]["group_size"] = 48;
  ExpectDataLoss(c, {"quantization.group_size: expected 32, 64 or 128 "
                     "(affine group size), got integer 48"});
  c = Config();
  c["quantization"]["group_size"] = int64_t{1} << 40;
  ExpectDataLoss(c, {"quantization.group_size: expected an integer in "});
  c = Config();
  c["quantization"]["mode"] = "int4";
  ExpectDataLoss(c, {"quantization.mode: expected one of \"affine\", "
                     "\"mxfp4\", \"mxfp8\", \"nvfp4\", got string \"int4\""});
  c = Config();
  c["quantization"]["model.layers.1.self_attn.v_proj"]["group_size"] = 32;
  ExpectDataLoss(c, {"quantization.model.layers.1.self_attn.v_proj.group_size"
                     ": expected 16 (nvfp4 group size), got integer 32"});
}

TEST(MlxConfigTest, PerModuleEntriesAreCheckedByTheirPath) {
  Json c = Config();
  c["quantization"][kUp]["bits"] = 9;
  ExpectDataLoss(
      c, {std::string("quantization.") + kUp + ".bits: expected 2, 3, 4"});
}

TEST(MlxConfigTest, ConfigContradictingTheTensorsIsDataLoss) {
  // 4 bits where 8 are stored: the words hold 256 codes a row, the scales
  // groups of 64 of only 128.
  Json c = Config();
  c["quantization"][kUp]["bits"] = 4;
  ExpectDataLoss(c, {"MLX", std::string(kUp) + ".scales"});
  // A module the config leaves unquantized whose scales are stored.
  c = Config();
  c["quantization"][kUp] = false;
  ExpectDataLoss(c, {"quantization." + std::string(kUp) + " is false",
                     std::string(kUp) + ".scales"});
  // A float mode over affine tensors: float scales where codes belong.
  c = Config();
  c["quantization"][kUp] = {{"mode", "mxfp8"}};
  ExpectDataLoss(c, {std::string(kUp) + ".scales' is F16 but must be U8"});
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
