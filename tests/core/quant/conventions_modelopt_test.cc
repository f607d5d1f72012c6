// NVIDIA ModelOpt checkpoints written by tests/python/writers/modelopt.py
// from the format's definition: every quantized weight decodes to the
// writer's float64-then-cast reference with the same bits (whole, in odd
// pieces, per element through Inspect, and through DecodeRuns); excluded
// and unlisted modules stay as stored; hostile configs are DATA_LOSS naming
// the file and the key path.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/check/check.h"
#include "core/diff/pairing.h"
#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "core/quant/conventions/modelopt_config.h"
#include "core/quant/decode_simd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixture_copy.h"
#include "tests/support/npy_reader.h"
#include "tests/support/process.h"
#include "tests/support/python_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::conventions_modelopt_test {
namespace {

namespace fs = std::filesystem;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ReadJson;
using ::tensormorph::testing::WriteJson;
using ::testing::AllOf;
using Json = nlohmann::json;

// The writer's fixtures, written once per test binary run.
const std::string& Fixtures() { return testing::WriterOutput("modelopt.py"); }

// A fresh copy of fixture `name`, to edit.
std::string CopyOf(const std::string& name) {
  return testing::CopyDir(Fixtures() + "/" + name);
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

struct Case {
  const char* dir;
  const char* scheme;  // the encoding's scheme starts with this
};

const Case kCases[] = {
    {"nvfp4", "NVFP4 (fp4 e2m1"},
    {"nvfp4_awq", "NVFP4_AWQ (fp4 e2m1"},
    {"fp8", "FP8 (fp8 e4m3)"},
    {"fp8_per_channel_per_token", "FP8_PER_CHANNEL_PER_TOKEN"},
    {"fp8_pb_wo", "FP8_PB_WO"},
    {"mxfp8", "MXFP8"},
    {"w4a8_awq", "W4A8_AWQ (int4"},
    {"w4a8_awq_sharded", "W4A8_AWQ (int4, float scales) x pre_quant_scale"},
    {"fp8_config_json", "FP8 (fp8 e4m3)"},
    {"mixed_precision", ""},
    {"nvfp4_sharded", "NVFP4"},
};

class ModelOptFixtureTest : public ::testing::TestWithParam<Case> {};

TEST_P(ModelOptFixtureTest, EveryQuantizedWeightDecodesToTheReferenceBits) {
  const Case& c = GetParam();
  const std::string dir = Fixtures() + "/" + c.dir;
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(dir + "/ref")) {
    std::string name = entry.path().filename().string();
    name = name.substr(0, name.size() - 4);  // ".npy"
    SCOPED_TRACE(name);
    const LogicalTensor* t = (*ckpt)->FindTensor(name);
    ASSERT_NE(t, nullptr);
    const EncodingInfo& info = t->encoding->info();
    EXPECT_EQ(info.convention, "modelopt");
    EXPECT_THAT(info.scheme, ::testing::StartsWith(c.scheme));
    const testing::NpyArray ref = testing::ReadNpy(entry.path().string());
    ASSERT_EQ(ref.descr, "<f4");
    const std::vector<float> want = ref.floats();
    ASSERT_EQ(static_cast<int64_t>(want.size()), t->num_elements);
    ASSERT_EQ(t->shape, ref.shape);

    std::vector<float> got(want.size());
    ASSERT_TRUE(t->encoding->Decode(0, t->num_elements, got.data()).ok());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(Bits(got[i]), Bits(want[i]))
          << "element " << i << ": " << got[i] << " vs " << want[i];
    }
    // Pieces that start and end inside groups and rows.
    for (int64_t first = 0; first < t->num_elements;) {
      const int64_t n = std::min<int64_t>(37, t->num_elements - first);
      std::vector<float> part(n);
      ASSERT_TRUE(t->encoding->Decode(first, n, part.data()).ok());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(Bits(part[i]), Bits(want[first + i])) << first + i;
      }
      first += n;
    }
    std::vector<float> runs_values(want.size());
    std::vector<QuantRun> runs;
    ASSERT_TRUE(
        t->encoding->DecodeRuns(0, t->num_elements, runs_values.data(), &runs)
            .ok());
    EXPECT_EQ(runs_values, got);
    for (int64_t i = 0; i < t->num_elements; i += 7) {
      ScalarInfo s;
      ASSERT_TRUE(t->encoding->Inspect(i, &s).ok());
      ASSERT_EQ(Bits(s.value), Bits(want[i])) << "inspect " << i;
      if (!absl::StrContains(info.scheme, "pre_quant_scale")) {
        EXPECT_EQ(static_cast<float>(s.scale) * static_cast<float>(s.level),
                  s.value);
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

// AWQ's column-scale pass gives the reference's bits at every SIMD level
// the CPU runs, down to the scalar one.
TEST(ModelOptTest, PreQuantScaleDecodesAlikeAtEverySimdLevel) {
  for (const char* dir : {"w4a8_awq", "nvfp4_awq"}) {
    auto ckpt = Checkpoint::Open(Fixtures() + "/" + dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    const std::string name = "model.layers.0.mlp.down_proj.weight";
    const LogicalTensor* t = (*ckpt)->FindTensor(name);
    ASSERT_NE(t, nullptr);
    const std::vector<float> want =
        testing::ReadNpy(Fixtures() + "/" + dir + "/ref/" + name + ".npy")
            .floats();
    for (DecodeSimd level :
         {DecodeSimd::kScalar, DecodeSimd::kAvx2, DecodeSimd::kAvx512}) {
      SCOPED_TRACE(static_cast<int>(level));
      CapDecodeSimdForTesting(level);
      std::vector<float> got(want.size());
      const absl::Status s =
          t->encoding->Decode(0, t->num_elements, got.data());
      CapDecodeSimdForTesting(DecodeSimd::kAvx512);
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
          << dir;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryAlgo, ModelOptFixtureTest,
                         ::testing::ValuesIn(kCases), [](const auto& info) {
                           return std::string(info.param.dir);
                         });

// The diff against the writer's source: each figure recomputed here in
// double from the reference values; every fixture was quantized to the
// nearest level of the scale it stores, so nothing is clipped or beyond the
// bound.
TEST_P(ModelOptFixtureTest, DiffAgainstTheSourceMatchesFloat64) {
  const std::string dir = Fixtures() + "/" + GetParam().dir;
  auto quant = Checkpoint::Open(dir);
  auto source = Checkpoint::Open(dir + "/source");
  ASSERT_TRUE(quant.ok()) << quant.status();
  ASSERT_TRUE(source.ok()) << source.status();
  auto pairing = PairTensors(**quant, **source);
  ASSERT_TRUE(pairing.ok()) << pairing.status();
  int checked = 0;
  for (const TensorPair& p : pairing->pairs) {
    const std::string ref = dir + "/ref/" + p.quant->name + ".npy";
    if (!fs::exists(ref)) continue;
    SCOPED_TRACE(p.quant->name);
    auto d = DiffTensor(*p.quant, *p.ref, DiffOptions());
    ASSERT_TRUE(d.ok()) << d.status();
    const std::vector<float> xq = testing::ReadNpy(ref).floats();
    std::vector<float> xs(p.ref->num_elements);
    ASSERT_TRUE(
        p.ref->encoding->Decode(0, p.ref->num_elements, xs.data()).ok());
    double sse = 0, sxx = 0, shh = 0, sxh = 0, maxabs = 0;
    for (size_t i = 0; i < xq.size(); ++i) {
      const double a = xs[i], b = xq[i], e = std::fabs(a - b);
      sse += e * e;
      sxx += a * a;
      shh += b * b;
      sxh += a * b;
      maxabs = std::max(maxabs, e);
    }
    const double n = static_cast<double>(xq.size());
    EXPECT_NEAR(d->mse, sse / n, 1e-12 * sse / n);
    EXPECT_EQ(d->max_abs_err, maxabs);
    EXPECT_NEAR(d->sqnr_db, 10 * std::log10(sxx / sse), 1e-9);
    EXPECT_NEAR(d->cosine, sxh / std::sqrt(sxx * shh), 1e-12);
    EXPECT_EQ(d->clipped, 0);
    EXPECT_EQ(d->not_nearest, 0);
    EXPECT_LE(d->max_err_steps, 0.5 + 1e-6);
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

TEST(ModelOptTest, ExcludedAndUnlistedModulesStayAsStored) {
  auto ckpt = Checkpoint::Open(Fixtures() + "/mixed_precision");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->conventions(), std::vector<std::string>{"modelopt"});
  for (const char* name :
       {"lm_head.weight", "model.layers.1.self_attn.q_proj.weight"}) {
    const LogicalTensor* t = (*ckpt)->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->encoding->info().convention, "safetensors") << name;
  }
  const LogicalTensor* fp8 =
      (*ckpt)->FindTensor("model.layers.0.self_attn.q_proj.weight");
  const LogicalTensor* fp4 =
      (*ckpt)->FindTensor("model.layers.0.mlp.down_proj.weight");
  ASSERT_NE(fp8, nullptr);
  ASSERT_NE(fp4, nullptr);
  EXPECT_EQ(fp8->encoding->info().granularity, "tensor");
  EXPECT_EQ(fp4->encoding->info().granularity, "group 16 along in");
  EXPECT_EQ(fp4->shape, (std::vector<int64_t>{48, 128}));
  // input_scale acts on activations: a tensor of its own.
  EXPECT_NE((*ckpt)->FindTensor("model.layers.0.mlp.down_proj.input_scale"),
            nullptr);
}

TEST(ModelOptTest, Nvfp4InspectShowsCodeBlockScaleAndGlobalScale) {
  auto ckpt = Checkpoint::Open(Fixtures() + "/nvfp4");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t =
      (*ckpt)->FindTensor("model.layers.0.mlp.down_proj.weight");
  ASSERT_NE(t, nullptr);
  ScalarInfo s;
  ASSERT_TRUE(t->encoding->Inspect(1, &s).ok());  // the writer's 0.3 outlier
  EXPECT_EQ(s.code_width, 4);
  EXPECT_TRUE(s.code_is_float);
  EXPECT_EQ(s.group, 0);
  EXPECT_EQ(s.code, 7);  // E2M1 6.0: the block's absmax
  std::vector<std::string> names;
  for (int i = 0; i < s.num_params; ++i) {
    names.emplace_back(s.params[i].name);
  }
  EXPECT_THAT(names,
              ::testing::ElementsAre("block_scale", "global_scale", "scale"));
  EXPECT_EQ(static_cast<float>(s.params[0].value) *
                static_cast<float>(s.params[1].value),
            static_cast<float>(s.params[2].value));
}

// Inspect of a W4A8_AWQ weight that kept its pre_quant_scale: the signed
// code, the group's scale, the FP8 stage's weight_scale_2 (shown, not
// applied) and the column's pre_quant_scale, the value their product.
TEST(ModelOptTest, W4a8InspectShowsCodeScalesAndPreQuantScale) {
  auto ckpt = Checkpoint::Open(Fixtures() + "/w4a8_awq");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t =
      (*ckpt)->FindTensor("model.layers.0.mlp.down_proj.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{48, 256}));
  const EncodingInfo& info = t->encoding->info();
  EXPECT_EQ(info.granularity, "group 128 along in");
  EXPECT_EQ(info.group_size, 128);
  EXPECT_EQ(info.bits, 4);
  std::vector<std::string> parts;
  for (const StoredTensor* p : t->encoding->parts()) parts.push_back(p->name);
  EXPECT_THAT(parts, ::testing::ElementsAre(
                         "model.layers.0.mlp.down_proj.weight",
                         "model.layers.0.mlp.down_proj.weight_scale",
                         "model.layers.0.mlp.down_proj.weight_scale_2",
                         "model.layers.0.mlp.down_proj.pre_quant_scale"));
  // Row 1, column 130: the odd row's high nibble, the second group.
  ScalarInfo s;
  ASSERT_TRUE(t->encoding->Inspect(256 + 130, &s).ok());
  EXPECT_EQ(s.code_width, 4);
  EXPECT_FALSE(s.code_is_float);
  EXPECT_GE(s.code, -8);
  EXPECT_LE(s.code, 7);
  EXPECT_EQ(s.group, 3);  // row 1 of two groups a row
  std::vector<std::string> names;
  for (int i = 0; i < s.num_params; ++i) names.emplace_back(s.params[i].name);
  EXPECT_THAT(names, ::testing::ElementsAre("scale", "weight_scale_2",
                                            "pre_quant_scale"));
  const float scale = static_cast<float>(s.params[0].value);
  const float pqs = static_cast<float>(s.params[2].value);
  EXPECT_EQ(pqs, (8 + (130 * 7) % 25) / 16.0f);  // the writer's
  EXPECT_EQ(s.value, scale * static_cast<float>(s.code) * pqs);
  EXPECT_EQ(s.step, static_cast<double>(scale) * pqs);
  // q_proj's scale was fused into the norm: none stored, none applied.
  const LogicalTensor* q =
      (*ckpt)->FindTensor("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->encoding->info().scheme, "W4A8_AWQ (int4, float scales)");
  EXPECT_EQ(q->encoding->parts().size(), 3u);
}

// A pre_quant_scale that is not one per input column, or of a dtype that
// holds no scales, is DATA_LOSS naming the tensor, expected vs actual.
TEST(ModelOptTest, AWrongPreQuantScaleIsDataLoss) {
  struct Bad {
    const char* dir;
    std::function<void(testing::StTensor&)> edit;
    const char* says;
  };
  const std::vector<Bad> cases = {
      {"w4a8_awq",
       [](testing::StTensor& t) {
         t.shape = {128};
         t.data.resize(256);
       },
       "'model.layers.0.mlp.down_proj.pre_quant_scale' is BF16[128]"},
      {"nvfp4_awq",
       [](testing::StTensor& t) {
         t.shape = {2, 64};
       },
       "'model.layers.0.mlp.down_proj.pre_quant_scale' is BF16[2,64]"},
      {"w4a8_awq",
       [](testing::StTensor& t) {
         t.dtype = "U8";
         t.shape = {512};
       },
       "model.layers.0.mlp.down_proj.pre_quant_scale"},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.says);
    const std::string dir = CopyOf(c.dir);
    testing::EditSafetensors(
        dir + "/model.safetensors", [&](std::vector<testing::StTensor>& ts) {
          for (testing::StTensor& t : ts) {
            if (t.name == "model.layers.0.mlp.down_proj.pre_quant_scale") {
              c.edit(t);
            }
          }
        });
    auto ckpt = Checkpoint::Open(dir);
    EXPECT_THAT(ckpt, AllOf(HasReason(ErrorReason::kConventionMismatch),
                            MessageNames(c.says)));
  }
}

TEST(ModelOptTest, ShardedGlobalScaleInAnotherShardIsFound) {
  auto ckpt = Checkpoint::Open(Fixtures() + "/nvfp4_sharded");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t =
      (*ckpt)->FindTensor("model.layers.1.mlp.down_proj.weight");
  ASSERT_NE(t, nullptr);
  std::vector<int> files;
  for (const StoredTensor* p : t->encoding->parts()) {
    files.push_back(static_cast<int>(p->file_index));
  }
  EXPECT_THAT(files, ::testing::Contains(::testing::Ne(files[0])));
}

// config -> the hf_quant_config.json "quantization" object edited by `edit`.
// The refusal: its reason, and what its message names (the key path, the
// value got, the tensor).
struct Hostile {
  const char* what;
  std::function<void(Json&)> edit;
  ErrorReason reason;
  std::vector<std::string> named;
};

// Opening `dir` fails as `c` says: a key of hf_quant_config.json is
// HEADER_INVALID naming that file.
void ExpectRefused(const std::string& dir, const Hostile& c) {
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_THAT(ckpt, HasReason(c.reason));
  if (c.reason == ErrorReason::kHeaderInvalid) {
    EXPECT_THAT(ckpt, HasMetadata("file", "hf_quant_config.json"));
  }
  for (const std::string& value : c.named) {
    EXPECT_THAT(ckpt, MessageNames(value));
  }
}

TEST(ModelOptConfigTest, HostileValuesAreDataLossNamingFileAndKey) {
  const std::vector<Hostile> cases = {
      {"algo not a string",
       [](Json& q) { q["quant_algo"] = 4; },
       ErrorReason::kHeaderInvalid,
       {"quantization.quant_algo: ", "integer 4"}},
      {"unknown algo",
       [](Json& q) { q["quant_algo"] = "NVFP3"; },
       ErrorReason::kHeaderInvalid,
       {"quantization.quant_algo: ", "NVFP3"}},
      {"missing algo",
       [](Json& q) { q.erase("quant_algo"); },
       ErrorReason::kHeaderInvalid,
       {"quantization.quant_algo: "}},
      {"absurd group",
       [](Json& q) { q["group_size"] = int64_t{1} << 40; },
       ErrorReason::kHeaderInvalid,
       {"quantization.group_size: ", "[1, 65536]"}},
      {"nvfp4 group 32",
       [](Json& q) { q["group_size"] = 32; },
       ErrorReason::kHeaderInvalid,
       {"quantization.group_size: ", "NVFP4 (16)", "integer 32"}},
      {"float group",
       [](Json& q) { q["group_size"] = 16.0; },
       ErrorReason::kHeaderInvalid,
       {"quantization.group_size: ", "[1, 65536]", "number 16.0"}},
      {"exclude not a list",
       [](Json& q) { q["exclude_modules"] = "lm_head"; },
       ErrorReason::kHeaderInvalid,
       {"quantization.exclude_modules: "}},
      {"exclude entry",
       [](Json& q) {
         q["exclude_modules"] = {"lm_head", 3};
       },
       ErrorReason::kHeaderInvalid,
       {"quantization.exclude_modules[1]: "}},
      {"kv algo",
       [](Json& q) { q["kv_cache_quant_algo"] = 8; },
       ErrorReason::kHeaderInvalid,
       {"quantization.kv_cache_quant_algo: ", "integer 8"}},
  };
  for (const Hostile& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string dir = CopyOf("nvfp4");
    Json j = ReadJson(dir + "/hf_quant_config.json");
    c.edit(j["quantization"]);
    WriteJson(dir + "/hf_quant_config.json", j);
    ExpectRefused(dir, c);
  }
}

TEST(ModelOptConfigTest, W4a8GroupSizesAreCheckedAgainstTheScales) {
  const std::vector<Hostile> cases = {
      {"group 0",
       [](Json& q) { q["group_size"] = 0; },
       ErrorReason::kHeaderInvalid,
       {"quantization.group_size: ", "[1, 65536]", "integer 0"}},
      {"group a string",
       [](Json& q) { q["group_size"] = "128"; },
       ErrorReason::kHeaderInvalid,
       {"quantization.group_size: ", "string"}},
      {"group the scales do not have",
       [](Json& q) { q["group_size"] = 64; },
       ErrorReason::kConventionMismatch,
       {"'model.layers.0.mlp.down_proj.weight_scale' is F32[48,2]", "64",
        "[48,256]", "[48,4]"}},
  };
  for (const Hostile& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string dir = CopyOf("w4a8_awq");
    Json j = ReadJson(dir + "/hf_quant_config.json");
    c.edit(j["quantization"]);
    WriteJson(dir + "/hf_quant_config.json", j);
    ExpectRefused(dir, c);
  }
  // Absent, the group is W4A8_AWQ_BETA_CFG's 128.
  const std::string dir = CopyOf("w4a8_awq");
  Json j = ReadJson(dir + "/hf_quant_config.json");
  j["quantization"].erase("group_size");
  WriteJson(dir + "/hf_quant_config.json", j);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)
                ->FindTensor("model.layers.0.mlp.down_proj.weight")
                ->encoding->info()
                .group_size,
            128);
}

TEST(ModelOptConfigTest, MixedPrecisionMapIsCheckedAgainstTheTensors) {
  const std::vector<Hostile> cases = {
      {"a module that does not exist",
       [](Json& q) {
         q["quantized_layers"]["model.layers.7.mlp.up_proj"] = {
             {"quant_algo", "NVFP4"}};
       },
       ErrorReason::kHeaderInvalid,
       {"quantization.quantized_layers.model.layers.7.mlp.up_proj: ",
        "'model.layers.7.mlp.up_proj.weight'"}},
      {"no map",
       [](Json& q) { q.erase("quantized_layers"); },
       ErrorReason::kHeaderInvalid,
       {"quantization.quantized_layers: "}},
      {"a nested MIXED_PRECISION",
       [](Json& q) {
         q["quantized_layers"]["model.layers.0.mlp.down_proj"]["quant_algo"] =
             "MIXED_PRECISION";
       },
       ErrorReason::kHeaderInvalid,
       {"quantization.quantized_layers.model.layers.0.mlp.down_proj.quant_algo:"
        " ",
        "MIXED_PRECISION"}},
      {"a layer not an object",
       [](Json& q) {
         q["quantized_layers"]["model.layers.0.mlp.down_proj"] = "NVFP4";
       },
       ErrorReason::kHeaderInvalid,
       {"quantization.quantized_layers.model.layers.0.mlp.down_proj: "}},
      {"a layer's group",
       [](Json& q) {
         q["quantized_layers"]["model.layers.0.mlp.down_proj"]["group_size"] =
             0;
       },
       ErrorReason::kHeaderInvalid,
       {"model.layers.0.mlp.down_proj.group_size: ", "[1, 65536]",
        "integer 0"}},
  };
  for (const Hostile& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string dir = CopyOf("mixed_precision");
    Json j = ReadJson(dir + "/hf_quant_config.json");
    c.edit(j["quantization"]);
    WriteJson(dir + "/hf_quant_config.json", j);
    ExpectRefused(dir, c);
  }
}

TEST(ModelOptConfigTest,
     RecognisedAlgosTensormorphDoesNotDecodeAreUnimplemented) {
  const std::string dir = CopyOf("nvfp4");
  Json j = ReadJson(dir + "/hf_quant_config.json");
  j["quantization"]["quant_algo"] = "int8_sq";
  WriteJson(dir + "/hf_quant_config.json", j);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_THAT(ckpt, AllOf(HasReason(ErrorReason::kUnimplemented),
                          MessageNames("quantization.quant_algo"),
                          MessageNames("INT8_SQ")));
}

TEST(ModelOptConfigTest, ConfigJsonWinsAndSpellsTheSameConfig) {
  // The nested form inside config.json decodes what hf_quant_config.json
  // does, and the lower-case algo ModelOpt sometimes writes is accepted.
  const std::string dir = CopyOf("nvfp4");
  Json hf = ReadJson(dir + "/hf_quant_config.json");
  fs::remove(dir + "/hf_quant_config.json");
  Json cfg = ReadJson(dir + "/config.json");
  hf["quantization"]["quant_algo"] = "nvfp4";
  cfg["quantization_config"] = {{"quant_method", "modelopt"},
                                {"quantization", hf["quantization"]}};
  WriteJson(dir + "/config.json", cfg);
  auto a = Checkpoint::Open(dir);
  auto b = Checkpoint::Open(Fixtures() + "/nvfp4");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ((*a)->tensors().size(), (*b)->tensors().size());
  for (size_t i = 0; i < (*a)->tensors().size(); ++i) {
    const LogicalTensor& x = (*a)->tensors()[i];
    const LogicalTensor& y = (*b)->tensors()[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.encoding->info().convention, y.encoding->info().convention);
    std::vector<float> u(x.num_elements), v(y.num_elements);
    ASSERT_TRUE(x.encoding->Decode(0, x.num_elements, u.data()).ok());
    ASSERT_TRUE(y.encoding->Decode(0, y.num_elements, v.data()).ok());
    EXPECT_EQ(std::memcmp(u.data(), v.data(), u.size() * 4), 0) << x.name;
  }
}

TEST(ModelOptTest, WildcardsMatchAsFnmatch) {
  using conventions::ModelOptWildcardMatch;
  EXPECT_TRUE(ModelOptWildcardMatch("lm_head", "lm_head"));
  EXPECT_TRUE(ModelOptWildcardMatch("model.layers.1.self_attn*",
                                    "model.layers.1.self_attn.q_proj"));
  EXPECT_TRUE(ModelOptWildcardMatch("*.mlp.gate", "model.layers.3.mlp.gate"));
  EXPECT_TRUE(
      ModelOptWildcardMatch("model.layers.[0-2].*", "model.layers.1.x"));
  EXPECT_FALSE(
      ModelOptWildcardMatch("model.layers.[!0-2].*", "model.layers.1.x"));
  EXPECT_TRUE(ModelOptWildcardMatch("a?c", "abc"));
  EXPECT_FALSE(ModelOptWildcardMatch("lm_head", "lm_head2"));
  EXPECT_TRUE(ModelOptWildcardMatch("a[b", "a[b"));  // unclosed: literal
  // Many stars against a long name never blow up.
  EXPECT_FALSE(ModelOptWildcardMatch(std::string(64, '*') + "z",
                                     std::string(4096, 'a')));
}

TEST(ModelOptTest, AnExcludedModuleStoredQuantizedStaysAsStored) {
  const std::string dir = CopyOf("nvfp4");
  Json j = ReadJson(dir + "/hf_quant_config.json");
  j["quantization"]["exclude_modules"] = {"lm_head", "*.q_proj"};
  WriteJson(dir + "/hf_quant_config.json", j);
  // It opens, the module left as stored (check reports it:
  // excluded-quantized, tests/support/check_cases.cc).
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t =
      (*ckpt)->FindTensor("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->encoding->info().convention, "safetensors");
  EXPECT_EQ(t->encoding->info().scheme, "U8");
}

// The rules `tensormorph check` applies, on the writer's fixtures opened
// as check opens them (leniently).
std::set<std::string> CheckRules(const std::string& dir) {
  auto ckpt = Checkpoint::Open(dir, {.lenient = true});
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  std::set<std::string> rules;
  if (!ckpt.ok()) return rules;
  auto summary =
      CheckCheckpoint(**ckpt, CheckOptions(), nullptr, nullptr,
                      [&](const Finding& f) { rules.insert(f.rule); });
  EXPECT_TRUE(summary.ok()) << summary.status();
  return rules;
}

TEST(ModelOptCheckTest, TheWritersCheckpointsAreClean) {
  for (const char* name : {"nvfp4", "fp8", "fp8_pb_wo", "mxfp8",
                           "mixed_precision", "nvfp4_sharded"}) {
    SCOPED_TRACE(name);
    const std::set<std::string> rules = CheckRules(Fixtures() + "/" + name);
    for (const char* error :
         {"missing-companion", "companion-shape", "excluded-quantized",
          "unresolved-tensor", "nan-scale", "zero-scale"}) {
      EXPECT_FALSE(rules.contains(error)) << error;
    }
  }
}

TEST(ModelOptCheckTest, AGlobalScaleOfZeroZeroesEveryGroup) {
  const std::string dir = CopyOf("nvfp4");
  testing::EditSafetensors(
      dir + "/model.safetensors", [](std::vector<testing::StTensor>& ts) {
        for (testing::StTensor& t : ts) {
          if (t.name == "model.layers.0.mlp.down_proj.weight_scale_2") {
            t.data = std::string(4, '\0');
          }
        }
      });
  const std::set<std::string> rules = CheckRules(dir);
  EXPECT_TRUE(rules.contains("zero-scale"));
  EXPECT_TRUE(rules.contains("all-zero-group"));
}

TEST(ModelOptCheckTest, AMissingGlobalScaleIsAMissingCompanion) {
  const std::string dir = CopyOf("nvfp4");
  testing::EditSafetensors(
      dir + "/model.safetensors", [](std::vector<testing::StTensor>& ts) {
        std::erase_if(ts, [](const testing::StTensor& t) {
          return t.name == "model.layers.0.mlp.down_proj.weight_scale_2";
        });
      });
  auto strict = Checkpoint::Open(dir);
  ASSERT_FALSE(strict.ok());
  EXPECT_THAT(
      strict,
      AllOf(HasReason(ErrorReason::kConventionMismatch),
            HasMetadata("convention", "ModelOpt"),
            MessageNames("'model.layers.0.mlp.down_proj.weight'"),
            MessageNames("'model.layers.0.mlp.down_proj.weight_scale_2'")));
  EXPECT_TRUE(CheckRules(dir).contains("missing-companion"));
}

}  // namespace
}  // namespace tensormorph::conventions_modelopt_test
