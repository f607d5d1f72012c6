// CountCodes and CountQ4KBlock: the counts of 4-bit codes at every SIMD
// level, whatever the length, reading nothing past the codes.
#include "core/stats_codes.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/quant/decode_simd.h"
#include "tests/support/simd_levels.h"

namespace tensormorph {
namespace {

TEST(CountCodesTest, EveryLevelCountsEachCodeOnce) {
  std::mt19937 rng(7);
  for (int64_t n : {0, 1, 15, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000}) {
    // The codes end where the buffer ends: nothing past n may be read.
    std::vector<uint8_t> c(static_cast<size_t>(n));
    uint32_t want[16] = {};
    for (uint8_t& x : c) {
      x = static_cast<uint8_t>(rng() % 16);
      ++want[x];
    }
    for (DecodeSimd level : testing::SupportedSimdLevels()) {
      SCOPED_TRACE(absl::StrCat("n ", n, " simd ", static_cast<int>(level)));
      uint32_t got[16];
      ASSERT_TRUE(CountCodes(c.data(), n, level, got));
      for (int k = 0; k < 16; ++k) EXPECT_EQ(got[k], want[k]) << "code " << k;
    }
  }
}

TEST(CountCodesTest, ACodeOfSixteenOrMoreIsRefusedWhereverItIs) {
  for (int64_t at : {0, 31, 32, 63, 64, 99}) {
    std::vector<uint8_t> c(100, 3);
    c[static_cast<size_t>(at)] = 16 + static_cast<uint8_t>(at % 200);
    for (DecodeSimd level : testing::SupportedSimdLevels()) {
      SCOPED_TRACE(absl::StrCat("at ", at, " simd ", static_cast<int>(level)));
      uint32_t got[16];
      EXPECT_FALSE(CountCodes(c.data(), 100, level, got));
    }
  }
}

TEST(CountCodesTest, BytesPastTheCodesAreNeitherCountedNorRefused) {
  // A run's codes end inside a longer buffer (the next run's codes, or
  // anything): a count of n codes looks at n bytes.
  std::vector<uint8_t> c(200, 0xff);
  for (int64_t n : {1, 31, 32, 33, 64, 100}) {
    std::fill(c.begin(), c.begin() + n, uint8_t{0});
    for (DecodeSimd level : testing::SupportedSimdLevels()) {
      SCOPED_TRACE(absl::StrCat("n ", n, " simd ", static_cast<int>(level)));
      uint32_t got[16];
      ASSERT_TRUE(CountCodes(c.data(), n, level, got));
      EXPECT_EQ(got[0], static_cast<uint32_t>(n));
      for (int k = 1; k < 16; ++k) EXPECT_EQ(got[k], 0u) << "code " << k;
    }
  }
}

TEST(CountCodesTest, EqualCodesAreAllCounted) {
  const std::vector<uint8_t> c(4096, 15);
  for (DecodeSimd level : testing::SupportedSimdLevels()) {
    uint32_t got[16];
    ASSERT_TRUE(CountCodes(c.data(), 4096, level, got));
    EXPECT_EQ(got[15], 4096u);
    EXPECT_EQ(got[0], 0u);
  }
}

TEST(CountQ4KBlockTest, EveryLevelCountsEachSubBlockApart) {
  // Sub-block 2j is the low nibbles of bytes [32j, 32j + 32), 2j + 1 their
  // high nibbles; each sub-block is given a skew of its own so that a
  // count given to the wrong sub-block shows.
  std::mt19937 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    uint8_t qs[128];
    uint32_t want[8][16] = {};
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo =
            static_cast<uint8_t>(rng() % 3 == 0 ? (2 * j) : rng() % 16);
        const uint8_t hi = static_cast<uint8_t>(
            rng() % 3 == 0 ? (2 * j + 9) % 16 : rng() % 16);
        qs[32 * j + l] = static_cast<uint8_t>(lo | hi << 4);
        ++want[2 * j][lo];
        ++want[2 * j + 1][hi];
      }
    }
    for (DecodeSimd level : testing::SupportedSimdLevels()) {
      SCOPED_TRACE(absl::StrCat("simd ", static_cast<int>(level)));
      uint32_t got[8][16];
      CountQ4KBlock(qs, level, got);
      for (int s = 0; s < 8; ++s) {
        for (int k = 0; k < 16; ++k) {
          ASSERT_EQ(got[s][k], want[s][k])
              << "sub-block " << s << " code " << k;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tensormorph
