// CountRun, CountSpecials and AnyFloat16Special: the AVX2 pass counts
// exactly what the scalar reference counts, on ordinary values and on runs
// holding NaN, Inf, values past fp16, signed zeros and values on the end
// levels.
#include "core/check/run_counts.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace tensormorph {
namespace {

void ExpectSame(const RunCounts& a, const RunCounts& b) {
  EXPECT_EQ(a.nan, b.nan);
  EXPECT_EQ(a.inf, b.inf);
  EXPECT_EQ(a.zeros, b.zeros);
  EXPECT_EQ(a.differ, b.differ);
  EXPECT_EQ(a.at_low, b.at_low);
  EXPECT_EQ(a.at_high, b.at_high);
  EXPECT_EQ(a.over, b.over);
}

class SimdOn {
 public:
  SimdOn() : was_(RunCountsSimd()) { SetRunCountsSimd(true); }
  ~SimdOn() { SetRunCountsSimd(was_); }

 private:
  bool was_;
};

// Values on a 16-level grid over [lo, hi], with `special` of them replaced
// by NaN, +-Inf, values past fp16 or signed zeros.
std::vector<float> GridValues(std::mt19937& rng, int64_t n, float lo, float hi,
                              int special) {
  std::uniform_int_distribution<int> level(0, 15);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = lo + (hi - lo) * static_cast<float>(level(rng)) / 15;
  const float odd[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       70000.0f,
                       -65505.0f,
                       65504.0f,
                       0.0f,
                       -0.0f};
  std::uniform_int_distribution<int64_t> at(0, n - 1);
  std::uniform_int_distribution<int> which(0, 7);
  for (int k = 0; k < special && n > 0; ++k) v[at(rng)] = odd[which(rng)];
  return v;
}

TEST(CountRun, AgreesWithTheScalarPassOnEveryRunLength) {
  SimdOn simd;
  std::mt19937 rng(21);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 7, 8, 9, 31, 32, 33, 64, 128, 255, 1000, 4096}) {
    for (int special : {0, 1, 5}) {
      const std::vector<float> v = GridValues(rng, n, -0.5f, 0.25f, special);
      const float levels[][2] = {
          {-0.5f, 0.25f}, {nan, nan}, {-inf, inf}, {0.0f, 0.25f}, {0.0f, 0.0f}};
      for (const auto& [lo, hi] : levels) {
        for (float first : {v[0], 0.0f, -0.0f, nan}) {
          SCOPED_TRACE(::testing::Message()
                       << "n=" << n << " special=" << special << " lo=" << lo
                       << " first=" << first);
          ExpectSame(CountRun(v.data(), n, first, lo, hi),
                     CountRunScalar(v.data(), n, first, lo, hi));
        }
      }
    }
  }
}

TEST(CountRun, CountsAGroupOfOneValue) {
  SimdOn simd;
  const std::vector<float> v(32, 0.125f);
  const RunCounts c = CountRun(v.data(), 32, 0.125f, 0.125f, 0.125f);
  EXPECT_EQ(c.differ, 0);
  EXPECT_EQ(c.zeros, 0);
  EXPECT_EQ(c.at_low, 32);
  EXPECT_EQ(c.at_high, 32);
}

TEST(CountSpecials, AgreesWithTheScalarPassOnNanInfAndOverF16) {
  SimdOn simd;
  std::mt19937 rng(4);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n : {1, 8, 31, 32, 40, 1000, 262144}) {
    for (int special : {0, 1, 3, 50}) {
      const std::vector<float> v = GridValues(rng, n, -2.0f, 2.0f, special);
      const RunCounts a = CountSpecials(v.data(), n);
      const RunCounts b = CountRunScalar(v.data(), n, 0, nan, nan);
      EXPECT_EQ(a.nan, b.nan) << n << " " << special;
      EXPECT_EQ(a.inf, b.inf) << n << " " << special;
      EXPECT_EQ(a.over, b.over) << n << " " << special;
    }
  }
}

