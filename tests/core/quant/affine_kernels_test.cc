// The conventions' run kernels: whatever path the CPU takes (the table runs
// at every SIMD level it has), the bits equal the scalar reference's, for
// every code, sign convention, zero-point, scale and run length.
#include "core/quant/affine_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/quant/decode_simd.h"
#include "core/quant/float_formats.h"
#include "gtest/gtest.h"
#include "tests/support/same_bits.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::SameBits;

std::vector<uint8_t> RandomCodes(std::mt19937& rng, int64_t n, int bits) {
  std::vector<uint8_t> c(static_cast<size_t>(n));
  for (auto& x : c) x = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
  return c;
}

// Group layouts: one group for everything, groups of 32 or 128 entered at
// their start or part-way, groups shorter than a vector.
const Runs kRuns[] = {{1000, 0}, {32, 0}, {32, 5}, {128, 127},
                      {3, 1},    {8, 0},  {16, 0}, {16, 3}};

// The table runs' levels, capped one at a time (lifted again at the end,
// whatever the test's outcome).
class TableRunsTest : public ::testing::TestWithParam<DecodeSimd> {
 protected:
  void SetUp() override {
    if (SupportedDecodeSimd() < GetParam()) GTEST_SKIP() << "not on this CPU";
    CapDecodeSimdForTesting(GetParam());
  }
  void TearDown() override { CapDecodeSimdForTesting(DecodeSimd::kAvx512); }
};

TEST(AffineRunsTest, MatchScalarReference) {
  std::mt19937 rng(11);
  const float scales[] = {0.0123f, -0.5f, 1e-40f, 3.4e38f, 0.0f, NAN};
  const int32_t biases[] = {0, 7, 8, 128, -3, 1 << 20};
  for (int bits : {4, 8}) {
    for (uint8_t flip : {uint8_t{0}, static_cast<uint8_t>(1u << (bits - 1))}) {
      for (Runs runs : kRuns) {
        for (int64_t n : {0, 1, 7, 8, 9, 31, 128, 133, 300}) {
          const auto codes = RandomCodes(rng, n, bits);
          std::vector<float> scale(n + 1);
          std::vector<int32_t> bias(n + 1);
          for (int64_t g = 0; g <= n; ++g) {
            scale[g] = scales[rng() % 6];
            bias[g] = biases[rng() % 6];
          }
          std::vector<float> fast(n + 1, -1), ref(n + 1, -1);
          DecodeAffineRuns(codes.data(), n, runs, flip, bias.data(),
                           scale.data(), fast.data());
          DecodeAffineRunsScalar(codes.data(), n, runs, flip, bias.data(),
                                 scale.data(), ref.data());
          for (int64_t i = 0; i <= n; ++i) {
            ASSERT_TRUE(SameBits(fast[i], ref[i]))
                << "bits " << bits << " flip " << int{flip} << " runs "
                << runs.run << "/" << runs.skip << " n " << n << " at " << i;
          }
        }
      }
    }
  }
}

TEST(AffineRunsTest, AreEachGroupsScaleTimesItsIntegerLevel) {
  const uint8_t codes[] = {0, 1, 7, 8, 15, 9, 3, 12, 5};
  // Two's-complement 4-bit codes (flip 8), zero-point 0 then 1; groups of
  // four entered one code in, so the first group holds three codes.
  const int32_t bias[] = {8, 9, 9};
  const float scale[] = {0.5f, 2.0f, -1.0f};
  std::vector<float> out(9);
  DecodeAffineRuns(codes, 9, {4, 1}, 8, bias, scale, out.data());
  const float want[] = {0, 0.5f, 3.5f, -18, -4, -16, 4, 5, -4};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(out[i], want[i]) << i;
}

TEST_P(TableRunsTest, MatchScalarReferenceForSixteenAndTwoHundredFiftySix) {
  std::mt19937 rng(12);
  const float scales[] = {0.07f, -2.0f, 1e-39f, INFINITY};
  for (int bits : {4, 8}) {
    std::vector<float> table(size_t{1} << bits);
    for (auto& t : table) t = static_cast<float>(rng() % 2001) / 1000.0f - 1;
    table[table.size() - 1] = NAN;  // FP8's NaN code
    table[1] = -0.0f;
    for (Runs runs : kRuns) {
      for (int64_t n : {0, 1, 8, 15, 16, 17, 64, 300}) {
        const auto codes = RandomCodes(rng, n, bits);
        std::vector<float> scale(n + 1);
        for (float& s : scale) s = scales[rng() % 4];
        std::vector<float> fast(n + 1, -1), ref(n + 1, -1);
        DecodeTableRuns(codes.data(), n, runs, table.data(),
                        static_cast<int>(table.size()), Codebook::kTable,
                        scale.data(), fast.data());
        DecodeTableRunsScalar(codes.data(), n, runs, table.data(), scale.data(),
                              ref.data());
        for (int64_t i = 0; i <= n; ++i) {
          ASSERT_TRUE(SameBits(fast[i], ref[i]))
              << "bits " << bits << " runs " << runs.run << "/" << runs.skip
              << " n " << n << " at " << i << ": " << fast[i] << " vs "
              << ref[i];
        }
      }
    }
  }
}

