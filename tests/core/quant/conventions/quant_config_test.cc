// The typed config layer, through Checkpoint::Open on copies of the shared
// fixtures with one config value changed: every key that affects decoding,
// given a value of the wrong type or out of range, is refused with DATA_LOSS
// naming the file, the key path and expected vs actual; every accepted
// variation (an unknown key, a null where the reference allows one, another
// file spelling the same config) decodes bit for bit what the untouched
// fixture decodes.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/format/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixture_copy.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CopyFixtureTensors;
using ::tensormorph::testing::EditSafetensors;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ReadJson;
using ::tensormorph::testing::StTensor;
using ::tensormorph::testing::WriteJson;
using ::testing::AllOf;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// Every logical tensor's decoded values as bits, and how it was encoded.
struct Decoded {
  std::map<std::string, std::vector<uint32_t>> bits;
  std::map<std::string, std::string> schemes;
  std::vector<std::string> conventions;
  std::vector<std::string> notes;
};

absl::StatusOr<Decoded> DecodeAll(const std::string& dir) {
  auto ckpt = Checkpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  Decoded d;
  d.conventions = (*ckpt)->conventions();
  d.notes = (*ckpt)->notes();
  for (const LogicalTensor& t : (*ckpt)->tensors()) {
    std::vector<float> v(t.num_elements);
    if (auto s = t.encoding->Decode(0, t.num_elements, v.data()); !s.ok())
      return s;
    std::vector<uint32_t>& b = d.bits[t.name];
    b.resize(v.size());
    if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * 4);
    d.schemes[t.name] =
        t.encoding->info().scheme + " / " + t.encoding->info().granularity;
  }
  return d;
}

// The fixture's tensors with `config` written as `file`.
std::string WithConfig(const std::string& fixture, const std::string& file,
                       const Json& config) {
  const std::string dir = CopyFixtureTensors(fixture);
  WriteJson(dir + "/" + file, config);
  return dir;
}

Json FixtureConfig(const std::string& fixture,
                   const std::string& file = "config.json") {
  return ReadJson(Fixture("safetensors/" + fixture + "/" + file));
}

// Expects `dir` to decode exactly what the untouched fixture decodes.
void ExpectSameAsFixture(const std::string& fixture, const std::string& dir) {
  auto want = DecodeAll(Fixture("safetensors/" + fixture));
  ASSERT_TRUE(want.ok()) << want.status();
  auto got = DecodeAll(dir);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->conventions, want->conventions);
  EXPECT_EQ(got->schemes, want->schemes);
  ASSERT_EQ(got->bits.size(), want->bits.size());
  for (const auto& [name, bits] : want->bits) {
    EXPECT_TRUE(got->bits[name] == bits) << name << " decodes differently";
  }
}

// A value a key must refuse, and how the message prints it.
struct Bad {
  const char* json;
  const char* got;
};

// Wrong for every integer key (and range-checked ones add their own).
const std::vector<Bad> kNotAnInteger = {
    {R"("4")", R"(got string "4")"},
    {"[4]", "got an array of 1"},
    {"{}", "got an object"},
    {"true", "got boolean true"},
    {"4.0", "got number 4.0"},
    {"4.5", "got number 4.5"},
    {"1e300", "got number 1e+300"},
    {"18446744073709551615", "got integer 18446744073709551615"},
    {"-9223372036854775808", "got integer -9223372036854775808"},
};
const std::vector<Bad> kNotABool = {
    {R"("x")", R"(got string "x")"},
    {R"("true")", R"(got string "true")"},
    {"null", "got null"},
    {"{}", "got an object"},
    {"[]", "got an array of 0"},
    {"1", "got integer 1"},
    {"0", "got integer 0"},
};
const std::vector<Bad> kNotAString = {
    {"5", "got integer 5"},         {"null", "got null"},
    {"[]", "got an array of 0"},    {"{}", "got an object"},
    {"false", "got boolean false"},
};

