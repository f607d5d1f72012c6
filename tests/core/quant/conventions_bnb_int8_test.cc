// bitsandbytes LLM.int8 checkpoints written by
// tests/python/writers/bnb_int8_writer.py (numpy only): every element of
// every int8 weight equals, bit for bit, the writer's reference
// A * SCB * float32(1/127) rounded as PyTorch rounds it; a weight_format
// other than row is UNIMPLEMENTED naming it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/npy_reader.h"
#include "tests/support/python_writer.h"
#include "tests/support/status_matchers.h"

namespace tensormorph::conventions_bnb_int8_test {
namespace {

using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ReadNpy;
using ::tensormorph::testing::WriterOutput;
using ::testing::AllOf;

const std::string& Fixture() { return WriterOutput("bnb_int8_writer.py"); }

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(BnbInt8ConventionTest, EveryWeightDecodesBitForBitToTheReference) {
  auto ckpt = Checkpoint::Open(Fixture() + "/model");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::ifstream in(Fixture() + "/expected/index.txt");
  int checked = 0;
  for (std::string name; std::getline(in, name);) {
    SCOPED_TRACE(name);
    const LogicalTensor* t = (*ckpt)->FindTensor(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->encoding->info().convention, "bitsandbytes");
    EXPECT_EQ(t->encoding->info().scheme, "int8 (LLM.int8, row absmax)");
    EXPECT_EQ(t->encoding->parts().size(), 3u);  // weight, SCB, weight_format
    const auto want = ReadNpy(Fixture() + "/expected/" + name + ".npy");
    EXPECT_EQ(t->shape, want.shape);
    const std::vector<float> ref = want.floats();
    ASSERT_EQ(static_cast<int64_t>(ref.size()), t->num_elements);
    std::vector<float> got(ref.size());
    ASSERT_TRUE(t->encoding->Decode(0, t->num_elements, got.data()).ok());
    const int64_t cols = t->shape[1];
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_EQ(Bits(got[i]), Bits(ref[i])) << "element " << i;
      ScalarInfo s;
      ASSERT_TRUE(t->encoding->Inspect(i, &s).ok());
      ASSERT_EQ(Bits(s.value), Bits(ref[i])) << "inspect " << i;
      EXPECT_EQ(s.group, static_cast<int64_t>(i) / cols);
      // A partial decode from this element gives the same value.
      float one = 0;
      ASSERT_TRUE(t->encoding->Decode(i, 1, &one).ok());
      ASSERT_EQ(Bits(one), Bits(ref[i]));
    }
    ++checked;
  }
  EXPECT_EQ(checked, 3);
  EXPECT_THAT((*ckpt)->conventions(), ::testing::ElementsAre("bitsandbytes"));
  EXPECT_EQ((*ckpt)->FindTensor("model.layers.0.mlp.down_proj.SCB"), nullptr);
  ASSERT_NE((*ckpt)->FindTensor("lm_head.weight"), nullptr);
}

TEST(BnbInt8ConventionTest, ColumnLayoutsAreUnimplementedByName) {
  auto ckpt = Checkpoint::Open(Fixture() + "/col32");
  ASSERT_FALSE(ckpt.ok());
  EXPECT_THAT(
      ckpt,
      AllOf(HasReason(ErrorReason::kUnsupportedConvention),
            MessageNames("'model.layers.0.mlp.down_proj.weight_format' is 1"),
            MessageNames("col32")));
}

// The diff against the float32 source equals a float64 reference over the
// writer's expected values; round-to-nearest codes stay within half a step.
TEST(BnbInt8ConventionTest, DiffAgainstTheSourceMatchesAFloat64Reference) {
  auto ckpt = Checkpoint::Open(Fixture() + "/model");
  auto src = Checkpoint::Open(Fixture() + "/source");
  ASSERT_TRUE(ckpt.ok() && src.ok());
  std::ifstream in(Fixture() + "/expected/index.txt");
  for (std::string name; std::getline(in, name);) {
    SCOPED_TRACE(name);
    const LogicalTensor* q = (*ckpt)->FindTensor(name);
    const LogicalTensor* x = (*src)->FindTensor(name);
    ASSERT_TRUE(q != nullptr && x != nullptr);
    const std::vector<float> ref =
        ReadNpy(Fixture() + "/expected/" + name + ".npy").floats();
    std::vector<float> source(x->num_elements);
    ASSERT_TRUE(x->encoding->Decode(0, x->num_elements, source.data()).ok());
    double se = 0, max_abs = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double d = static_cast<double>(ref[i]) - source[i];
      se += d * d;
      max_abs = std::max(max_abs, std::fabs(d));
    }
    auto diff = DiffTensor(*q, *x, DiffOptions{});
    ASSERT_TRUE(diff.ok()) << diff.status();
    EXPECT_NEAR(diff->mse, se / ref.size(), 1e-12 * se / ref.size());
    EXPECT_DOUBLE_EQ(diff->max_abs_err, max_abs);
    EXPECT_EQ(diff->clipped, 0);
    EXPECT_EQ(diff->not_nearest, 0);
  }
}

}  // namespace
}  // namespace tensormorph::conventions_bnb_int8_test
