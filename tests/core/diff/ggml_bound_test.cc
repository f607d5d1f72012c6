// The rounding bound held to what ggml's own quantizers write: every block
// type ggml_quantize_chunk makes from the same weights is within its bound
// (no element clipped or not nearest beyond design, max_excess_steps 0), and
// planted defects each move the count they deserve.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/diff/tensor_diff.h"
#include "core/dtype.h"
#include "core/format/stored_tensor.h"
#include "core/quant/float_formats.h"
#include "core/quant/rounding_bound.h"
#include "core/quant/stored_encoding.h"
#include "gtest/gtest.h"
#include "tests/oracle/ggml_oracle.h"
#include "tests/support/quantize.h"

namespace tensormorph::ggml_bound_test {
namespace {

using ::tensormorph::testing::GgmlOracle;

constexpr int64_t kRows = 16, kCols = 1024;

// Weights as real ones look, with what stresses a bound: Gaussian rows,
// heavy-tailed outliers, one zero row, and blocks so small that their f16
// scales are subnormal (where a scale's rounding is largest).
std::vector<float> Weights(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0, 0.02f);
  std::vector<float> w(kRows * kCols);
  for (float& v : w) v = g(rng);
  for (int k = 0; k < 64; ++k) w[rng() % w.size()] *= 40;
  for (int64_t c = 0; c < kCols; ++c) w[3 * kCols + c] = 0;
  for (int64_t c = 0; c < 256; ++c) w[5 * kCols + c] *= 1e-3f;
  for (int64_t c = 256; c < 512; ++c) w[5 * kCols + c] *= 3e-2f;
  return w;
}

// A quantized tensor and its source over bytes the test owns.
struct Pair {
  std::vector<uint8_t> bytes;
  std::vector<float> source;
  StoredTensor q, s;
  LogicalTensor quant, ref;
};

void Bind(DType dtype, Pair* p) {
  p->q = {"w", dtype, {kRows, kCols},  kRows * kCols,
          0,   0,     p->bytes.size(), absl::MakeConstSpan(p->bytes)};
  p->s = {
      "w",
      DType::kF32,
      {kRows, kCols},
      kRows * kCols,
      0,
      0,
      p->source.size() * 4,
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(p->source.data()),
                          p->source.size() * 4)};
  p->quant = {
      "w", {kRows, kCols}, kRows * kCols, MakeStoredEncoding(p->q, "ggml")};
  p->ref = {"w",
            {kRows, kCols},
            kRows * kCols,
            MakeStoredEncoding(p->s, "safetensors")};
}

std::unique_ptr<Pair> Quantized(DType dtype, uint32_t seed = 7) {
  auto p = std::make_unique<Pair>();
  p->source = Weights(seed);
  auto q = GgmlOracle::Shared().Quantize(static_cast<int>(*GgmlTypeIdOf(dtype)),
                                         p->source, kCols);
  EXPECT_TRUE(q.ok()) << q.status();
  if (q.ok()) p->bytes = *std::move(q);
  Bind(dtype, p.get());
  return p;
}

TensorDiff Diff(const Pair& p) {
  auto d = DiffTensor(p.quant, p.ref, DiffOptions{});
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : TensorDiff{};
}

class GgmlBoundTest : public ::testing::TestWithParam<DType> {};

TEST_P(GgmlBoundTest, GgmlsOwnQuantizerStaysWithinTheBound) {
  const auto p = Quantized(GetParam());
  const TensorDiff d = Diff(*p);
  SCOPED_TRACE(::testing::Message()
               << DTypeName(GetParam()) << ": max_err_steps " << d.max_err_steps
               << ", bound " << d.bound_steps << " (" << d.bound_family << ")");
  // The figures docs/formats.md quotes per family (--gtest_output=xml shows
  // them).
  RecordProperty("max_err_steps", absl::StrFormat("%.4f", d.max_err_steps));
  RecordProperty("bound_steps", absl::StrFormat("%.4f", d.bound_steps));
  RecordProperty("zeroed_groups", static_cast<int>(d.zeroed_groups));
  RecordProperty("clipped", static_cast<int>(d.clipped));
  EXPECT_EQ(d.not_nearest, 0);
  EXPECT_EQ(d.clipped_beyond_bound, 0);
  // Only formats that clip by design have clipped elements.
  if (BoundOfDType(GetParam()).clip == RoundingBound::Clip::kNone) {
    EXPECT_EQ(d.clipped, 0);
  }
  EXPECT_EQ(d.max_excess_steps, 0);
  EXPECT_TRUE(std::isfinite(d.max_err_steps));
  EXPECT_TRUE(d.nearest_codes);
  EXPECT_GE(d.bound_steps, 0.5);
}