std::vector<Bad> Plus(std::vector<Bad> a, const std::vector<Bad>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct KeyCase {
  std::string fixture;
  std::string file;     // the config file the key is in
  std::string pointer;  // JSON pointer to the key in that file
  std::string path;     // the key path messages name
  std::vector<Bad> bad;
  // Set first, when the fixture's value is not the container the key needs.
  std::string setup_pointer = "";
  std::string setup_json = "";
};

std::string Name(const KeyCase& c) { return c.fixture + ":" + c.path; }

const std::string kCtWeights =
    "/quantization_config/config_groups/group_0/weights";
const std::string kCtPath = "quantization_config.config_groups.group_0.weights";

std::vector<KeyCase> KeyCases() {
  const std::vector<Bad> null_int = {{"null", "got null"}};
  return {
      // GPTQ: quantization_config in config.json.
      {"gptq_4bit_g32", "config.json", "/quantization_config/bits",
       "quantization_config.bits",
       Plus(Plus(kNotAnInteger, null_int),
            {{"0", "got integer 0"},
             {"-4", "got integer -4"},
             {"33", "got integer 33"},
             {"9223372036854775807", "got integer 9223372036854775807"}})},
      {"gptq_4bit_g32", "config.json", "/quantization_config/group_size",
       "quantization_config.group_size",
       Plus(Plus(kNotAnInteger, null_int),
            {{"0", "got integer 0"}, {"-2", "got integer -2"}})},
      {"gptq_4bit_g32", "config.json", "/quantization_config/sym",
       "quantization_config.sym", kNotABool},
      {"gptq_4bit_g32", "config.json", "/quantization_config/desc_act",
       "quantization_config.desc_act", kNotABool},
      {"gptq_4bit_g32", "config.json", "/quantization_config/checkpoint_format",
       "quantization_config.checkpoint_format", kNotAString},
      {"gptq_4bit_g32", "config.json", "/quantization_config/quant_method",
       "quantization_config.quant_method", kNotAString},
      // GPTQ from quantize_config.json alone: paths start at its top.
      {"gptq_4bit_g32", "quantize_config.json", "/bits", "bits",
       Plus(kNotAnInteger, {{"-1", "got integer -1"}})},
      {"gptq_4bit_g32", "quantize_config.json", "/sym", "sym", kNotABool},
      // AWQ.
      {"awq_4bit_g32", "config.json", "/quantization_config/bits",
       "quantization_config.bits",
       Plus(Plus(kNotAnInteger, null_int), {{"0", "got integer 0"}})},
      {"awq_4bit_g32", "config.json", "/quantization_config/group_size",
       "quantization_config.group_size",
       Plus(Plus(kNotAnInteger, null_int),
            {{"0", "got integer 0"}, {"-1", "got integer -1"}})},
      {"awq_4bit_g32", "config.json", "/quantization_config/zero_point",
       "quantization_config.zero_point", kNotABool},
      {"awq_4bit_g32", "config.json", "/quantization_config/version",
       "quantization_config.version", kNotAString},
      // compressed-tensors.
      {"ct_int8_tensor_asym", "config.json", kCtWeights + "/num_bits",
       kCtPath + ".num_bits",
       Plus(Plus(kNotAnInteger, null_int), {{"0", "got integer 0"},
                                            {"-8", "got integer -8"},
                                            {"64", "got integer 64"}})},
      {"ct_int8_tensor_asym", "config.json", kCtWeights + "/symmetric",
       kCtPath + ".symmetric", kNotABool},
      {"ct_int8_tensor_asym", "config.json", kCtWeights + "/type",
       kCtPath + ".type",
       Plus(kNotAString, {{R"("banana")", R"(got string "banana")"}})},
      {"ct_int8_tensor_asym",
       "config.json",
       kCtWeights + "/strategy",
       kCtPath + ".strategy",
       {{"5", "got integer 5"},
        {"[]", "got an array of 0"},
        {"{}", "got an object"},
        {"true", "got boolean true"}}},
      {"ct_int8_tensor_asym", "config.json", kCtWeights + "/group_size",
       kCtPath + ".group_size",
       Plus(kNotAnInteger, {{"0", "got integer 0"}, {"-7", "got integer -7"}})},
      {"ct_int8_tensor_asym",
       "config.json",
       kCtWeights + "/block_structure",
       kCtPath + ".block_structure",
       {{"5", "got integer 5"},
        {"{}", "got an object"},
        {"[128]", "got an array of 1"},
        {"[1, 2, 3]", "got an array of 3"},
        {R"("big")", R"(got string "big")"},
        {R"("0x4")", R"(got string "0x4")"},
        {"true", "got boolean true"}}},
      {"ct_int8_tensor_asym", "config.json", kCtWeights + "/block_structure/0",
       kCtPath + ".block_structure[0]",
       // The value that killed the server, once the array holds strings.
       Plus(kNotAnInteger, {{"0", "got integer 0"},
                            {"-128", "got integer -128"},
                            {"null", "got null"}}),
       kCtWeights + "/block_structure", "[128, 128]"},
      {"ct_int8_tensor_asym",
       "config.json",
       "/quantization_config/format",
       "quantization_config.format",
       {{"5", "got integer 5"}, {"[]", "got an array of 0"}}},
      {"ct_int8_tensor_asym",
       "config.json",
       "/quantization_config/config_groups/group_0/targets",
       "quantization_config.config_groups.group_0.targets",
       {{R"("Linear")", R"(got string "Linear")"},
        {"{}", "got an object"},
        {"5", "got integer 5"}}},
      {"ct_int8_tensor_asym", "config.json",
       "/quantization_config/config_groups/group_0/targets/0",
       "quantization_config.config_groups.group_0.targets[0]", kNotAString},
      {"ct_int8_tensor_asym",
       "config.json",
       "/quantization_config/config_groups/group_0/weights",
       "quantization_config.config_groups.group_0.weights",
       {{"5", "got integer 5"},
        {R"("w")", R"(got string "w")"},
        {"[]", "got an array of 0"}}},
      {"ct_int8_tensor_asym",
       "config.json",
       "/quantization_config/config_groups/group_0",
       "quantization_config.config_groups.group_0",
       {{"5", "got integer 5"},
        {"null", "got null"},
        {R"("g")", R"(got string "g")"}}},
      {"ct_int8_tensor_asym",
       "config.json",
       "/quantization_config/config_groups",
       "quantization_config.config_groups",
       {{"5", "got integer 5"},
        {"null", "got null"},
        {"[]", "got an array of 0"}}},
      // FP8.
      {"fp8_block_sharded",
       "config.json",
       "/quantization_config/weight_block_size",
       "quantization_config.weight_block_size",
       {{"128", "got integer 128"},
        {R"("128x128")", R"(got string "128x128")"},
        {"[128]", "got an array of 1"},
        {"{}", "got an object"}}},
      {"fp8_block_sharded", "config.json",
       "/quantization_config/weight_block_size/1",
       "quantization_config.weight_block_size[1]",
       Plus(kNotAnInteger, {{"0", "got integer 0"}, {"null", "got null"}})},
      // The config's envelope.
      {"mxfp4_gptoss",
       "config.json",
       "/quantization_config",
       "quantization_config",
       {{"5", "got integer 5"},
        {R"("mxfp4")", R"(got string "mxfp4")"},
        {"[]", "got an array of 0"},
        {"true", "got boolean true"}}},
      {"mxfp4_gptoss", "config.json", "/quantization_config/quant_method",
       "quantization_config.quant_method", kNotAString},
  };
}

class WrongValueTest : public ::testing::TestWithParam<KeyCase> {};

TEST_P(WrongValueTest, IsDataLossNamingFileKeyPathExpectedAndActual) {
  const KeyCase& c = GetParam();
  Json base = FixtureConfig(c.fixture, c.file);
  for (const Bad& bad : c.bad) {
    SCOPED_TRACE(std::string("value ") + bad.json);
    Json config = base;
    if (!c.setup_pointer.empty()) {
      config[Json::json_pointer(c.setup_pointer)] = Json::parse(c.setup_json);
    }
    config[Json::json_pointer(c.pointer)] = Json::parse(bad.json);
    const std::string dir = WithConfig(c.fixture, c.file, config);
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_FALSE(ckpt.ok()) << "accepted " << bad.json;
    EXPECT_THAT(ckpt, AllOf(HasReason(ErrorReason::kHeaderInvalid),
                            HasMetadata("file", c.file),
                            HasMetadata("rule", "config-key"),
                            MessageNames(c.path), MessageNames(bad.got)));
  }
}

INSTANTIATE_TEST_SUITE_P(EveryDecodingKey, WrongValueTest,
                         ::testing::ValuesIn(KeyCases()),
                         [](const ::testing::TestParamInfo<KeyCase>& i) {
                           std::string n = Name(i.param);
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch)))
                               ch = '_';
                           }
                           return n + "_" + std::to_string(i.index);
                         });

