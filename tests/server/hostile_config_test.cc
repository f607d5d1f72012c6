// Hostile quantization configs through a live server: the configs that once
// killed tensormorphd (a wrong-typed value thrown as nlohmann::type_error on
// a worker thread) and others are refused with DATA_LOSS naming the file and
// key path, while a bystander streams from a good file without a failure;
// afterwards the server still opens and serves a good quantized checkpoint.
#include <atomic>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixture_copy.h"
#include "tests/support/loopback_server.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::CopyFixtureInto;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ReadJson;
using ::tensormorph::testing::WriteFile;
using ::tensormorph::testing::WriteJson;
using ::testing::AllOf;
using ::testing::HasSubstr;
using Json = nlohmann::json;

const char kWeights[] = "/quantization_config/config_groups/group_0/weights";
const char kWeightsPath[] = "quantization_config.config_groups.group_0.weights";

// A hostile config's refusal: `reason`; HEADER_INVALID names the config
// `file` in its metadata; the message names each of `named` (the key path,
// the value got, the tensor and the shapes).
void ExpectRefusal(const absl::Status& s, ErrorReason reason,
                   const std::string& file,
                   const std::vector<std::string>& named) {
  EXPECT_THAT(s, HasReason(reason));
  if (reason == ErrorReason::kHeaderInvalid) {
    EXPECT_THAT(s, HasMetadata("file", file));
  }
  for (const std::string& value : named) EXPECT_THAT(s, MessageNames(value));
}

class HostileConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir();
    WriteFile(dir_ + "/good.safetensors",
              BuildSafetensors(
                  {{"w", "F32", {1024, 1024}, std::string(4 << 20, '\x3f')}}));
    loopback_ = testing::StartLoopbackServer({dir_});
    client_ = loopback_.client.get();
    target_ = loopback_.address;
    bystander_ = std::thread([this] { StreamUntilStopped(); });
  }
  void TearDown() override {
    // A test may end before one stream could (a short one, a loaded
    // machine): the bystander must have been served beside it all the same.
    first_stream_.WaitForNotificationWithTimeout(absl::Seconds(60));
    stop_ = true;
    if (bystander_.joinable()) bystander_.join();
    EXPECT_GT(streams_ok_.load(), 0) << "the bystander never finished a stream";
    EXPECT_EQ(streams_failed_.load(), 0) << last_failure_;
  }

  void StreamUntilStopped() {
    auto client = *Client::Connect(target_);
    v1::ReadSliceRequest r;
    r.set_checkpoint("good.safetensors");
    r.set_tensor("w");
    r.set_max_chunk_bytes(256 << 10);
    while (!stop_) {
      auto data = client->ReadSliceAll(r);
      if (data.ok() && data->bytes.size() == (4u << 20)) {
        ++streams_ok_;
      } else {
        ++streams_failed_;
        last_failure_ = data.ok() ? "short read" : data.status().ToString();
      }
      if (!first_stream_.HasBeenNotified()) first_stream_.Notify();
    }
  }

  // A copy of fixture `fixture` as `name`, its config.json with the value at
  // `pointer` replaced by `value` (JSON text).
  std::string Mutated(const std::string& name, const std::string& fixture,
                      const std::string& pointer, const std::string& value) {
    const std::string dir = dir_ + "/" + name;
    std::filesystem::create_directory(dir);
    CopyFixtureInto(fixture, dir);
    Json config = ReadJson(dir + "/config.json");
    config[Json::json_pointer(pointer)] = Json::parse(value);
    WriteJson(dir + "/config.json", config);
    return name;
  }

  void ExpectRefused(const std::string& name, const std::string& key_path,
                     const std::string& got) {
    SCOPED_TRACE(name);
    auto info = client_->GetCheckpoint(name);
    ASSERT_FALSE(info.ok()) << "opened a hostile config";
    // The file and key at fault, and the value found there.
    EXPECT_THAT(info, AllOf(HasReason(ErrorReason::kHeaderInvalid),
                            HasMetadata("rule", "config-key"),
                            MessageNames("config.json: " + key_path + ":"),
                            MessageNames(got)));
    // Every call on it answers the same, and the server keeps serving.
    auto tensors = client_->ListTensors(name);
    EXPECT_EQ(tensors.status().code(), absl::StatusCode::kDataLoss);
    ASSERT_TRUE(client_->GetCheckpoint("good.safetensors").ok())
        << "the server stopped serving after " << name;
  }

  std::string dir_, target_;
  testing::LoopbackServer loopback_;
  Client* client_ = nullptr;
  std::thread bystander_;
  std::atomic<bool> stop_{false};
  std::atomic<int> streams_ok_{0}, streams_failed_{0};
  absl::Notification first_stream_;
  std::string last_failure_;
};