// One special code planted at every position of codes of every length up
// to 200 (the vector steps and the tail), and the codes just below each
// limit: what the decoded values' CountSpecials would count anything for.
TEST(AnyFloat16Special, FindsEveryPlantedSpecialCodeAsTheScalarPassDoes) {
  SimdOn simd;
  struct Kind {
    uint16_t limit, special, largest_ordinary;
  };
  const std::vector<Kind> kinds = {
      {kF16SpecialLimit, 0x7c00, 0x7bff},    // F16 +Inf, 65504
      {kF16SpecialLimit, 0xfe00, 0xfbff},    // F16 NaN, -65504
      {kBF16SpecialLimit, 0x4780, 0x477f},   // BF16 65536, 65280
      {kBF16SpecialLimit, 0xff80, 0xc77f},   // BF16 -Inf, -65280
      {kBF16SpecialLimit, 0x7fc1, 0x3f80}};  // BF16 NaN, 1.0
  for (const Kind& k : kinds) {
    for (int64_t n = 0; n <= 200; ++n) {
      std::vector<uint8_t> codes(static_cast<size_t>(2 * n));
      for (int64_t i = 0; i < n; ++i) {
        codes[2 * i] = k.largest_ordinary & 0xff;
        codes[2 * i + 1] = k.largest_ordinary >> 8;
      }
      EXPECT_FALSE(AnyFloat16Special(codes.data(), n, k.limit));
      EXPECT_FALSE(AnyFloat16SpecialScalar(codes.data(), n, k.limit));
      for (int64_t at = 0; at < n; ++at) {
        std::vector<uint8_t> c = codes;
        c[2 * at] = k.special & 0xff;
        c[2 * at + 1] = k.special >> 8;
        EXPECT_TRUE(AnyFloat16Special(c.data(), n, k.limit)) << n << " " << at;
        EXPECT_TRUE(AnyFloat16SpecialScalar(c.data(), n, k.limit));
      }
    }
  }
}

TEST(MarkOrdinaryRuns, MarksOnlyWholeGroupsNoValueRuleFiresOn) {
  std::mt19937 rng(9);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (bool simd : {true, false}) {
    const bool was = RunCountsSimd();
    SetRunCountsSimd(simd);
    for (int64_t len : {8, 12, 32, 128}) {
      std::vector<float> v;
      std::vector<QuantRun> runs;
      for (int64_t g = 0; g < 72; ++g) {
        float l = -0.5f, h = 0.25f;
        int64_t count = len;
        switch (g % 9) {
          case 1:
            l = nan;
            break;
          case 2:
            h = inf;
            break;
          case 3:
            h = l;
            break;
          case 8:
            count = len / 2;  // part of a group: never marked
            break;
          default:
            break;
        }
        std::vector<float> x =
            GridValues(rng, count, -0.5f, 0.25f, g % 9 == 4 ? 2 : 0);
        if (g % 9 == 5) x.assign(count, 0.0f);    // all zero
        if (g % 9 == 6) x.assign(count, 0.125f);  // constant
        if (g % 9 == 7) {                         // saturated
          for (int64_t k = 0; k < count; k += 2) x[k] = (k % 4) ? l : h;
        }
        v.insert(v.end(), x.begin(), x.end());
        QuantRun r;
        r.count = count;
        r.group = g;
        r.range_min = l;
        r.range_max = h;
        runs.push_back(r);
      }
      std::vector<uint8_t> ordinary(runs.size(), 9);
      MarkOrdinaryRuns(v.data(), runs.data(), static_cast<int64_t>(runs.size()),
                       len, ordinary.data());
      const float* x = v.data();
      for (size_t g = 0; g < runs.size(); x += runs[g].count, ++g) {
        const float lo = static_cast<float>(runs[g].range_min);
        const float hi = static_cast<float>(runs[g].range_max);
        const RunCounts c = CountRunScalar(x, runs[g].count, x[0], lo, hi);
        const bool quiet = runs[g].count == len && std::isfinite(lo) &&
                           std::isfinite(hi) && lo != hi && c.nan == 0 &&
                           c.inf == 0 && c.over == 0 && c.zeros < len &&
                           c.differ > 0 && 4 * (c.at_low + c.at_high) <= len;
        EXPECT_EQ(ordinary[g], quiet ? 1 : 0)
            << "simd=" << simd << " len=" << len << " run " << g;
      }
    }
    SetRunCountsSimd(was);
  }
}