TEST_P(TableRunsTest, FloatEightLevelsComputedEqualTheirTable) {
  std::vector<float> table(256);
  for (int c = 0; c < 256; ++c) table[c] = F8E4M3ToF32(static_cast<uint8_t>(c));
  std::vector<uint8_t> codes(256 * 3);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i);
  std::mt19937 rng(13);
  std::shuffle(codes.begin() + 256, codes.end(), rng);  // NaNs anywhere
  const int64_t n = static_cast<int64_t>(codes.size());
  for (Runs runs : kRuns) {
    std::vector<float> scale(codes.size());
    for (float& s : scale) s = static_cast<float>(rng() % 1000) * 1e-4f - 0.05f;
    std::vector<float> fast(codes.size()), ref(codes.size());
    DecodeTableRuns(codes.data(), n, runs, table.data(), 256,
                    Codebook::kFp8E4M3, scale.data(), fast.data());
    DecodeTableRunsScalar(codes.data(), n, runs, table.data(), scale.data(),
                          ref.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(SameBits(fast[i], ref[i]))
          << "code " << int{codes[i]} << ": " << fast[i] << " vs " << ref[i];
    }
  }
}

TEST_P(TableRunsTest, SignMagnitudeLevelsEqualTheirTable) {
  std::vector<float> table(std::begin(kE2M1Values), std::end(kE2M1Values));
  std::mt19937 rng(17);
  std::vector<uint8_t> codes(16 * 40 + 5);
  for (uint8_t& c : codes) c = static_cast<uint8_t>(rng() % 16);
  const int64_t n = static_cast<int64_t>(codes.size());
  for (Runs runs : kRuns) {
    std::vector<float> scale(codes.size());
    for (float& s : scale) s = static_cast<float>(rng() % 1000) * 1e-4f - 0.05f;
    std::vector<float> fast(codes.size()), ref(codes.size());
    DecodeTableRuns(codes.data(), n, runs, table.data(), 16,
                    Codebook::kSignMagnitude16, scale.data(), fast.data());
    DecodeTableRunsScalar(codes.data(), n, runs, table.data(), scale.data(),
                          ref.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(SameBits(fast[i], ref[i]))
          << "code " << int{codes[i]} << ": " << fast[i] << " vs " << ref[i];
    }
  }
}

// Straight from packed nibbles (either order), groups of 16, 32 and 64,
// lengths ending inside a group and inside a byte: the codes spread into
// bytes through the scalar reference give the same bits; below AVX-512, or
// for runs that do not start a group or are not whole vectors, it declines.
TEST_P(TableRunsTest, NibbleRunsEqualTheSpreadCodesThroughTheReference) {
  std::mt19937 rng(18);
  std::vector<float> table(std::begin(kE2M1Values), std::end(kE2M1Values));
  table[3] = NAN;  // any codebook of sixteen
  const float scales[] = {0.07f, -2.0f, 1e-39f, INFINITY, NAN, 0.0f};
  for (bool high_first : {false, true}) {
    for (int64_t run : {16, 32, 64}) {
      for (int64_t n : {run * 9, run * 4 + 16, run * 2 + 7, int64_t{1}}) {
        std::vector<uint8_t> packed((n + 1) / 2), codes(n);
        for (uint8_t& b : packed) b = static_cast<uint8_t>(rng());
        for (int64_t i = 0; i < n; ++i) {
          const bool high = (i % 2 == 1) != high_first;
          codes[i] = high ? packed[i / 2] >> 4 : packed[i / 2] & 0xF;
        }
        std::vector<float> scale(n / run + 1);
        for (float& x : scale) x = scales[rng() % 6];
        std::vector<float> fast(n, -1), ref(n);
        const bool taken =
            DecodeNibbleTableRuns(packed.data(), n, {run, 0}, high_first,
                                  table.data(), scale.data(), fast.data());
        ASSERT_EQ(taken, GetParam() == DecodeSimd::kAvx512);
        if (!taken) continue;
        DecodeTableRunsScalar(codes.data(), n, {run, 0}, table.data(),
                              scale.data(), ref.data());
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_TRUE(SameBits(fast[i], ref[i]))
              << "run " << run << " n " << n << " high first " << high_first
              << " at " << i;
        }
      }
    }
  }
  float out[32];
  EXPECT_FALSE(DecodeNibbleTableRuns(nullptr, 32, {32, 5}, false, table.data(),
                                     scales, out));
  EXPECT_FALSE(DecodeNibbleTableRuns(nullptr, 32, {24, 0}, false, table.data(),
                                     scales, out));
}

INSTANTIATE_TEST_SUITE_P(Levels, TableRunsTest,
                         ::testing::Values(DecodeSimd::kScalar,
                                           DecodeSimd::kAvx2,
                                           DecodeSimd::kAvx512),
                         [](const auto& info) {
                           return info.param == DecodeSimd::kScalar ? "Scalar"
                                  : info.param == DecodeSimd::kAvx2 ? "Avx2"
                                                                    : "Avx512";
                         });

}  // namespace
}  // namespace tensormorph