INSTANTIATE_TEST_SUITE_P(
    EveryRoundToNearestBlockType, GgmlBoundTest,
    ::testing::Values(DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                      DType::kQ8_0, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                      DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL,
                      DType::kIQ4_XS),
    [](const auto& info) { return std::string(DTypeName(info.param)); });

// The f16 scale's rounding is why Q8_0 needs more than half a step: the
// bound of a group reaches 0.5 + (127 + 0.5) * 2^-11 and beyond for
// subnormal scales, and ggml's own output goes past 0.5.
TEST(GgmlBoundTest, Q8_0GoesPastHalfAStepAndStaysWithinItsBound) {
  const auto p = Quantized(DType::kQ8_0);
  const TensorDiff d = Diff(*p);
  EXPECT_GT(d.max_err_steps, 0.5);
  EXPECT_GT(d.above_half_step, 0);
  EXPECT_GE(d.bound_steps, 0.5 + 127.5 * 0x1p-11);
  EXPECT_EQ(d.max_excess_steps, 0);
}

// Q8_0 blocks: an f16 d, then 32 int8 codes.
constexpr int kQ8Bytes = 34;

TEST(GgmlBoundTest, ACodeOffByOneLevelIsNotNearest) {
  auto p = Quantized(DType::kQ8_0);
  // An element its level hits closely: one level off is nearly a step.
  std::vector<float> decoded(p->source.size());
  ASSERT_TRUE(p->quant.encoding->Decode(0, kRows * kCols, decoded.data()).ok());
  ScalarInfo si;
  int64_t at = -1;
  for (int64_t i = 0; i < kCols && at < 0; ++i) {
    ASSERT_TRUE(p->quant.encoding->Inspect(i, &si).ok());
    if (std::fabs(decoded[i] - p->source[i]) < 0.05 * si.step &&
        std::fabs(si.level) < 100) {
      at = i;
    }
  }
  ASSERT_GE(at, 0);
  p->bytes[at / 32 * kQ8Bytes + 2 + at % 32] += 1;
  const TensorDiff d = Diff(*p);
  EXPECT_EQ(d.not_nearest, 1);
  EXPECT_EQ(d.clipped, 0);
  EXPECT_GT(d.max_excess_steps, 0.3);
  ASSERT_TRUE(d.max_excess_element.has_value());
  EXPECT_EQ(d.max_excess_element->flat_index, at) << "the finding's element";
  EXPECT_EQ(d.max_excess_element->quant.group, at / 32);
}

TEST(GgmlBoundTest, AScaleTimesElevenTenthsMakesItsGroupNotNearest) {
  auto p = Quantized(DType::kQ8_0);
  const int64_t block = 2;  // row 0, a Gaussian block
  uint8_t* d16 = p->bytes.data() + block * kQ8Bytes;
  uint16_t h;
  std::memcpy(&h, d16, 2);
  const float scaled = F16ToF32(h) * 1.1f;
  h = ::tensormorph::testing::F32ToF16Bits(scaled);
  std::memcpy(d16, &h, 2);
  const TensorDiff d = Diff(*p);
  EXPECT_GT(d.not_nearest, 0);
  EXPECT_LE(d.not_nearest, 32) << "only that block";
  EXPECT_EQ(d.clipped, 0) << "a larger scale widens the range";
  EXPECT_GT(d.max_excess_steps, 1);
}

TEST(GgmlBoundTest, AZeroedScaleIsAZeroedGroupNotInfiniteSteps) {
  auto p = Quantized(DType::kQ8_0);
  std::memset(p->bytes.data() + 4 * kQ8Bytes, 0, 2);
  const TensorDiff d = Diff(*p);
  EXPECT_EQ(d.zeroed_groups, 1);
  // ...and the zero row's blocks, whose zero scale misses nothing.
  EXPECT_EQ(d.zeroed_elements, 32 + kCols);
  EXPECT_TRUE(std::isfinite(d.max_err_steps));
  EXPECT_EQ(d.not_nearest + d.clipped, 0);
  EXPECT_EQ(d.max_excess_steps, 0);
}

