// Every convention in the shared safetensors fixtures decodes to its
// expected values exactly, whole, through stepped slices, and element by
// element through inspect.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/format/checkpoint.h"
#include "core/slice.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace tensormorph::conventions_fixtures_test {
namespace {

using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::ReadF32File;

namespace fs = std::filesystem;

struct Case {
  const char* dir;
  const char* convention;
};

const Case kCases[] = {
    {"gptq_4bit_g32", "gptq"},
    {"gptq_4bit_g32_actorder", "gptq"},
    {"awq_4bit_g32", "awq-gemm"},
    {"ct_int8_channel", "compressed-tensors"},
    {"ct_int8_tensor_asym", "compressed-tensors"},
    {"ct_w4a16_group", "compressed-tensors"},
    {"fp8_block_sharded", "fp8"},
    {"mxfp4_gptoss", "mxfp4 (gpt-oss)"},
    {"bnb_nf4", "bitsandbytes"},
};

// Equal as numbers (so +0 == -0: some fixtures are quantize-dequantize of
// the source, which keeps the sign of a zero that no stored code can), or
// one ulp apart where the reference rounded in another order. In practice
// every fixture matches exactly; the ulp is the documented allowance.
bool SameBitsOrOneUlp(float a, float b) {
  if (a == b || (std::isnan(a) && std::isnan(b))) return true;
  int32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return (x ^ y) >= 0 && std::abs(x - y) <= 1;
}

class ConventionFixtureTest : public ::testing::TestWithParam<Case> {};

TEST_P(ConventionFixtureTest, EveryExpectedTensorDecodesExactly) {
  const Case& c = GetParam();
  const std::string dir = Fixture(std::string("safetensors/") + c.dir);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  int checked = 0;
  bool saw_convention = false;
  for (const auto& entry : fs::directory_iterator(dir + "/expected")) {
    std::string name = entry.path().filename().string();
    name = name.substr(0, name.size() - 4);  // ".f32"
    SCOPED_TRACE(name);
    const LogicalTensor* t = (*ckpt)->FindTensor(name);
    ASSERT_NE(t, nullptr) << "no logical tensor " << name;
    saw_convention |= t->encoding->info().convention == c.convention;
    const std::vector<float> want = ReadF32File(entry.path().string());
    ASSERT_EQ(static_cast<int64_t>(want.size()), t->num_elements);

    auto all = ResolveSlice({}, t->shape);
    ASSERT_TRUE(all.ok());
    auto got = ReadSlice(*t, *all);
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(SameBitsOrOneUlp((*got)[i], want[i]))
          << "element " << i << ": " << (*got)[i] << " vs " << want[i];
    }
    // Every element through inspect, and its decomposition.
    for (int64_t i = 0; i < t->num_elements; ++i) {
      ScalarInfo s;
      ASSERT_TRUE(t->encoding->Inspect(i, &s).ok());
      ASSERT_TRUE(SameBitsOrOneUlp(s.value, want[i]))
          << "inspect element " << i;
      ASSERT_NEAR(s.scale * s.level + s.offset, want[i],
                  1e-6 * (1 + std::fabs(want[i])));
    }
    // A stepped slice over the last two dimensions.
    std::string text;
    for (size_t d = 0; d + 2 < t->shape.size(); ++d) text += "1, ";
    if (t->shape.size() >= 2) text += "::-3, 1::5";
    auto items = ParseSlice(text);
    ASSERT_TRUE(items.ok());
    auto r = ResolveSlice(*items, t->shape);
    ASSERT_TRUE(r.ok()) << r.status();
    auto sliced = ReadSlice(*t, *r);
    ASSERT_TRUE(sliced.ok());
    if (t->shape.size() >= 2) {
      const int64_t rows = t->shape[t->shape.size() - 2],
                    cols = t->shape.back();
      const int64_t base = t->shape.size() == 3 ? rows * cols : 0;
      size_t k = 0;
      for (int64_t row = rows - 1; row >= 0; row -= 3) {
        for (int64_t col = 1; col < cols; col += 5) {
          ASSERT_TRUE(
              SameBitsOrOneUlp((*sliced)[k++], want[base + row * cols + col]));
        }
      }
      EXPECT_EQ(k, sliced->size());
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
  EXPECT_TRUE(saw_convention);
}

INSTANTIATE_TEST_SUITE_P(AllConventions, ConventionFixtureTest,
                         ::testing::ValuesIn(kCases), [](const auto& info) {
                           return std::string(info.param.dir);
                         });

TEST(ConventionFixtureTest, DescriptorsNameGranularityAndParts) {
  auto gptq = Checkpoint::Open(Fixture("safetensors/gptq_4bit_g32_actorder"));
  ASSERT_TRUE(gptq.ok()) << gptq.status();
  const LogicalTensor* t =
      (*gptq)->FindTensor("model.layers.0.mlp.down_proj.weight");
  ASSERT_NE(t, nullptr);
  const EncodingInfo& info = t->encoding->info();
  EXPECT_EQ(info.granularity, "group 32 along in, act-order");
  EXPECT_EQ(info.bits, 4);
  EXPECT_FALSE(info.symmetric);
  EXPECT_TRUE(info.act_order);
  EXPECT_EQ(t->encoding->parts().size(), 4u);  // qweight, qzeros, scales, g_idx
  EXPECT_EQ(t->shape, (std::vector<int64_t>{96, 64}));
  EXPECT_EQ((*gptq)->conventions(), std::vector<std::string>{"gptq"});

  auto ct = Checkpoint::Open(Fixture("safetensors/ct_int8_channel"));
  ASSERT_TRUE(ct.ok());
  // The ignored lm_head and the norm stay plain BF16 tensors.
  EXPECT_EQ((*ct)->FindTensor("lm_head.weight")->encoding->info().scheme,
            "BF16");
  EXPECT_EQ((*ct)
                ->FindTensor("model.layers.0.input_layernorm.weight")
                ->encoding->info()
                .scheme,
            "BF16");
  EXPECT_EQ((*ct)->FindTensor("model.layers.0.mlp.down_proj.weight_scale"),
            nullptr);
}

TEST(ConventionFixtureTest, InspectShowsTheGroupScaleAndZero) {
  auto ckpt = Checkpoint::Open(Fixture("safetensors/gptq_4bit_g32_actorder"));
  ASSERT_TRUE(ckpt.ok());
  const LogicalTensor* t =
      (*ckpt)->FindTensor("model.layers.0.mlp.down_proj.weight");
  const StoredTensor* gidx =
      (*ckpt)->FindStored("model.layers.0.mlp.down_proj.g_idx");
  int32_t g5;
  std::memcpy(&g5, gidx->data.data() + 5 * 4, 4);
  ScalarInfo s;
  ASSERT_TRUE(t->encoding->Inspect(3 * 64 + 5, &s).ok());  // n = 3, k = 5
  // The group comes from g_idx[5], never from 5 / 32.
  EXPECT_EQ(s.block, 3 * 2 + g5);
  EXPECT_EQ(s.params[0].name, "g_idx");
  EXPECT_EQ(s.params[0].value, g5);
  EXPECT_EQ(s.step, std::fabs(s.scale));
  EXPECT_EQ(s.level, s.code - s.zero_point);
}

}  // namespace
}  // namespace tensormorph::conventions_fixtures_test