// Whether CountRunScalar over the run shows nothing a value rule fires on:
// what MarkOrdinaryRuns must mark, exactly.
bool Quiet(const float* x, const QuantRun& r, int64_t len) {
  const float lo = static_cast<float>(r.range_min);
  const float hi = static_cast<float>(r.range_max);
  const RunCounts c = CountRunScalar(x, r.count, x[0], lo, hi);
  return r.count == len && std::isfinite(lo) && std::isfinite(hi) && lo != hi &&
         c.nan == 0 && c.inf == 0 && c.over == 0 && c.zeros < len &&
         c.differ > 0 && 4 * (c.at_low + c.at_high) <= len;
}

TEST(MarkOrdinaryRuns, GroupsOfThirtyTwosAgreeWithTheReferenceOnPlantedGroups) {
  // The pass for lengths that are multiples of 32, on groups built near
  // each edge of its conditions: end levels at zero, a quarter of the
  // values on the end levels and one more, a special value at every
  // position, the first value special, signed zeros, 65504 and the float
  // after it.
  std::mt19937 rng(32);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float odd[] = {nan,      inf,       -inf,
                       65504.0f, -65504.0f, std::nextafter(65504.0f, inf),
                       65505.0f, 0.0f,      -0.0f};
  for (bool simd : {true, false}) {
    const bool was = RunCountsSimd();
    SetRunCountsSimd(simd);
    for (int64_t len : {32, 64, 96, 128}) {
      std::vector<float> v;
      std::vector<QuantRun> runs;
      for (int64_t g = 0; g < 600; ++g) {
        float l = -0.5f, h = 0.25f;
        if (g % 5 == 1) l = 0.0f;
        if (g % 5 == 2) h = 0.0f;
        if (g % 5 == 3) {
          l = -65504.0f;
          h = 65504.0f;
        }
        std::vector<float> x = GridValues(rng, len, l, h, 0);
        switch (g % 11) {
          case 1:  // a special value anywhere
            x[static_cast<size_t>(g / 11 % len)] = odd[g % 9];
            break;
          case 2:  // the first special
            x[0] = odd[g / 11 % 9];
            break;
          case 3:    // exactly a quarter on the end levels
          case 4: {  // and one more
            for (float& y : x) y = l + (h - l) * 7 / 15;
            const int64_t ends = len / 4 + (g % 11 == 4);
            for (int64_t k = 0; k < ends; ++k) x[k * 3 % len] = k % 2 ? l : h;
            break;
          }
          case 5:  // signed zeros only
            for (size_t k = 0; k < x.size(); ++k) x[k] = k % 2 ? 0.0f : -0.0f;
            break;
          case 6:  // constant but one value
            x.assign(len, h);
            x[static_cast<size_t>(g / 11 % len)] = l;
            break;
          case 7:  // constant
            x.assign(len, l);
            break;
          default:
            break;
        }
        v.insert(v.end(), x.begin(), x.end());
        QuantRun r;
        r.count = len;
        r.group = g;
        r.range_min = l;
        r.range_max = h;
        runs.push_back(r);
      }
      std::vector<uint8_t> ordinary(runs.size(), 9);
      MarkOrdinaryRuns(v.data(), runs.data(), static_cast<int64_t>(runs.size()),
                       len, ordinary.data());
      int64_t marked = 0;
      const float* x = v.data();
      for (size_t g = 0; g < runs.size(); x += runs[g].count, ++g) {
        EXPECT_EQ(ordinary[g], Quiet(x, runs[g], len) ? 1 : 0)
            << "simd=" << simd << " len=" << len << " run " << g;
        marked += ordinary[g];
      }
      // Both answers occur, so both were tested.
      EXPECT_GT(marked, 100);
      EXPECT_LT(marked, 500);
    }
    SetRunCountsSimd(was);
  }
}

}  // namespace
}  // namespace tensormorph
