// MLX's decode kernels: the vector paths give the scalar references' bits
// on random codes and parameters (NaN, infinities, overflow, subnormals and
// ragged group edges included), and the roundings are IEEE round to nearest
// even (checked against the tests' own converters).
#include "core/quant/mlx_kernels.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/quant/decode_simd.h"
#include "core/quant/float_formats.h"
#include "gtest/gtest.h"
#include "tests/support/quantize.h"

namespace tensormorph {
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

INSTANTIATE_TEST_SUITE_P(Levels, MlxKernelsLevelTest,
                         ::testing::Values(DecodeSimd::kAvx2,
                                           DecodeSimd::kAvx512),
                         [](const auto& info) {
                           return info.param == DecodeSimd::kAvx2 ? "Avx2"
                                                                  : "Avx512";
                         });

}  // namespace
}  // namespace tensormorph
