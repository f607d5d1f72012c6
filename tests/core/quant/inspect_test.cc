// Inspect reports what a person needs to explain a value: the raw code, the
// parameters that apply to it, and the step.
#include <cmath>
#include <cstring>
#include <string>

#include "core/format/checkpoint.h"
#include "core/quant/codec.h"
#include "core/quant/float_formats.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::Fixture;

double Param(const ScalarInfo& s, absl::string_view name) {
  for (int i = 0; i < s.num_params; ++i) {
    if (s.params[i].name == name) return s.params[i].value;
  }
  ADD_FAILURE() << "no parameter " << name;
  return NAN;
}

float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

TEST(InspectTest, Q4KReportsSuperScalesSubBlockScaleMinAndCode) {
  auto ckpt = Checkpoint::Open(Fixture("gguf/Q4_K.gguf"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const StoredTensor* st = (*ckpt)->FindStored("blk.0.ffn_down.weight");
  const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.ffn_down.weight");
  ASSERT_NE(st, nullptr);
  // Row 2, column 109: block 2; in-block element 109 lies in the second
  // 64-element chunk, its upper 32 -> sub-block 3.
  const int64_t index = 2 * 256 + 109;
  ScalarInfo s;
  ASSERT_TRUE(t->encoding->Inspect(index, &s).ok());
  EXPECT_EQ(s.block, 2);
  EXPECT_EQ(s.sub_block, 3);

  // The block's bytes read by hand: d, dmin, 12 scale bytes, 128 quant bytes.
  const uint8_t* b = st->data.data() + 2 * 144;
  const float d = F16At(b), dmin = F16At(b + 2);
  const uint8_t* sc = b + 4;
  // Sub-block 3 (< 4): scale = sc[3] & 63, min = sc[7] & 63.
  const int scale6 = sc[3] & 63, min6 = sc[7] & 63;
  // Element 109 = chunk 1, position 13, high nibble of qs[32 + 13].
  const int code = b[16 + 32 + 13] >> 4;
  EXPECT_EQ(Param(s, "d"), d);
  EXPECT_EQ(Param(s, "dmin"), dmin);
  EXPECT_EQ(Param(s, "sc"), scale6);
  EXPECT_EQ(Param(s, "m"), min6);
  EXPECT_EQ(s.code, code);
  EXPECT_EQ(s.code_width, 4);
  const float d1 = d * scale6, m1 = dmin * min6;
  EXPECT_EQ(s.value, d1 * code - m1);
  EXPECT_EQ(s.step, std::fabs(static_cast<double>(d1)));
  EXPECT_DOUBLE_EQ(s.range_min, std::min(-m1 + 0.0, d1 * 15.0 - m1));
}

TEST(InspectTest, Q8_0ReportsBlockScaleAndInt8Code) {
  auto ckpt = Checkpoint::Open(Fixture("gguf/Q8_0.gguf"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const StoredTensor* st = (*ckpt)->FindStored("blk.0.attn_q.weight");
  const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.attn_q.weight");
  for (int64_t index : {0, 31, 32, 517, 1023}) {
    SCOPED_TRACE(index);
    ScalarInfo s;
    ASSERT_TRUE(t->encoding->Inspect(index, &s).ok());
    const uint8_t* b = st->data.data() + (index / 32) * 34;
    const float d = F16At(b);
    const int8_t q = static_cast<int8_t>(b[2 + index % 32]);
    EXPECT_EQ(s.block, index / 32);
    EXPECT_EQ(Param(s, "d"), d);
    EXPECT_EQ(s.scale, d);
    EXPECT_EQ(s.code, q);
    EXPECT_EQ(s.code_bits_value, static_cast<uint8_t>(q));
    EXPECT_EQ(s.value, q * d);
    EXPECT_EQ(s.step, std::fabs(d));
  }
}

TEST(InspectTest, Q4_0NamesItsZeroPointOfEight) {
  auto ckpt = Checkpoint::Open(Fixture("gguf/Q4_0.gguf"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.attn_q.weight");
  ScalarInfo s;
  ASSERT_TRUE(t->encoding->Inspect(40, &s).ok());
  EXPECT_EQ(s.zero_point, 8);
  EXPECT_EQ(s.level, s.code - 8);
  EXPECT_EQ(s.value, static_cast<float>(s.level * s.scale));
}

TEST(InspectTest, Iq4NlStepIsTheCodebookGapTimesTheScale) {
  auto ckpt = Checkpoint::Open(Fixture("gguf/IQ4_NL.gguf"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.attn_q.weight");
  for (int64_t i = 0; i < 64; ++i) {
    ScalarInfo s;
    ASSERT_TRUE(t->encoding->Inspect(i, &s).ok());
    const int c = static_cast<int>(s.code);
    const double below = c > 0 ? kIq4NlValues[c] - kIq4NlValues[c - 1]
                               : kIq4NlValues[1] - kIq4NlValues[0];
    const double above = c < 15 ? kIq4NlValues[c + 1] - kIq4NlValues[c]
                                : kIq4NlValues[15] - kIq4NlValues[14];
    const double a = std::fabs(s.scale);
    EXPECT_DOUBLE_EQ(s.step_below, a * (s.scale < 0 ? above : below));
    EXPECT_DOUBLE_EQ(s.step_above, a * (s.scale < 0 ? below : above));
  }
}

TEST(InspectTest, PlainBf16ShowsBitsAndValue) {
  auto ckpt = Checkpoint::Open(Fixture("gguf/BF16.gguf"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const StoredTensor* st = (*ckpt)->FindStored("blk.0.attn_q.weight");
  const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.attn_q.weight");
  ScalarInfo s;
  ASSERT_TRUE(t->encoding->Inspect(300, &s).ok());
  uint16_t bits;
  std::memcpy(&bits, st->data.data() + 600, 2);
  EXPECT_EQ(s.code_bits_value, bits);
  EXPECT_TRUE(s.code_is_float);
  EXPECT_EQ(s.block, -1);
  EXPECT_EQ(s.value, BF16ToF32(bits));
  EXPECT_EQ(s.scale, 1);
}

}  // namespace
}  // namespace tensormorph

namespace tensormorph {
namespace {

// IQ2_XXS: element 8 is coordinate 0 of group 1's grid entry; the Inspector
// names the entry, the sign byte, the sub-block scale, and the levels of the
// element's marginal codebook (+-8, +-25, +-43 times the scale).
TEST(InspectTest, Iq2XxsShowsGridEntrySignsAndSubBlockScale) {
  uint8_t block[66] = {};
  block[1] = 0x3C;   // d = 1
  block[2 + 1] = 5;  // group 1 selects entry 5: 25 8 25 8 8 8 8 8
  const uint32_t aux1 = (3u << 7) | (2u << 28);  // sign index 3, scale 2
  std::memcpy(block + 2 + 4, &aux1, 4);
  ScalarInfo s;
  ASSERT_TRUE(InspectElement(DType::kIQ2_XXS, block, 8, &s).ok());
  EXPECT_EQ(s.codeword.index, 5);
  EXPECT_EQ(s.codeword.grid_size, 256);
  EXPECT_EQ(s.codeword.dims, 8);
  EXPECT_EQ(s.codeword.position, 0);
  EXPECT_EQ(s.codeword.entry[0], 25);
  EXPECT_EQ(s.codeword.entry[1], 8);
  EXPECT_EQ(s.codeword.sign_bits, 0x03u);  // ksigns_iq2xs[3]
  EXPECT_TRUE(s.codeword.negated);
  EXPECT_EQ(s.codeword.sub_block_scale, 0.625);  // (0.5 + 2) / 4
  EXPECT_EQ(s.code, 5);
  EXPECT_EQ(s.sub_block, 0);
  EXPECT_EQ(s.scale, 0.625);
  EXPECT_EQ(s.level, -25);
  EXPECT_EQ(s.value, -15.625f);
  EXPECT_EQ(s.step_below, 18 * 0.625);  // down to -43
  EXPECT_EQ(s.step_above, 17 * 0.625);  // up to -8
  EXPECT_EQ(s.range_min, -43 * 0.625);
  EXPECT_EQ(s.range_max, 43 * 0.625);
  EXPECT_EQ(s.grid, ScalarInfo::Grid::kCodebook);
}

// IQ1_S: no signs; every coordinate of the group is shifted by its delta,
// so the levels are -1, 0, +1 plus delta.
TEST(InspectTest, Iq1SShowsGridEntryAndDelta) {
  uint8_t block[50] = {};
  block[1] = 0x3C;  // d = 1
  // Entry 0 (all -1); sub-block 0: scale 3 (dl = 7), delta negative.
  const uint16_t qh = (3u << 12) | 0x8000;
  std::memcpy(block + 2 + 32, &qh, 2);
  ScalarInfo s;
  ASSERT_TRUE(InspectElement(DType::kIQ1_S, block, 3, &s).ok());
  EXPECT_EQ(s.codeword.index, 0);
  EXPECT_EQ(s.codeword.entry[3], -1);
  EXPECT_EQ(s.codeword.delta, -0.125);
  EXPECT_EQ(s.codeword.sign_bits, 0u);
  EXPECT_EQ(s.scale, 7);
  EXPECT_EQ(s.level, -1.125);
  EXPECT_EQ(s.value, -7.875f);
  EXPECT_EQ(s.step_above, 7);  // to 0 - 1/8
  EXPECT_EQ(s.range_min, -7.875);
  EXPECT_EQ(s.range_max, 7 * 0.875);
}

}  // namespace
}  // namespace tensormorph
