// HQQ's decode kernels: at every vector level the CPU runs, the group and
// column kernels give the scalar references' bits on random codes (bytes at
// every shift, 3-bit int32 words) and random scales and zeros of the compute
// dtype: ordinary ones, zeros either side of HqqFloatExact's bounds,
// subnormals, NaN, infinities and signed zeros; over ragged group edges.
#include "core/quant/hqq_kernels.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/quant/decode_simd.h"
#include "core/quant/hqq_fp16_kernels.h"
#include "gtest/gtest.h"
#include "tests/support/quantize.h"
#include "tests/support/same_bits.h"

namespace tensormorph::hqq_kernels_test {
namespace {

using ::tensormorph::testing::SameBits;

// A scale or zero in `t`: mostly of the magnitudes HQQ stores, else from
// the edges the fast paths must leave to the reference.
float Param(std::mt19937& rng, DType t, bool zero) {
  static const float kEdges[] = {
      0.0f,       -0.0f,    NAN,       INFINITY,  -INFINITY, 0x1p-6f, 0x1p-7f,
      -0x1.8p-7f, 0x1p-9f,  0x1p-10f,  0x1p-22f,  0x1p-23f,  0x1p23f, -0x1p23f,
      0x1.fep22f, 0x1p-24f, 0x1p-126f, 0x1p-127f, 0x1p-133f, 3e-39f,  65504.0f,
      -65504.0f,  1e-30f,   1e30f,     0x1p-149f, 7.5f,      -2.25f,  300.0f};
  float x;
  const uint32_t u = rng();
  if (u % 4 == 0) {
    x = kEdges[rng() % std::size(kEdges)];
  } else if (u % 4 == 1) {
    const uint32_t b = rng();  // any bits: every binade
    std::memcpy(&x, &b, 4);
  } else {
    std::uniform_real_distribution<float> d(zero ? -2.0f : -0.05f,
                                            zero ? 17.0f : 0.05f);
    x = d(rng);
  }
  return static_cast<float>(RoundToDType(x, t));
}

struct Layout {
  int bits;
  int word_bytes;
  int shift;
};

// Every packing's words and shifts: u8 slices from the top bits, one code
// a byte for 5 to 8 bits, 3-bit slices in an int32.
std::vector<Layout> Layouts() {
  std::vector<Layout> out;
  for (int bits : {1, 2, 4}) {
    for (int j = 0; j < 8 / bits; ++j)
      out.push_back({bits, 1, 8 - bits * (j + 1)});
  }
  for (int bits : {5, 6, 8}) out.push_back({bits, 1, 0});
  for (int j = 0; j < 10; ++j) out.push_back({3, 4, 27 - 3 * j});
  return out;
}

class HqqKernelsLevelTest : public ::testing::TestWithParam<DecodeSimd> {
 protected:
  void SetUp() override {
    if (SupportedDecodeSimd() < GetParam()) GTEST_SKIP() << "not on this CPU";
    CapDecodeSimdForTesting(GetParam());
  }
  void TearDown() override { CapDecodeSimdForTesting(DecodeSimd::kAvx512); }
};

TEST_P(HqqKernelsLevelTest, GroupKernelGivesTheScalarBits) {
  std::mt19937 rng(30);
  for (DType t : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (const Layout& l : Layouts()) {
      for (int64_t run : {64, 128, 16, 50, 7}) {
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(t) << " " << l.bits << "-bit shift "
                     << l.shift << " run " << run);
        const int64_t skip = rng() % run, n = 12 * run + 5;
        std::vector<uint8_t> words(static_cast<size_t>(n * l.word_bytes));
        for (uint8_t& b : words) b = static_cast<uint8_t>(rng());
        const int64_t groups = (n + skip) / run + 1;
        std::vector<float> s(groups), z(groups);
        for (int64_t g = 0; g < groups; ++g) {
          s[g] = Param(rng, t, false);
          z[g] = Param(rng, t, true);
        }
        const HqqCodes codes{.data = words.data(),
                             .word_bytes = l.word_bytes,
                             .shift = l.shift,
                             .bits = l.bits};
        const Runs runs{.run = run, .skip = skip};
        std::vector<float> fast(n), ref(n);
        HqqDecodeGroups(codes, n, runs, s.data(), z.data(), t, fast.data());
        HqqDecodeGroupsScalar(codes, n, runs, s.data(), z.data(), t,
                              ref.data());
        ASSERT_TRUE(SameBits(fast, ref));
      }
    }
  }
}

TEST_P(HqqKernelsLevelTest, ColumnKernelGivesTheScalarBits) {
  std::mt19937 rng(31);
  for (DType t : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (const Layout& l : Layouts()) {
      for (int64_t n : {1000, 37, 16, 8, 3}) {
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(t) << " " << l.bits << "-bit shift "
                     << l.shift << " n " << n);
        std::vector<uint8_t> words(static_cast<size_t>(n * l.word_bytes));
        for (uint8_t& b : words) b = static_cast<uint8_t>(rng());
        std::vector<float> s(n), z(n);
        for (int64_t i = 0; i < n; ++i) {
          s[i] = Param(rng, t, false);
          z[i] = Param(rng, t, true);
        }
        const HqqCodes codes{.data = words.data(),
                             .word_bytes = l.word_bytes,
                             .shift = l.shift,
                             .bits = l.bits};
        // As float32, and as stored in t (rows of t's values).
        const int64_t width = t == DType::kF32 ? 4 : 2;
        std::vector<uint8_t> s_t(width * n), z_t(width * n);
        for (int64_t i = 0; i < n; ++i) {
          uint32_t sb, zb;
          std::memcpy(&sb, &s[i], 4);
          std::memcpy(&zb, &z[i], 4);
          if (t == DType::kF16) {
            sb = testing::F32ToF16Bits(s[i]);
            zb = testing::F32ToF16Bits(z[i]);
          } else if (t == DType::kBF16) {
            sb >>= 16;
            zb >>= 16;
          }
          std::memcpy(&s_t[width * i], &sb, width);
          std::memcpy(&z_t[width * i], &zb, width);
        }
        const auto* sp = reinterpret_cast<const uint8_t*>(s.data());
        const auto* zp = reinterpret_cast<const uint8_t*>(z.data());
        const HqqParamRow s32{.data = sp, .dtype = DType::kF32};
        const HqqParamRow z32{.data = zp, .dtype = DType::kF32};
        const HqqParamRow st{.data = s_t.data(), .dtype = t};
        const HqqParamRow zt{.data = z_t.data(), .dtype = t};
        std::vector<float> fast(n), ref(n), stored(n);
        HqqDecodeColumns(codes, n, s32, z32, t, fast.data());
        HqqDecodeColumns(codes, n, st, zt, t, stored.data());
        HqqDecodeColumnsScalar(codes, n, s32, z32, t, ref.data());
        ASSERT_TRUE(SameBits(fast, ref));
        ASSERT_TRUE(SameBits(stored, ref));
      }
    }
  }
}