TEST(WrongValueTest, ServerKillingBlockStructureIsDataLossNamingTheElement) {
  Json config = FixtureConfig("ct_int8_tensor_asym");
  config[Json::json_pointer(kCtWeights + "/block_structure")] = {"a", "b"};
  const std::string dir =
      WithConfig("ct_int8_tensor_asym", "config.json", config);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ckpt.status().message(),
            "checkpoint '" + dir + "': config.json: " + kCtPath +
                ".block_structure[0]: expected an integer >= 1, got string "
                "\"a\"");
}

TEST(WrongValueTest, SymmetricNotABooleanNeverDecodesAsSymmetric) {
  // An asymmetric int8 tensor: "x", null and {} were read as the default
  // (symmetric) and decoded to wrong values.
  for (const char* v : {R"("x")", "null", "{}"}) {
    Json config = FixtureConfig("ct_int8_tensor_asym");
    config[Json::json_pointer(kCtWeights + "/symmetric")] = Json::parse(v);
    auto ckpt = Checkpoint::Open(
        WithConfig("ct_int8_tensor_asym", "config.json", config));
    ASSERT_FALSE(ckpt.ok()) << v;
    EXPECT_THAT(ckpt, AllOf(HasReason(ErrorReason::kHeaderInvalid),
                            HasMetadata("file", "config.json"),
                            HasMetadata("rule", "config-key"),
                            MessageNames(kCtPath + ".symmetric")));
  }
}

