// The diff's per-element kernel, run by run: the dispatched fast path agrees
// with the scalar reference on random inputs, including the awkward values.
#include "core/diff/error_pass.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/same_bits.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::SameBits;

struct Input {
  std::vector<float> values;
  std::vector<QuantRun> runs;
  std::vector<float> x;
};

// Runs of 1 to 40 elements (so both the vector loop and the tails run) with a
// random scale; a few exact hits, zeros, zero-step runs, clipped sources,
// repeated maxima and NaN sources mixed in.
Input RandomInput(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Input in;
  in.values.resize(n);
  in.x.resize(n);
  for (int64_t i = 0, g = 0; i < n; ++g) {
    const int64_t len = std::min<int64_t>(n - i, 1 + rng() % 40);
    const double step = g % 17 == 5 ? 0.0 : 0.01 * (1 + g % 7);
    in.runs.push_back({len, g, step, g % 3 == 0 ? step * 1.5 : step,
                       -127 * step, 127 * step});
    for (const int64_t end = i + len; i < end; ++i) {
      float& value = in.values[i];
      value = static_cast<float>(step * std::round(u(rng) * 100));
      switch (rng() % 16) {
        case 0:
          in.x[i] = value;
          break;  // exact
        case 1:
          in.x[i] = 0;
          break;  // pruned
        case 2:
          in.x[i] = static_cast<float>(200 * step + 1e-3);
          break;
        case 3:
          in.x[i] = 0.75f;
          value = 0.5f;
          break;  // repeated maximum
        case 4:
          in.x[i] = std::numeric_limits<float>::quiet_NaN();
          break;
        default:
          in.x[i] = value + static_cast<float>(step * u(rng));
          break;
      }
    }
  }
  return in;
}

TEST(ErrorPassTest, FastPathAgreesWithTheScalarReference) {
  for (int64_t n : {0, 1, 3, 4, 5, 31, 1000, 4099}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " seed=" << seed);
      const Input in = RandomInput(n, seed);
      std::vector<double> es_ref(n), es_fast(n);
      ErrorSums ref, fast;
      // Two calls each, so state carried between chunks is covered too.
      const size_t half_runs = in.runs.size() / 2;
      int64_t half = 0;
      for (size_t r = 0; r < half_runs; ++r) half += in.runs[r].count;
      const size_t rest = in.runs.size() - half_runs;
      AccumulateErrorsScalar(in.values.data(), in.runs.data(), half_runs,
                             in.x.data(), 100, es_ref.data(), &ref);
      AccumulateErrorsScalar(
          in.values.data() + half, in.runs.data() + half_runs, rest,
          in.x.data() + half, 100 + half, es_ref.data() + half, &ref);
      AccumulateErrors(in.values.data(), in.runs.data(), half_runs, in.x.data(),
                       100, es_fast.data(), &fast);
      AccumulateErrors(in.values.data() + half, in.runs.data() + half_runs,
                       rest, in.x.data() + half, 100 + half,
                       es_fast.data() + half, &fast);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(SameBits(es_ref[i], es_fast[i]))
            << "element " << i << ": " << es_ref[i] << " vs " << es_fast[i];
      }
      EXPECT_EQ(fast.max_abs_err, ref.max_abs_err);
      EXPECT_EQ(fast.max_abs_err_index, ref.max_abs_err_index);
      EXPECT_EQ(fast.max_err_steps, ref.max_err_steps);
      EXPECT_EQ(fast.above_half_step, ref.above_half_step);
      EXPECT_EQ(fast.clipped, ref.clipped);
      EXPECT_EQ(fast.source_zeros, ref.source_zeros);
      EXPECT_EQ(fast.decoded_zeros, ref.decoded_zeros);
      EXPECT_EQ(fast.induced_zeros, ref.induced_zeros);
      // Sums: NaN sources make them NaN in both; otherwise only the order of
      // additions differs.
      for (auto [a, b] : {std::pair{fast.sum_sq_err, ref.sum_sq_err},
                          {fast.sum_abs_err, ref.sum_abs_err},
                          {fast.sum_xx, ref.sum_xx},
                          {fast.sum_hh, ref.sum_hh},
                          {fast.sum_xh, ref.sum_xh}}) {
        if (std::isnan(b)) {
          EXPECT_TRUE(std::isnan(a));
        } else {
          EXPECT_NEAR(a, b, 1e-12 * std::max(1.0, std::fabs(b)));
        }
      }
    }
  }
}

TEST(ErrorPassTest, TheFirstOfEqualMaximaIsReported) {
  std::vector<float> values(12, 0), x(12, 0);
  const std::vector<QuantRun> runs = {{12, 0, 1, 1, -10, 10}};
  x[9] = 3;
  x[6] = 3;  // same error, earlier, in another lane
  x[2] = 2;
  std::vector<double> es(12);
  ErrorSums s;
  AccumulateErrors(values.data(), runs.data(), 1, x.data(), 0, es.data(), &s);
  EXPECT_EQ(s.max_abs_err, 3);
  EXPECT_EQ(s.max_abs_err_index, 6);
  EXPECT_EQ(s.max_err_steps, 3);
}

TEST(ErrorPassTest, AZeroStepMissedIsInfinitelyManySteps) {
  QuantRun e;
  EXPECT_EQ(ErrorInSteps(1, 1, e), 0) << "an exact hit costs nothing";
  EXPECT_TRUE(std::isinf(ErrorInSteps(2, 1, e)));
  e.step_above = 0.5;
  EXPECT_EQ(ErrorInSteps(2, 1, e), 2) << "above: the step towards the source";
  e.step_below = 0.25;
  EXPECT_EQ(ErrorInSteps(0.5, 1, e), 2) << "below: the step below";
}

}  // namespace
}  // namespace tensormorph
