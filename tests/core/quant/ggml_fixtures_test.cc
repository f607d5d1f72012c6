// Every ggml type in the shared fixtures decodes bit for bit as ggml's own
// to_float does, whole and through stepped slices.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/format/checkpoint.h"
#include "core/slice.h"
#include "gtest/gtest.h"
#include "tests/support/same_bits.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::SameBits;

using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::ReadF32File;

// The indices a Python range picks, computed the obvious way.
std::vector<int64_t> PyRange(int64_t start, int64_t stop, int64_t step) {
  std::vector<int64_t> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    out.push_back(i);
  }
  return out;
}

struct Slice2D {
  std::string text;
  std::vector<int64_t> rows, cols;
};

// Slices of a [4, 256] tensor, with the rows and columns each must pick.
std::vector<Slice2D> Slices() {
  return {
      {"1:4:2, 3:250:7", PyRange(1, 4, 2), PyRange(3, 250, 7)},
      {"::-1, ::5", PyRange(3, -1, -1), PyRange(0, 256, 5)},
      {"2:3, 255:0:-3", {2}, PyRange(255, 0, -3)},
      {"-3:, 30:97", PyRange(1, 4, 1), PyRange(30, 97, 1)},
      {"..., 17:200:32", PyRange(0, 4, 1), PyRange(17, 200, 32)},
  };
}

const char* kTypes[] = {"F32",   "F16",   "BF16",  "Q4_0",   "Q4_1",
                        "Q5_0",  "Q5_1",  "Q8_0",  "Q2_K",   "Q3_K",
                        "Q4_K",  "Q5_K",  "Q6_K",  "IQ4_NL", "IQ4_XS",
                        "TQ1_0", "TQ2_0", "MXFP4", "NVFP4"};
const char* kWeights[] = {"blk.0.attn_q.weight", "blk.0.ffn_down.weight"};

class GgmlFixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GgmlFixtureTest, DecodesEveryTensorBitExactlyWholeAndSliced) {
  const std::string type = GetParam();
  auto ckpt = Checkpoint::Open(Fixture("gguf/" + type + ".gguf"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  for (const char* name : kWeights) {
    SCOPED_TRACE(name);
    const LogicalTensor* t = (*ckpt)->FindTensor(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->shape, (std::vector<int64_t>{4, 256}));
    EXPECT_EQ(t->encoding->info().scheme, type);
    const std::vector<float> want =
        ReadF32File(Fixture("gguf/" + type + "." + name + ".deq.f32"));
    ASSERT_EQ(want.size(), 1024u);

    auto all = ResolveSlice({}, t->shape);
    ASSERT_TRUE(all.ok());
    auto got = ReadSlice(*t, *all);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(SameBits(*got, want));

    for (const Slice2D& s : Slices()) {
      SCOPED_TRACE(s.text);
      auto items = ParseSlice(s.text);
      ASSERT_TRUE(items.ok()) << items.status();
      auto resolved = ResolveSlice(*items, t->shape);
      ASSERT_TRUE(resolved.ok()) << resolved.status();
      EXPECT_EQ(resolved->result_shape,
                (std::vector<int64_t>{static_cast<int64_t>(s.rows.size()),
                                      static_cast<int64_t>(s.cols.size())}));
      std::vector<float> expected;
      for (int64_t r : s.rows) {
        for (int64_t c : s.cols) expected.push_back(want[r * 256 + c]);
      }
      auto sliced = ReadSlice(*t, *resolved);
      ASSERT_TRUE(sliced.ok()) << sliced.status();
      EXPECT_TRUE(SameBits(*sliced, expected));
    }
  }
}

TEST_P(GgmlFixtureTest, InspectAgreesWithDecodeForEveryElement) {
  const std::string type = GetParam();
  auto ckpt = Checkpoint::Open(Fixture("gguf/" + type + ".gguf"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  for (const char* name : kWeights) {
    const LogicalTensor* t = (*ckpt)->FindTensor(name);
    ASSERT_NE(t, nullptr);
    const std::vector<float> want =
        ReadF32File(Fixture("gguf/" + type + "." + name + ".deq.f32"));
    for (int64_t i = 0; i < t->num_elements; ++i) {
      ScalarInfo s;
      ASSERT_TRUE(t->encoding->Inspect(i, &s).ok());
      ASSERT_TRUE(SameBits({s.value}, {want[i]})) << name << " element " << i;
      // The decomposition explains the value to within float rounding.
      const double explained = s.scale * s.level + s.offset;
      ASSERT_NEAR(explained, want[i], 1e-6 * (1 + std::fabs(want[i])))
          << name << " element " << i;
      ASSERT_GE(want[i], s.range_min - 1e-6) << name << " element " << i;
      ASSERT_LE(want[i], s.range_max + 1e-6) << name << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFixtureTypes, GgmlFixtureTest,
                         ::testing::ValuesIn(kTypes), [](const auto& info) {
                           return std::string(info.param);
                         });

TEST(GgmlFixtureTest, NormIsPlainF32InEveryFile) {
  for (const char* type : kTypes) {
    auto ckpt =
        Checkpoint::Open(Fixture(std::string("gguf/") + type + ".gguf"));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.attn_norm.weight");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->shape, std::vector<int64_t>{256});
    EXPECT_EQ(t->encoding->info().scheme, "F32");
  }
}

}  // namespace
}  // namespace tensormorph