TEST(WrongValueTest, TopLevelThatIsNotAnObjectIsDataLoss) {
  for (const char* file :
       {"config.json", "quantize_config.json", "quant_config.json"}) {
    for (const char* v : {"[]", "5", "null", R"("x")"}) {
      SCOPED_TRACE(std::string(file) + " = " + v);
      const std::string dir = CopyFixtureTensors("gptq_4bit_g32");
      testing::WriteFile(dir + "/" + file, v);
      auto ckpt = Checkpoint::Open(dir);
      ASSERT_FALSE(ckpt.ok());
      EXPECT_THAT(ckpt, AllOf(HasReason(ErrorReason::kHeaderInvalid),
                              HasMetadata("file", file),
                              HasMetadata("rule", "config-key")));
    }
  }
}

TEST(WrongValueTest, RecognisedButUnsupportedValuesAreUnimplemented) {
  struct Case {
    const char* fixture;
    const char* pointer;
    const char* value;
    const char* says;
  } cases[] = {
      {"gptq_4bit_g32", "/quantization_config/bits", "5", "5 bits"},
      {"gptq_4bit_g32", "/quantization_config/checkpoint_format", R"("marlin")",
       "'marlin'"},
      {"awq_4bit_g32", "/quantization_config/version", R"("exllama")",
       "'exllama'"},
      {"ct_int8_tensor_asym", "/quantization_config/format", R"("marlin-24")",
       "'marlin-24'"},
      {"ct_int8_tensor_asym",
       "/quantization_config/config_groups/group_0/weights/strategy",
       R"("attn_head")", "'attn_head'"},
      {"mxfp4_gptoss", "/quantization_config/quant_method", R"("eetq")",
       "'eetq'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pointer);
    Json config = FixtureConfig(c.fixture);
    config[Json::json_pointer(c.pointer)] = Json::parse(c.value);
    auto ckpt = Checkpoint::Open(WithConfig(c.fixture, "config.json", config));
    ASSERT_FALSE(ckpt.ok());
    EXPECT_THAT(ckpt, AllOf(HasReason(ErrorReason::kUnimplemented),
                            MessageNames(c.says)));
  }
}

// ---- Accepted variations read exactly what the untouched file reads -------

const char* const kFixtures[] = {
    "gptq_4bit_g32",     "gptq_4bit_g32_actorder", "awq_4bit_g32",
    "ct_int8_channel",   "ct_int8_tensor_asym",    "ct_w4a16_group",
    "fp8_block_sharded", "mxfp4_gptoss",           "bnb_nf4",
};

TEST(AcceptedConfigTest, UnknownKeysAnywhereAreIgnored) {
  for (const char* fixture : kFixtures) {
    SCOPED_TRACE(fixture);
    Json config = FixtureConfig(fixture);
    config["frobnicate"] = {{"x", {1, nullptr, "y"}}};
    config["quantization_config"]["future_knob"] = Json::array({1.5, {}});
    if (config["quantization_config"].contains("config_groups")) {
      config["quantization_config"]["config_groups"]["group_0"]["weights"]
            ["future_knob"] = "z";
    }
    ExpectSameAsFixture(fixture, WithConfig(fixture, "config.json", config));
  }
}

TEST(AcceptedConfigTest, NullWhereCompressedTensorsDeclaresOptional) {
  for (const char* fixture :
       {"ct_int8_channel", "ct_int8_tensor_asym", "ct_w4a16_group"}) {
    SCOPED_TRACE(fixture);
    Json config = FixtureConfig(fixture);
    Json& w = config[Json::json_pointer(kCtWeights)];
    ASSERT_TRUE(w["block_structure"].is_null());
    if (w["group_size"].is_null()) w.erase("group_size");  // absent = null
    w["block_structure"] = nullptr;
    config["quantization_config"]["config_groups"]["group_0"]["format"] =
        nullptr;  // the group's format: Optional, falls back to the config's
    config["quantization_config"]["config_groups"]["group_0"]
          ["input_activations"] = nullptr;
    ExpectSameAsFixture(fixture, WithConfig(fixture, "config.json", config));
  }
}

TEST(AcceptedConfigTest, AbsentStrategyIsInferredAsCompressedTensorsDoes) {
  Json config = FixtureConfig("ct_w4a16_group");
  config[Json::json_pointer(kCtWeights)].erase("strategy");  // group_size 32
  ExpectSameAsFixture("ct_w4a16_group",
                      WithConfig("ct_w4a16_group", "config.json", config));
  config = FixtureConfig("ct_int8_channel");
  Json& w = config[Json::json_pointer(kCtWeights)];
  w["strategy"] = nullptr;
  w["group_size"] = -1;  // -1: per channel
  ExpectSameAsFixture("ct_int8_channel",
                      WithConfig("ct_int8_channel", "config.json", config));
}

TEST(AcceptedConfigTest, EachWeightTakesTheSchemeWhoseTargetsMatchIt) {
  // A decoy scheme first (the fallback when nothing matches), the real one
  // second, chosen only by its regex.
  Json config = FixtureConfig("ct_int8_tensor_asym");
  Json& groups = config["quantization_config"]["config_groups"];
  Json real = groups["group_0"];
  real["targets"] = {"re:model\\.layers\\.\\d+\\..*_proj"};
  Json decoy = real;
  decoy["targets"] = {"re:.*never_matches$", "lm_head", "re:(unclosed"};
  decoy["weights"]["symmetric"] = true;
  decoy["weights"]["strategy"] = "channel";
  groups = {{"group_0", decoy}, {"group_1", real}};
  ExpectSameAsFixture("ct_int8_tensor_asym",
                      WithConfig("ct_int8_tensor_asym", "config.json", config));
}

TEST(AcceptedConfigTest, NullQuantizationConfigFallsBackToQuantizeConfig) {
  Json config = FixtureConfig("gptq_4bit_g32");
  config["quantization_config"] = nullptr;
  const std::string dir = WithConfig("gptq_4bit_g32", "config.json", config);
  WriteJson(dir + "/quantize_config.json",
            FixtureConfig("gptq_4bit_g32", "quantize_config.json"));
  ExpectSameAsFixture("gptq_4bit_g32", dir);
}

TEST(AcceptedConfigTest, AutoAwqQuantConfigSpellsTheSameConfig) {
  const Json q = FixtureConfig("awq_4bit_g32")["quantization_config"];
  Json awq = {{"zero_point", q["zero_point"]},
              {"q_group_size", q["group_size"]},
              {"w_bit", q["bits"]},
              {"version", "GEMM"}};
  ExpectSameAsFixture("awq_4bit_g32",
                      WithConfig("awq_4bit_g32", "quant_config.json", awq));
}

TEST(AcceptedConfigTest, UnknownQuantMethodResolvesFromTensorsWithANote) {
  Json config = FixtureConfig("mxfp4_gptoss");
  config["quantization_config"]["quant_method"] = "brand-new-method";
  const std::string dir = WithConfig("mxfp4_gptoss", "config.json", config);
  ExpectSameAsFixture("mxfp4_gptoss", dir);
  auto got = DecodeAll(dir);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->notes.size(), 1u);
  EXPECT_THAT(got->notes[0],
              AllOf(HasSubstr("config.json: quantization_config.quant_method"),
                    HasSubstr("brand-new-method"),
                    HasSubstr("recognised from the stored tensors")));
  auto untouched = DecodeAll(Fixture("safetensors/mxfp4_gptoss"));
  ASSERT_TRUE(untouched.ok());
  EXPECT_TRUE(untouched->notes.empty());
}