TEST_F(HostileConfigTest, ConfigsThatKilledTheServerAreDataLoss) {
  const std::string w = kWeights, wp = kWeightsPath;
  ExpectRefused(Mutated("block_strings", "ct_int8_tensor_asym",
                        w + "/block_structure", R"(["a", "b"])"),
                wp + ".block_structure[0]", R"(got string "a")");
  ExpectRefused(Mutated("block_object", "ct_int8_tensor_asym",
                        w + "/block_structure", R"([{}, 128])"),
                wp + ".block_structure[0]", "got an object");
  ExpectRefused(Mutated("block_float", "ct_int8_tensor_asym",
                        w + "/block_structure", R"([128, 1.5])"),
                wp + ".block_structure[1]", "got number 1.5");
}

TEST_F(HostileConfigTest, SilentlyMisreadConfigsAreDataLoss) {
  const std::string w = kWeights, wp = kWeightsPath;
  ExpectRefused(
      Mutated("symmetric_x", "ct_int8_tensor_asym", w + "/symmetric", R"("x")"),
      wp + ".symmetric", R"(got string "x")");
  ExpectRefused(Mutated("symmetric_null", "ct_int8_tensor_asym",
                        w + "/symmetric", "null"),
                wp + ".symmetric", "got null");
  ExpectRefused(
      Mutated("num_bits_string", "ct_w4a16_group", w + "/num_bits", R"("4")"),
      wp + ".num_bits", R"(got string "4")");
  ExpectRefused(Mutated("group_not_object", "ct_int8_tensor_asym",
                        "/quantization_config/config_groups/group_0", "7"),
                "quantization_config.config_groups.group_0", "got integer 7");
  ExpectRefused(Mutated("gptq_bits_huge", "gptq_4bit_g32",
                        "/quantization_config/bits", "18446744073709551615"),
                "quantization_config.bits", "got integer 18446744073709551615");
  ExpectRefused(Mutated("awq_group_negative", "awq_4bit_g32",
                        "/quantization_config/group_size", "-32"),
                "quantization_config.group_size", "got integer -32");
  ExpectRefused(Mutated("fp8_block_null_elem", "fp8_block_sharded",
                        "/quantization_config/weight_block_size/0", "null"),
                "quantization_config.weight_block_size[0]", "got null");
}

TEST_F(HostileConfigTest, GoodCheckpointServesAfterwards) {
  ExpectRefused(
      Mutated("block_strings", "ct_int8_tensor_asym",
              std::string(kWeights) + "/block_structure", R"(["a", "b"])"),
      std::string(kWeightsPath) + ".block_structure[0]", R"(got string "a")");
  std::filesystem::create_directory(dir_ + "/good_ct");
  CopyFixtureInto("ct_int8_tensor_asym", dir_ + "/good_ct");
  auto info = client_->GetCheckpoint("good_ct");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_THAT(info->conventions(), ::testing::Contains("compressed-tensors"));
  auto tensors = client_->ListTensors("good_ct");
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_FALSE(tensors->empty());
  v1::ReadSliceRequest r;
  r.set_checkpoint("good_ct");
  r.set_tensor(tensors->front().name());
  auto data = client_->ReadSliceAll(r);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_FALSE(data->bytes.empty());
}

