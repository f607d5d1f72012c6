// MLX's decode kernels: the vector paths give the scalar references' bits
// on random codes and parameters (NaN, infinities, overflow, subnormals and
// ragged group edges included), and the roundings are IEEE round to nearest
// even (checked against the tests' own converters).
#include "core/quant/mlx_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/quant/decode_simd.h"
#include "core/quant/float_formats.h"
#include "core/quant/mlx_packed_kernels.h"
#include "gtest/gtest.h"
#include "tests/support/quantize.h"

namespace tensormorph::mlx_kernels_test {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Random floats over every binade, with NaN and infinities now and then.
float AnyFloat(std::mt19937& rng) {
  const uint32_t u = rng();
  switch (u % 16) {
    case 0:
      return std::nanf("");
    case 1:
      return (u & 32) ? INFINITY : -INFINITY;
    default: {
      float f;
      const uint32_t b = rng();
      std::memcpy(&f, &b, 4);
      return std::isnan(f) ? 1.0f : f;
    }
  }
}

// Floats of the magnitudes scales and biases have, in `t`.
float Param(std::mt19937& rng, DType t, bool wild) {
  if (wild && rng() % 8 == 0) return AnyFloat(rng);
  std::uniform_real_distribution<float> d(-0.05f, 0.05f);
  return RoundTo(t, d(rng));
}

TEST(MlxKernelsTest, RoundingIsNearestEvenAsTheTestsConvertersRound) {
  std::mt19937 rng(30);
  for (int i = 0; i < 200000; ++i) {
    const float x = AnyFloat(rng);
    if (std::isnan(x)) {
      EXPECT_EQ(Bits(RoundToBF16(x)), 0x7FC00000u);
      EXPECT_EQ(Bits(RoundToF16(x)), 0x7FC00000u);
      continue;
    }
    ASSERT_EQ(Bits(RoundToBF16(x)), Bits(BF16ToF32(testing::F32ToBF16Bits(x))))
        << x;
    ASSERT_EQ(Bits(RoundToF16(x)), Bits(F16ToF32(testing::F32ToF16Bits(x))))
        << x;
  }
  EXPECT_EQ(RoundToF16(65519.0f), 65504.0f);
  EXPECT_EQ(RoundToF16(65520.0f), INFINITY);
  EXPECT_EQ(RoundToF16(0x1p-25f), 0.0f);  // a tie below the least subnormal
  EXPECT_EQ(RoundToF16(0x1.8p-25f), 0x1p-24f);
}

class MlxKernelsLevelTest : public ::testing::TestWithParam<DecodeSimd> {
 protected:
  void SetUp() override {
    if (SupportedDecodeSimd() < GetParam()) GTEST_SKIP() << "not on this CPU";
    CapDecodeSimdForTesting(GetParam());
  }
  void TearDown() override { CapDecodeSimdForTesting(DecodeSimd::kAvx512); }
};

TEST_P(MlxKernelsLevelTest, VectorPathsGiveTheScalarBits) {
  std::mt19937 rng(64);
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int bits : {2, 3, 4, 5, 6, 8}) {
      for (int64_t run : {16, 32, 64, 128}) {
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(t) << " " << bits << "-bit run " << run);
        const int64_t n = 40 * run + 13, skip = rng() % run;
        const int64_t groups = (n + skip) / run + 1;
        std::vector<uint8_t> q(n);
        for (uint8_t& c : q) c = rng() & ((1u << bits) - 1);
        std::vector<float> s(groups), b(groups);
        for (int64_t g = 0; g < groups; ++g) {
          s[g] = Param(rng, t, true);
          b[g] = Param(rng, t, true);
        }
        std::vector<float> fast(n), ref(n);
        const Runs runs{.run = run, .skip = skip};
        MlxAffineDecode(q.data(), n, runs, s.data(), b.data(), t, bits,
                        fast.data());
        MlxAffineDecodeScalar(q.data(), n, runs, s.data(), b.data(), t,
                              ref.data());
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(Bits(fast[i]), Bits(ref[i])) << "element " << i;
        }
      }
    }
  }
}

TEST_P(MlxKernelsLevelTest, FloatModesVectorPathsGiveTheScalarBits) {
  std::mt19937 rng(8);
  std::vector<float> e2m1(kE2M1Values, kE2M1Values + 16), e4m3(256);
  for (int c = 0; c < 256; ++c) e4m3[c] = F8E4M3ToF32(static_cast<uint8_t>(c));
  for (int bits : {4, 8}) {
    const float* table = bits == 4 ? e2m1.data() : e4m3.data();
    const int64_t run = bits == 4 ? 16 : 32, n = 200 * run + 5;
    std::vector<uint8_t> q(n);
    for (uint8_t& c : q) c = rng() & ((1u << bits) - 1);
    std::vector<float> s(n / run + 2);
    for (float& x : s) {
      // E8M0 scales 2^(e-127), infinity at 255; E4M3 scales; NaN.
      const uint32_t e = rng() % 256;
      x = rng() % 3 == 0 ? F8E4M3ToF32(static_cast<uint8_t>(e))
                         : std::ldexp(1.0f, static_cast<int>(e) - 127);
    }
    std::vector<float> fast(n), ref(n);
    const Runs runs{.run = run, .skip = 3};
    MlxFloatDecode(q.data(), n, runs, table, bits, s.data(), fast.data());
    MlxFloatDecodeScalar(q.data(), n, runs, table, s.data(), ref.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(Bits(fast[i]), Bits(ref[i])) << bits << "-bit element " << i;
    }
  }
}