// ---- bitsandbytes: the quant state is JSON inside a tensor ------------------

TEST(BnbQuantStateTest, WrongValuesAreDataLossNamingTheStateAndKey) {
  // `path`: the key as the message names it; `got`: the value as it names
  // it ("" where the case is about the key alone).
  struct Case {
    const char* key;
    const char* value;
    const char* path;
    const char* got;
  } cases[] = {
      {"blocksize", R"("64")", "blocksize", R"(string "64")"},
      {"blocksize", "0", "blocksize", "integer 0"},
      {"blocksize", "64.0", "blocksize", "number 64.0"},
      {"blocksize", "null", "blocksize", "null"},
      {"shape", R"("a")", "shape", ""},
      {"shape", "[]", "shape", ""},
      {"shape", R"([64, "x"])", "shape[1]", R"(string "x")"},
      {"shape", "[64, -2]", "shape[1]", "integer -2"},
      {"nested_offset", R"("0.5")", "nested_offset", ""},
      {"nested_blocksize", "-1", "nested_blocksize", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.key) + " = " + c.value);
    const std::string dir = CopyFixtureTensors("bnb_nf4");
    WriteJson(dir + "/config.json", FixtureConfig("bnb_nf4"));
    std::string state_name;
    EditSafetensors(dir + "/model.safetensors", [&](std::vector<StTensor>& ts) {
      for (StTensor& t : ts) {
        if (t.name.find(".quant_state.bitsandbytes__") == std::string::npos)
          continue;
        Json state = Json::parse(t.data);
        state[c.key] = Json::parse(c.value);
        t.data = state.dump();
        t.shape = {static_cast<int64_t>(t.data.size())};
        state_name = t.name;
      }
    });
    ASSERT_FALSE(state_name.empty());
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_FALSE(ckpt.ok());
    EXPECT_THAT(ckpt, AllOf(HasReason(ErrorReason::kHeaderInvalid),
                            HasMetadata("rule", "config-key"),
                            MessageNames("'" + state_name + "'"),
                            MessageNames(std::string(c.path) + ": "),
                            MessageNames(c.got)));
  }
}

}  // namespace
}  // namespace tensormorph