// The float16-arithmetic column path (AVX512-FP16, where the CPU has it and
// the level allows it): every float16 scale and zero kind (subnormals,
// infinities, NaN, overflowing products), every shift of the u8 packings,
// lengths ending inside a 32-element step, against the reference.
TEST_P(HqqKernelsLevelTest, Fp16ColumnPathGivesTheScalarBitsWhereTaken) {
  std::mt19937 rng(32);
  for (int bits : {1, 2, 4, 8}) {
    for (int shift = 0; shift + bits <= 8; shift += bits) {
      for (int64_t n : {4096, 1000, 33, 31, 1}) {
        SCOPED_TRACE(::testing::Message()
                     << bits << "-bit shift " << shift << " n " << n);
        std::vector<uint8_t> words(n), s16(2 * n), z16(2 * n);
        for (uint8_t& b : words) b = static_cast<uint8_t>(rng());
        std::vector<float> s(n), z(n);
        for (int64_t i = 0; i < n; ++i) {
          const uint16_t sb =
              testing::F32ToF16Bits(Param(rng, DType::kF16, false));
          const uint16_t zb =
              testing::F32ToF16Bits(Param(rng, DType::kF16, true));
          std::memcpy(&s16[2 * i], &sb, 2);
          std::memcpy(&z16[2 * i], &zb, 2);
          s[i] = F16ToF32(sb);
          z[i] = F16ToF32(zb);
        }
        const HqqCodes codes{.data = words.data(),
                             .word_bytes = 1,
                             .shift = shift,
                             .bits = bits};
        std::vector<float> fast(n, -1.0f), ref(n);
        const bool taken =
            HqqDecodeColumnsFp16(codes, n, s16.data(), z16.data(), fast.data());
        ASSERT_EQ(taken, GetParam() == DecodeSimd::kAvx512 &&
                             __builtin_cpu_supports("avx512fp16"));
        if (!taken) continue;
        HqqDecodeColumnsScalar(
            codes, n,
            {.data = reinterpret_cast<const uint8_t*>(s.data()),
             .dtype = DType::kF32},
            {.data = reinterpret_cast<const uint8_t*>(z.data()),
             .dtype = DType::kF32},
            DType::kF16, ref.data());
        ASSERT_TRUE(SameBits(fast, ref));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, HqqKernelsLevelTest,
                         ::testing::Values(DecodeSimd::kScalar,
                                           DecodeSimd::kAvx2,
                                           DecodeSimd::kAvx512),
                         [](const auto& info) {
                           switch (info.param) {
                             case DecodeSimd::kScalar:
                               return std::string("Scalar");
                             case DecodeSimd::kAvx2:
                               return std::string("Avx2");
                             default:
                               return std::string("Avx512");
                           }
                         });

// Where HqqFloatExact says float32 is exact, it is: every code of every
// edge pair gives the reference's value through float32 arithmetic.
TEST(HqqKernelsTest, FloatExactGroupsComputeTheReferenceInFloat32) {
  std::mt19937 rng(32);
  int exact = 0;
  for (DType t : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (int trial = 0; trial < 20000; ++trial) {
      const float s = Param(rng, t, false), z = Param(rng, t, true);
      if (!HqqFloatExact(s, z, t)) continue;
      ++exact;
      for (uint32_t c = 0; c < 256; ++c) {
        const float level =
            static_cast<float>(RoundToDType(static_cast<float>(c) - z, t));
        const float v = static_cast<float>(RoundToDType(level * s, t));
        ASSERT_TRUE(SameBits(v, HqqValue(c, s, z, t)))
            << DTypeName(t) << " s " << s << " z " << z << " code " << c;
      }
    }
  }
  EXPECT_GT(exact, 10000);
}

}  // namespace
}  // namespace tensormorph::hqq_kernels_test