TEST(GgmlBoundTest, CodesFromAnotherTensorAreNotNearestAndClipped) {
  auto p = Quantized(DType::kQ8_0);
  auto other = Quantized(DType::kQ8_0, /*seed=*/99);
  // Row 0's codes from the other tensor, its scales kept.
  for (int64_t b = 0; b < kCols / 32; ++b) {
    std::memcpy(p->bytes.data() + b * kQ8Bytes + 2,
                other->bytes.data() + b * kQ8Bytes + 2, 32);
  }
  const TensorDiff d = Diff(*p);
  EXPECT_GT(d.not_nearest, kCols / 2);
  EXPECT_GT(d.max_excess_steps, 10);
}

// A source beyond its group's range: Q4_1 cannot clip (its range is the
// block's min and max), so a scale that shrinks is seen as clipping.
TEST(GgmlBoundTest, AShrunkMinMaxScaleClips) {
  auto p = Quantized(DType::kQ4_1);
  // Q4_1 blocks: f16 d, f16 m, 16 bytes of nibbles.
  uint8_t* d16 = p->bytes.data() + 2 * 20;
  uint16_t h;
  std::memcpy(&h, d16, 2);
  h = ::tensormorph::testing::F32ToF16Bits(F16ToF32(h) * 0.8f);
  std::memcpy(d16, &h, 2);
  const TensorDiff d = Diff(*p);
  EXPECT_GT(d.clipped, 0);
  EXPECT_GT(d.max_excess_steps, 0);
}

// A bf16 source was itself rounded from what the quantizer read: half its
// ulp (2^-8 of each value) widens the bound, and nothing for float32.
TEST(RoundingBoundTest, ABf16SourceWidensTheBoundByItsOwnRounding) {
  EncodingInfo bf16;
  bf16.scheme = "BF16";
  EncodingInfo f32;
  f32.scheme = "F32";
  EncodingInfo q;
  q.scheme = "Q8_0";
  q.quantized = true;
  EXPECT_EQ(SourceRoundingRel(bf16), 0x1p-8);
  EXPECT_EQ(SourceRoundingRel(f32), 0);
  EXPECT_EQ(SourceRoundingRel(q), 0) << "a quantized source: not a rounding";
  QuantRun run{32, 0, 0.25, 0.25, -2, 2};
  ApplyBound(BoundOfDType(DType::kF32), &run);
  const double before = InteriorBoundSteps(run);
  WidenForSourceRounding(0x1p-8, false, &run);
  // At the outermost level (2, 8 steps from 0): 2 * 2^-8 / 0.25 more.
  EXPECT_GE(InteriorBoundSteps(run) - before, 2 * 0x1p-8 / 0.25);
  EXPECT_LT(InteriorBoundSteps(run) - before, 0.1);
}

// Which quantizers store a zero scale for a non-zero group.
TEST(RoundingBoundTest, OnlySubBlockScaledFormatsZeroGroups) {
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ6_K, DType::kIQ4_XS,
                  DType::kIQ2_XXS}) {
    EXPECT_TRUE(BoundOfDType(t).zeroes_groups) << DTypeName(t);
  }
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kIQ4_NL,
                  DType::kMXFP4}) {
    EXPECT_FALSE(BoundOfDType(t).zeroes_groups) << DTypeName(t);
  }
}

TEST(RoundingBoundTest, HalfUlpOfF16) {
  EXPECT_EQ(HalfUlpF16(1.0), 0x1p-11);
  EXPECT_EQ(HalfUlpF16(1.5), 0x1p-11);
  EXPECT_EQ(HalfUlpF16(-2.0), 0x1p-10);
  EXPECT_EQ(HalfUlpF16(0x1p-20), 0x1p-25) << "subnormal: a fixed half-ulp";
}

TEST(RoundingBoundTest, ErrorFeedbackConventionsChooseTheirCodes) {
  EncodingInfo gptq;
  gptq.convention = "gptq";
  EXPECT_EQ(BoundOfEncoding(gptq).codes, RoundingBound::Codes::kChosen);
  EncodingInfo q40;
  q40.convention = "ggml";
  q40.scheme = "Q4_0";
  EXPECT_EQ(BoundOfEncoding(q40).clip, RoundingBound::Clip::kShortEnd);
}

}  // namespace
}  // namespace tensormorph::ggml_bound_test