TEST_F(HostileConfigTest, UnknownMethodIsServedWithANote) {
  const std::string name =
      Mutated("unknown_method", "mxfp4_gptoss",
              "/quantization_config/quant_method", R"("brand-new")");
  auto info = client_->GetCheckpoint(name);
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->notes_size(), 1);
  EXPECT_THAT(info->notes(0), AllOf(HasSubstr("brand-new"),
                                    HasSubstr("recognised from the stored "
                                              "tensors")));
  EXPECT_THAT(info->conventions(), ::testing::Contains("mxfp4 (gpt-oss)"));
}

// A ModelOpt checkpoint (an NVFP4 down_proj, an FP8 q_proj in a
// MIXED_PRECISION map, an unquantized lm_head) as `name`, its
// hf_quant_config.json "quantization" edited by `edit`.
std::string ModelOpt(const std::string& dir, const std::string& name,
                     const std::function<void(Json&)>& edit) {
  const std::string d = dir + "/" + name;
  std::filesystem::create_directory(d);
  const std::string m0 = "model.layers.0.mlp.down_proj";
  const std::string m1 = "model.layers.0.self_attn.q_proj";
  WriteFile(
      d + "/model.safetensors",
      BuildSafetensors(
          {{m0 + ".weight", "U8", {8, 16}, std::string(128, '\x2a')},
           {m0 + ".weight_scale", "F8_E4M3", {8, 2}, std::string(16, '\x38')},
           {m0 + ".weight_scale_2",
            "F32",
            {},
            testing::Bytes(std::vector<float>{0.25f})},
           {m1 + ".weight", "F8_E4M3", {4, 32}, std::string(128, 'A')},
           {m1 + ".weight_scale",
            "F32",
            {},
            testing::Bytes(std::vector<float>{0.5f})},
           {"lm_head.weight", "F32", {2, 4}, std::string(32, '\0')}}));
  Json q = {{"quant_algo", "MIXED_PRECISION"},
            {"exclude_modules", {"lm_head"}},
            {"quantized_layers",
             {{m0, {{"quant_algo", "NVFP4"}, {"group_size", 16}}},
              {m1, {{"quant_algo", "FP8"}}}}}};
  edit(q);
  WriteJson(d + "/hf_quant_config.json",
            {{"producer", {{"name", "modelopt"}}}, {"quantization", q}});
  return name;
}

