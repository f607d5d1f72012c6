// BinEdges gives Binner's bins, bit for bit, at every SIMD level: on floats
// at and beside every bin edge, on random bit patterns (specials,
// subnormals, values far outside the range), for ranges of every kind, and
// through each of its paths (one value, sixteen levels, a short and a long
// Add).
#include "core/stats_bins.h"

#include <bit>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/quant/decode_simd.h"
#include "gtest/gtest.h"
#include "tests/support/simd_levels.h"

namespace tensormorph {
namespace {

struct Range {
  double min, max;
  int bins;
};

// Ranges as ComputeStats meets them: a tensor's own [min, max] (of any
// sign and scale), a narrower one given by the caller (most values clamp),
// one far from the values, a single bin, more bins than the vector path
// takes, a width near float's smallest, and ones BinEdges leaves to Binner
// (no width, an infinite bound, too many bins).
std::vector<Range> Ranges() {
  return {{-0.0625, 0.0625, 64},
          {-3.5, 11.25, 64},
          {0.0, 1.0, 1},
          {-1.0, 1.0, 2},
          {-0.5, 0.25, 37},
          {1e-3, 1e-3 + 64 * 1e-9, 64},
          {-1e30, 1e30, 64},
          {1e20, 2e20, 64},
          {-2.0, -1.0, 65},
          {-1.0, 1.0, 100},
          {-1.0, 1.0, 4096},
          {0.0, 1e-40, 64},
          // Bins narrower than the floats there (several bins hold no
          // float), and the same with many bins far from zero: estimates
          // in float too coarse for the table, so Binner's own.
          {1.0, 1.0 + 1e-9, 64},
          {1e6 + 0.03, 1e6 + 0.1, 4096},
          {0.5, 0.5, 64},
          {-std::numeric_limits<double>::infinity(), 1.0, 64},
          {-1.0, 1.0, 5000}};
}

// Every float Bin can tell apart from its neighbours near the range: each
// edge (the least float of a bin, found by walking) and the floats on
// either side of it, the range's ends, zeros of both signs, then random
// bit patterns of every kind and values spread across the range.
std::vector<float> Values(const Binner& binner, uint32_t seed) {
  std::vector<float> v = {
      0.0f,
      -0.0f,
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::quiet_NaN(),
      FLT_MAX,
      -FLT_MAX,
      FLT_MIN,
      -FLT_MIN,
      std::numeric_limits<float>::denorm_min(),
      static_cast<float>(binner.min()),
      static_cast<float>(binner.min() + binner.width() * binner.bins())};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> across(-0.25, binner.bins() + 0.25);
  for (int i = 0; i < 20000; ++i) {
    const double x = binner.min() + across(rng) * binner.width();
    const float f = static_cast<float>(x);
    v.push_back(f);
    // Around the edge nearest x: a few floats up and down.
    float g = f;
    for (int k = 0; k < 3; ++k) {
      g = std::nextafter(g, std::numeric_limits<float>::infinity());
      v.push_back(g);
    }
    g = f;
    for (int k = 0; k < 3; ++k) {
      g = std::nextafter(g, -std::numeric_limits<float>::infinity());
      v.push_back(g);
    }
  }
  for (int i = 0; i < 20000; ++i)
    v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  // Every edge itself, where the range has floats enough to find it.
  if (binner.Exact()) {
    for (int j = 1; j < binner.bins() && j < 128; ++j) {
      float f = static_cast<float>(binner.min() + j * binner.width());
      if (!std::isfinite(f)) continue;
      for (int k = 0; k < 64 && binner.Bin(f) >= j; ++k)
        f = std::nextafter(f, -std::numeric_limits<float>::infinity());
      for (int k = 0; k < 64 && binner.Bin(f) < j; ++k)
        f = std::nextafter(f, std::numeric_limits<float>::infinity());
      v.insert(v.end(),
               {std::nextafter(f, -FLT_MAX), f, std::nextafter(f, FLT_MAX)});
    }
  }
  return v;
}

TEST(BinEdgesTest, EveryValueGetsBinnersBin) {
  for (const Range& r : Ranges()) {
    const Binner binner(r.min, r.max, r.bins);
    const std::vector<float> v = Values(binner, 7);
    for (DecodeSimd level : testing::SupportedSimdLevels()) {
      SCOPED_TRACE(absl::StrCat("range [", r.min, ", ", r.max, "] bins ",
                                r.bins, " simd ", static_cast<int>(level)));
      const BinEdges edges(binner, level, int64_t{1} << 30);
      for (float f : v) {
        if (!std::isfinite(f)) continue;
        ASSERT_EQ(edges.Bin(f), binner.Bin(f))
            << "value " << f << " bits " << std::bit_cast<uint32_t>(f);
      }
      // Bin16: a non-finite value's bin is the spare one past the last.
      auto want = [&](float f) {
        return std::isfinite(f) ? binner.Bin(f) : binner.bins();
      };
      for (size_t i = 0; i + 16 <= v.size(); i += 16) {
        int32_t out[16];
        edges.Bin16(v.data() + i, out);
        for (int k = 0; k < 16; ++k) {
          ASSERT_EQ(out[k], want(v[i + k])) << "value " << v[i + k];
        }
      }
      // Runs side by side, a batch a call.
      const int runs = static_cast<int>(v.size() / 16);
      ASSERT_GE(runs, 2);
      std::vector<int32_t> batch(16 * static_cast<size_t>(runs));
      edges.Bin16(v.data(), batch.data(), runs);
      for (int i = 0; i < 16 * runs; ++i) {
        ASSERT_EQ(batch[i], want(v[i])) << "value " << v[i];
      }
    }
  }
}

TEST(BinEdgesTest, AddCountsWhatBinnerAddCounts) {
  for (const Range& r : Ranges()) {
    const Binner binner(r.min, r.max, r.bins);
    const std::vector<float> v = Values(binner, 11);
    std::vector<int64_t> want(r.bins, 0);
    binner.Add(v.data(), static_cast<int64_t>(v.size()), want.data());
    for (DecodeSimd level : testing::SupportedSimdLevels()) {
      // A long call (pairs of bins counted at once with AVX-512), short
      // ones (one value at a time), and an odd tail.
      for (int64_t piece : {int64_t{1} << 20, int64_t{100}, int64_t{8197}}) {
        SCOPED_TRACE(absl::StrCat("range [", r.min, ", ", r.max, "] bins ",
                                  r.bins, " simd ", static_cast<int>(level),
                                  " piece ", piece));
        const BinEdges edges(binner, level, static_cast<int64_t>(v.size()));
        std::vector<int64_t> got(r.bins, 0);
        for (size_t i = 0; i < v.size(); i += static_cast<size_t>(piece)) {
          const int64_t n =
              std::min<int64_t>(piece, static_cast<int64_t>(v.size() - i));
          edges.Add(v.data() + i, n, got.data());
        }
        EXPECT_EQ(got, want);
      }
    }
  }
}

// The fast paths run where they should: the table at every level for a
// tensor's own range of 64 bins, in vectors where the CPU has them; Binner
// itself for few values (the table would cost more than they do), past
// kMaxBins, and where float cannot estimate a bin within one.
TEST(BinEdgesTest, EachPathRunsWhereItShould) {
  const Binner own(-0.0625, 0.0625, 64);
  const int64_t many = int64_t{1} << 20;
  for (DecodeSimd level : testing::SupportedSimdLevels()) {
    const char* want = level == DecodeSimd::kAvx512 ? "avx512"
                       : level == DecodeSimd::kAvx2 ? "avx2"
                                                    : "scalar";
    EXPECT_STREQ(BinEdges(own, level, many).PathForTesting(), want);
  }
  EXPECT_STREQ(BinEdges(Binner(-1.0, 1.0, 100), DecodeSimd::kAvx512, many)
                   .PathForTesting(),
               "scalar");
  EXPECT_STREQ(BinEdges(own, DecodeSimd::kAvx512, 100).PathForTesting(),
               "binner");
  EXPECT_STREQ(
      BinEdges(Binner(-1.0, 1.0, 5000), DecodeSimd::kAvx512, int64_t{1} << 30)
          .PathForTesting(),
      "binner");
  EXPECT_STREQ(BinEdges(Binner(1e6 + 0.03, 1e6 + 0.1, 4096),
                        DecodeSimd::kAvx512, int64_t{1} << 30)
                   .PathForTesting(),
               "binner");
}

}  // namespace
}  // namespace tensormorph
