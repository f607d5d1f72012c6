// The quantization config as a checkpoint reports it (Checkpoint::
// quant_config, config_files): the typed values the decoders were told,
// defaults applied, in the configs' own key names; and the config files as
// read. Opened from the shared fixtures (written by the quantizers' own
// libraries).
#include <string>
#include <utility>
#include <vector>

#include "core/format/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixture_copy.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CopyFixtureTensors;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::ReadJson;
using ::tensormorph::testing::WriteJson;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;
using ::testing::Pair;
using Json = nlohmann::json;

std::shared_ptr<const Checkpoint> Open(const std::string& path) {
  auto ckpt = Checkpoint::Open(path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  return ckpt.ok() ? *ckpt : nullptr;
}

TEST(ConfigSummaryTest, GptqListsTheValuesTheDecoderUses) {
  auto ckpt = Open(Fixture("safetensors/gptq_4bit_g32"));
  ASSERT_NE(ckpt, nullptr);
  EXPECT_THAT(ckpt->quant_config(),
              ElementsAre(Pair("quant_method", "gptq"), Pair("bits", "4"),
                          Pair("group_size", "32"), Pair("sym", "false"),
                          Pair("desc_act", "false"),
                          Pair("checkpoint_format", "gptq")));
}

TEST(ConfigSummaryTest, AbsentKeysShowTheirDefaults) {
  // The fixture's tensors with a config naming only the method: what the
  // decoder assumes is what the panel shows.
  const std::string dir = CopyFixtureTensors("gptq_4bit_g32");
  Json config = ReadJson(Fixture("safetensors/gptq_4bit_g32/config.json"));
  config["quantization_config"] = {{"quant_method", "gptq"},
                                   {"bits", 4},
                                   {"group_size", 32},
                                   {"sym", false}};
  WriteJson(dir + "/config.json", config);
  auto ckpt = Open(dir);
  ASSERT_NE(ckpt, nullptr);
  EXPECT_THAT(ckpt->quant_config(),
              ElementsAre(Pair("quant_method", "gptq"), Pair("bits", "4"),
                          Pair("group_size", "32"), Pair("sym", "false"),
                          Pair("desc_act", "false"),
                          Pair("checkpoint_format", "gptq")));
}

TEST(ConfigSummaryTest, CompressedTensorsKeysAreTheirConfigPaths) {
  auto ckpt = Open(Fixture("safetensors/ct_w4a16_group"));
  ASSERT_NE(ckpt, nullptr);
  EXPECT_THAT(
      ckpt->quant_config(),
      ElementsAre(Pair("quant_method", "compressed-tensors"),
                  Pair("quantization_status", "compressed"),
                  Pair("config_groups.group_0.format", "pack-quantized"),
                  Pair("config_groups.group_0.weights.num_bits", "4"),
                  Pair("config_groups.group_0.weights.type", "int"),
                  Pair("config_groups.group_0.weights.symmetric", "true"),
                  Pair("config_groups.group_0.weights.strategy", "group"),
                  Pair("config_groups.group_0.weights.group_size", "32"),
                  Pair("config_groups.group_0.targets", "Linear"),
                  Pair("ignore", "lm_head")));
}

TEST(ConfigSummaryTest, ConfigFilesAreListedInReadOrderAsTheirJson) {
  auto ckpt = Open(Fixture("safetensors/gptq_4bit_g32"));
  ASSERT_NE(ckpt, nullptr);
  ASSERT_THAT(ckpt->config_files(),
              ElementsAre(Field(&Checkpoint::ConfigFile::name, "config.json"),
                          Field(&Checkpoint::ConfigFile::name,
                                "quantize_config.json")));
  for (const Checkpoint::ConfigFile& f : ckpt->config_files()) {
    EXPECT_FALSE(f.truncated);
    EXPECT_EQ(Json::parse(f.json),
              ReadJson(Fixture("safetensors/gptq_4bit_g32/" + f.name)));
  }
}

TEST(ConfigSummaryTest, AConfigTooLargeToShowIsNamedButNotCarried) {
  const std::string dir = CopyFixtureTensors("gptq_4bit_g32");
  Json config = ReadJson(Fixture("safetensors/gptq_4bit_g32/config.json"));
  config["vocabulary"] =
      std::string(Checkpoint::kMaxShownConfigBytes, 'x');  // one long value
  WriteJson(dir + "/config.json", config);
  auto ckpt = Open(dir);
  ASSERT_NE(ckpt, nullptr);
  ASSERT_FALSE(ckpt->config_files().empty());
  EXPECT_EQ(ckpt->config_files()[0].name, "config.json");
  EXPECT_TRUE(ckpt->config_files()[0].truncated);
  EXPECT_THAT(ckpt->config_files()[0].json, IsEmpty());
}

TEST(ConfigSummaryTest, GgufHasNoConfigs) {
  auto ckpt = Open(Fixture("gguf/Q8_0.gguf"));
  ASSERT_NE(ckpt, nullptr);
  EXPECT_THAT(ckpt->quant_config(), IsEmpty());
  EXPECT_THAT(ckpt->config_files(), IsEmpty());
}

TEST(ConfigSummaryTest, PlainSafetensorsHasNoMethod) {
  auto ckpt = Open(Fixture("safetensors/plain"));
  ASSERT_NE(ckpt, nullptr);
  EXPECT_THAT(ckpt->quant_config(),
              ElementsAre(Pair("quant_method", "(none)")));
}

}  // namespace
}  // namespace tensormorph