TEST_F(HostileConfigTest, ModelOptConfigsAreDataLossNamingTheKey) {
  const struct {
    const char* name;
    std::function<void(Json&)> edit;
    ErrorReason reason;
    std::vector<std::string> named;
  } cases[] = {
      {"mo_algo_int",
       [](Json& q) { q["quant_algo"] = 4; },
       ErrorReason::kHeaderInvalid,
       {"quantization.quant_algo: ", "integer 4"}},
      {"mo_algo_unknown",
       [](Json& q) { q["quant_algo"] = "NVFP5"; },
       ErrorReason::kHeaderInvalid,
       {"quantization.quant_algo: ", R"(string "NVFP5")"}},
      {"mo_group_absurd",
       [](Json& q) {
         q["quantized_layers"]["model.layers.0.mlp.down_proj"]["group_size"] =
             int64_t{1} << 40;
       },
       ErrorReason::kHeaderInvalid,
       {"quantization.quantized_layers.model.layers.0.mlp.down_proj.group_size:"
        " ",
        "integer 1099511627776"}},
      {"mo_map_ghost",
       [](Json& q) {
         q["quantized_layers"]["model.layers.9.mlp.up_proj"] = {
             {"quant_algo", "FP8"}};
       },
       ErrorReason::kHeaderInvalid,
       {"quantization.quantized_layers.model.layers.9.mlp.up_proj: ",
        "'model.layers.9.mlp.up_proj.weight'"}},
      {"mo_exclude_string",
       [](Json& q) { q["exclude_modules"] = "lm_head"; },
       ErrorReason::kHeaderInvalid,
       {"quantization.exclude_modules: ", R"(string "lm_head")"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string name = ModelOpt(dir_, c.name, c.edit);
    auto info = client_->GetCheckpoint(name);
    ASSERT_FALSE(info.ok()) << "opened a hostile config";
    ExpectRefusal(info.status(), c.reason, "hf_quant_config.json", c.named);
    ASSERT_TRUE(client_->GetCheckpoint("good.safetensors").ok())
        << "the server stopped serving after " << name;
  }
  // The untouched checkpoint serves, its weights one logical tensor each.
  const std::string good = ModelOpt(dir_, "mo_good", [](Json&) {});
  auto info = client_->GetCheckpoint(good);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_THAT(info->conventions(), ::testing::ElementsAre("modelopt"));
  auto tensors = client_->ListTensors(good);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  std::vector<std::string> names;
  for (const auto& t : *tensors) names.push_back(t.name());
  EXPECT_THAT(names,
              ::testing::ElementsAre("lm_head.weight",
                                     "model.layers.0.mlp.down_proj.weight",
                                     "model.layers.0.self_attn.q_proj.weight"));
}

// A ModelOpt W4A8_AWQ checkpoint (an INT4 [8, 128] down_proj in groups
// of 128 with its pre_quant_scale, shaped `pqs_shape`) as `name`, its
// hf_quant_config.json "quantization" edited by `edit`.
std::string W4a8(const std::string& dir, const std::string& name,
                 const std::function<void(Json&)>& edit,
                 std::vector<int64_t> pqs_shape = {128}) {
  const std::string d = dir + "/" + name;
  std::filesystem::create_directory(d);
  const std::string m = "model.layers.0.mlp.down_proj";
  std::string bf16_ones;
  for (int i = 0; i < 128; ++i) bf16_ones += std::string("\x80\x3f", 2);
  WriteFile(d + "/model.safetensors",
            BuildSafetensors(
                {{m + ".weight", "U8", {4, 128}, std::string(512, '\x1f')},
                 {m + ".weight_scale",
                  "F32",
                  {8, 1},
                  testing::Bytes(std::vector<float>(8, 0.125f))},
                 {m + ".weight_scale_2",
                  "F32",
                  {},
                  testing::Bytes(std::vector<float>{0.002f})},
                 {m + ".pre_quant_scale", "BF16", pqs_shape, bf16_ones}}));
  Json q = {{"quant_algo", "W4A8_AWQ"},
            {"group_size", 128},
            {"has_zero_point", false},
            {"pre_quant_scale", true},
            {"exclude_modules", {"lm_head"}}};
  edit(q);
  WriteJson(d + "/hf_quant_config.json",
            {{"producer", {{"name", "modelopt"}}}, {"quantization", q}});
  return name;
}

TEST_F(HostileConfigTest, W4a8AwqConfigsAndPreQuantScalesAreDataLoss) {
  const struct {
    std::string name;
    ErrorReason reason;
    std::vector<std::string> named;
  } cases[] = {
      {W4a8(dir_, "w4a8_group_string",
            [](Json& q) { q["group_size"] = "128"; }),
       ErrorReason::kHeaderInvalid,
       {"quantization.group_size: ", R"(string "128")"}},
      {W4a8(dir_, "w4a8_group_absurd",
            [](Json& q) { q["group_size"] = int64_t{1} << 40; }),
       ErrorReason::kHeaderInvalid,
       {"quantization.group_size: ", "integer 1099511627776"}},
      {W4a8(dir_, "w4a8_group_other", [](Json& q) { q["group_size"] = 64; }),
       ErrorReason::kConventionMismatch,
       {"'model.layers.0.mlp.down_proj.weight_scale' is F32[8,1]", "64",
        "[8,128]", "[8,2]"}},
      {W4a8(dir_, "w4a8_pqs_shape", [](Json&) {}, {2, 64}),
       ErrorReason::kConventionMismatch,
       {"'model.layers.0.mlp.down_proj.pre_quant_scale' is BF16[2,64]",
        "[8,128]", "[128]"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto info = client_->GetCheckpoint(c.name);
    ASSERT_FALSE(info.ok()) << "opened a hostile checkpoint";
    ExpectRefusal(info.status(), c.reason, "hf_quant_config.json", c.named);
    ASSERT_TRUE(client_->GetCheckpoint("good.safetensors").ok())
        << "the server stopped serving after " << c.name;
  }
  const std::string good = W4a8(dir_, "w4a8_good", [](Json&) {});
  auto tensors = client_->ListTensors(good);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 1);
  EXPECT_EQ((*tensors)[0].encoding().scheme(),
            "W4A8_AWQ (int4, float scales) x pre_quant_scale");
}

// An HQQ layer (4-bit, groups of 32, float16) as `name`, its config.json's
// weight_quant_params edited by `edit`.
std::string Hqq(const std::string& dir, const std::string& name,
                const std::function<void(Json&)>& edit) {
  const std::string d = dir + "/" + name;
  std::filesystem::create_directory(d);
  const std::string m = "model.layers.0.mlp.down_proj.";
  WriteFile(
      d + "/model.safetensors",
      BuildSafetensors({{m + "W_q", "U8", {2, 32}, std::string(64, '\x5a')},
                        {m + "scale", "F16", {4, 1}, std::string(8, '\x20')},
                        {m + "zero", "F16", {4, 1}, std::string(8, '\x40')},
                        {m + "shape",
                         "I64",
                         {2},
                         testing::Bytes(std::vector<int64_t>{4, 32})},
                        {m + "nbits", "U8", {}, std::string(1, '\x04')},
                        {m + "group_size", "U8", {}, std::string(1, '\x20')},
                        {m + "axis", "U8", {}, std::string(1, '\x01')},
                        {m + "packing", "U8", {7}, "4bit_u8"}}));
  Json w = {{"nbits", 4}, {"group_size", 32}, {"axis", 1}};
  edit(w);
  WriteJson(d + "/config.json",
            {{"quantization_config",
              {{"quant_method", "hqq"},
               {"quant_config", {{"weight_quant_params", w}}}}}});
  return name;
}

TEST_F(HostileConfigTest, HqqConfigsAreDataLossNamingTheKey) {
  const std::string wq = "quantization_config.quant_config.weight_quant_params";
  const struct {
    const char* name;
    std::function<void(Json&)> edit;
    ErrorReason reason;
    std::vector<std::string> named;
  } cases[] = {
      {"hqq_bits_7",
       [](Json& w) { w["nbits"] = 7; },
       ErrorReason::kHeaderInvalid,
       {wq + ".nbits: ", "integer 7"}},
      {"hqq_bits_ternary",
       [](Json& w) { w["nbits"] = 1.58; },
       ErrorReason::kHeaderInvalid,
       {wq + ".nbits: ", "[1, 8]", "number 1.58"}},
      {"hqq_group_absurd",
       [](Json& w) { w["group_size"] = int64_t{1} << 40; },
       ErrorReason::kHeaderInvalid,
       {wq + ".group_size: ", "[1, 1048576]"}},
      {"hqq_axis_string",
       [](Json& w) { w["axis"] = "1"; },
       ErrorReason::kHeaderInvalid,
       {wq + ".axis: ", "[0, 1]", "string \"1\""}},
      {"hqq_contradicts",
       [](Json& w) { w["group_size"] = 64; },
       ErrorReason::kConventionMismatch,
       {"group_size 32", wq + ".group_size", "64"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string name = Hqq(dir_, c.name, c.edit);
    auto info = client_->GetCheckpoint(name);
    ASSERT_FALSE(info.ok()) << "opened a hostile config";
    ExpectRefusal(info.status(), c.reason, "config.json", c.named);
    ASSERT_TRUE(client_->GetCheckpoint("good.safetensors").ok())
        << "the server stopped serving after " << name;
  }
  const std::string good = Hqq(dir_, "hqq_good", [](Json&) {});
  auto info = client_->GetCheckpoint(good);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_THAT(info->conventions(), ::testing::ElementsAre("hqq"));
  v1::ReadSliceRequest r;
  r.set_checkpoint(good);
  r.set_tensor("model.layers.0.mlp.down_proj.weight");
  auto data = client_->ReadSliceAll(r);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->bytes.size(), 4u * 32 * 4);
}

}  // namespace
}  // namespace tensormorph