// The kernels that read the stored bytes: every code width, dtype and
// mode, lengths that end inside a group and inside a 16-code step, scale and
// bias codes of every kind (NaN, infinities, subnormals, E8M0's extremes),
// against the scalar references bit for bit; below AVX-512 they decline.
TEST_P(MlxKernelsLevelTest, PackedAffinePathsGiveTheScalarBits) {
  std::mt19937 rng(65);
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int bits : {2, 3, 4, 5, 6, 8}) {
      for (int64_t group : {16, 32, 64, 128}) {
        for (int64_t n : {group * 7, group * 5 + 16, group * 3 + 9, int64_t{1},
                          int64_t{15}, int64_t{17}}) {
          SCOPED_TRACE(::testing::Message()
                       << DTypeName(t) << " " << bits << "-bit group " << group
                       << " n " << n);
          // Exactly the bytes the codes take: a read past them would fault
          // under ASan (and a row may end where the file does).
          std::vector<uint8_t> codes((n * bits + 7) / 8);
          for (uint8_t& c : codes) c = static_cast<uint8_t>(rng());
          const int64_t groups = (n + group - 1) / group;
          std::vector<float> s(groups), b(groups);
          for (int64_t g = 0; g < groups; ++g) {
            s[g] = Param(rng, t, true);
            b[g] = Param(rng, t, true);
          }
          std::vector<float> fast(n, -1.0f), ref(n);
          const bool ran = MlxAffineDecodePacked(
              codes.data(), bits, group, s.data(), b.data(), t, n, fast.data());
          ASSERT_EQ(ran, GetParam() == DecodeSimd::kAvx512);
          if (!ran) continue;
          MlxAffineDecodePackedScalar(codes.data(), bits, group, s.data(),
                                      b.data(), t, n, ref.data());
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(Bits(fast[i]), Bits(ref[i])) << "element " << i;
          }
        }
      }
    }
  }
}

TEST_P(MlxKernelsLevelTest, PackedFloatModesGiveTheScalarBits) {
  std::mt19937 rng(66);
  for (MlxFloatMode mode :
       {MlxFloatMode::kMxfp4, MlxFloatMode::kMxfp8, MlxFloatMode::kNvfp4}) {
    const int bits = MlxFloatBits(mode), group = MlxFloatGroup(mode);
    for (int64_t n : {int64_t{256} * group, int64_t{40} * group + 16,
                      int64_t{40} * group + 7, int64_t{3}}) {
      SCOPED_TRACE(::testing::Message()
                   << "mode " << static_cast<int>(mode) << " n " << n);
      std::vector<uint8_t> codes((n * bits + 7) / 8);
      for (uint8_t& c : codes) c = static_cast<uint8_t>(rng());
      // Every scale code at least once (0, 1, 2 and 255 for E8M0; NaN and
      // subnormals for E4M3), in a shuffled order.
      std::vector<uint8_t> scales((n + group - 1) / group);
      for (size_t g = 0; g < scales.size(); ++g) {
        scales[g] = static_cast<uint8_t>(g < 256 ? g : rng());
      }
      std::shuffle(scales.begin(), scales.end(), rng);
      std::vector<float> fast(n, -1.0f), ref(n);
      const bool ran = MlxFloatDecodePacked(mode, codes.data(), scales.data(),
                                            n, fast.data());
      ASSERT_EQ(ran, GetParam() == DecodeSimd::kAvx512);
      if (!ran) continue;
      MlxFloatDecodePackedScalar(mode, codes.data(), scales.data(), n,
                                 ref.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(Bits(fast[i]), Bits(ref[i]))
            << "element " << i << " scale code "
            << static_cast<int>(scales[i / group]);
      }
    }
  }
}

// The packed references are mlx_kernels.h's formulas on the codes the
// stream holds: one code width and mode each, by hand.
TEST(MlxPackedKernelsTest, ScalarReferencesReadTheStreamAsMlxPacksIt) {
  // 3-bit codes 0..7 packed LSB first: 0b 111 110 101 100 011 010 001 000.
  const uint8_t codes[3] = {0x88, 0xC6, 0xFA};
  const float s[1] = {0.5f}, b[1] = {1.0f};
  float out[8];
  MlxAffineDecodePackedScalar(codes, 3, 16, s, b, DType::kF32, 8, out);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(out[k], 0.5f * k + 1.0f) << k;
  // nvfp4: codes 0x1 (0.5) and 0xF (-6) in one byte, scale E4M3 0x40 (2).
  const uint8_t fp4[1] = {0xF1}, e4m3[1] = {0x40};
  MlxFloatDecodePackedScalar(MlxFloatMode::kNvfp4, fp4, e4m3, 2, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -12.0f);
  EXPECT_EQ(MlxFloatScale(MlxFloatMode::kMxfp8, 0), std::ldexp(1.0f, -127));
  EXPECT_EQ(MlxFloatScale(MlxFloatMode::kMxfp4, 255), INFINITY);
  EXPECT_TRUE(std::isnan(MlxFloatScale(MlxFloatMode::kNvfp4, 0x7F)));
}

INSTANTIATE_TEST_SUITE_P(Levels, MlxKernelsLevelTest,
                         ::testing::Values(DecodeSimd::kScalar,
                                           DecodeSimd::kAvx2,
                                           DecodeSimd::kAvx512),
                         [](const auto& info) {
                           return info.param == DecodeSimd::kScalar ? "Scalar"
                                  : info.param == DecodeSimd::kAvx2 ? "Avx2"
                                                                    : "Avx512";
                         });

}  // namespace
}  // namespace tensormorph::mlx_kernels_test
