// The diff's per-element kernel, run by run: the dispatched fast path agrees
// with the scalar reference on random inputs, including the awkward values.
#include "core/diff/error_pass.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/diff/error_element.h"
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
// random scale, two runs to a group, some runs in none; a few exact hits,
// zeros, zero-step runs, clipped sources, repeated maxima and NaN sources mixed
// in.
Input RandomInput(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Input in;
  in.values.resize(n);
  in.x.resize(n);
  for (int64_t i = 0, g = 0; i < n; ++g) {
    const int64_t len = std::min<int64_t>(n - i, 1 + rng() % 40);
    const double step = g % 17 == 5 ? 0.0 : 0.01 * (1 + g % 7);
    in.runs.push_back({len, g % 5 == 4 ? -1 : g / 2, step,
                       g % 3 == 0 ? step * 1.5 : step, -127 * step,
                       127 * step});
    // Bounds beyond half a step on some runs (as ApplyBound states them):
    // an f16 scale's slack, a min as origin, designed and unbounded clips.
    QuantRun& run = in.runs.back();
    switch (g % 4) {
      case 1:
        run.slack = 0.2 * step;
        run.slack_rel = 1e-3;
        run.origin = -127 * step;
        run.extra_above = 0.5;
        break;
      case 2:
        run.extra_below = run.extra_above = HUGE_VAL;
        break;
      case 3:
        run.bound = 0.6;
        run.extra_below = 0.5;
        break;
      default:
        break;
    }
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
        case 5:  // just past an end of the range
          in.x[i] = static_cast<float>((rng() % 2 ? 127.7 : -127.7) * step);
          value = static_cast<float>((in.x[i] > 0 ? 127 : -127) * step);
          break;
        case 6:  // a level or two off
          in.x[i] = value + static_cast<float>(step * (1 + rng() % 2));
          break;
        default:
          in.x[i] = value + static_cast<float>(step * u(rng));
          break;
      }
    }
  }
  return in;
}

using AccumulateFn = void (*)(const float*, const QuantRun*, size_t,
                              const float*, int64_t, double*, ErrorSums*,
                              GroupAcc*);

// The dispatched path, and the AVX2 one where the CPU has it (the dispatch
// takes AVX-512 where it can).
std::vector<AccumulateFn> FastPaths() {
  std::vector<AccumulateFn> fns = {&AccumulateErrors};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) {
    fns.push_back(&error_pass_internal::AccumulateErrorsAvx2);
  }
#endif
  return fns;
}

TEST(ErrorPassTest, FastPathAgreesWithTheScalarReference) {
  for (AccumulateFn fast_fn : FastPaths())
    for (int64_t n : {0, 1, 3, 4, 5, 31, 1000, 4099}) {
      for (uint32_t seed : {1u, 2u, 3u}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " seed=" << seed);
        const Input in = RandomInput(n, seed);
        std::vector<double> es_ref(n), es_fast(n);
        ErrorSums ref, fast;
        int64_t num_groups = 0;
        for (const QuantRun& r : in.runs)
          num_groups = std::max(num_groups, r.group + 1);
        std::vector<GroupAcc> groups_ref(num_groups), groups_fast(num_groups);
        // Two calls each, so state carried between chunks is covered too.
        const size_t half_runs = in.runs.size() / 2;
        int64_t half = 0;
        for (size_t r = 0; r < half_runs; ++r) half += in.runs[r].count;
        const size_t rest = in.runs.size() - half_runs;
        AccumulateErrorsScalar(in.values.data(), in.runs.data(), half_runs,
                               in.x.data(), 100, es_ref.data(), &ref,
                               groups_ref.data());
        AccumulateErrorsScalar(in.values.data() + half,
                               in.runs.data() + half_runs, rest,
                               in.x.data() + half, 100 + half,
                               es_ref.data() + half, &ref, groups_ref.data());
        fast_fn(in.values.data(), in.runs.data(), half_runs, in.x.data(), 100,
                es_fast.data(), &fast, groups_fast.data());
        fast_fn(in.values.data() + half, in.runs.data() + half_runs, rest,
                in.x.data() + half, 100 + half, es_fast.data() + half, &fast,
                groups_fast.data());
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_TRUE(SameBits(es_ref[i], es_fast[i]))
              << "element " << i << ": " << es_ref[i] << " vs " << es_fast[i];
        }
        EXPECT_EQ(fast.max_abs_err, ref.max_abs_err);
        EXPECT_EQ(fast.max_abs_err_index, ref.max_abs_err_index);
        EXPECT_EQ(fast.max_err_steps, ref.max_err_steps);
        EXPECT_EQ(fast.above_half_step, ref.above_half_step);
        EXPECT_EQ(fast.clipped, ref.clipped);
        EXPECT_EQ(fast.clipped_beyond_bound, ref.clipped_beyond_bound);
        EXPECT_EQ(fast.not_nearest, ref.not_nearest);
        EXPECT_EQ(fast.zeroed_elements, ref.zeroed_elements);
        EXPECT_TRUE(
            SameBits(fast.max_excess_not_nearest, ref.max_excess_not_nearest));
        EXPECT_TRUE(SameBits(fast.max_excess_clipped, ref.max_excess_clipped));
        EXPECT_EQ(fast.source_zeros, ref.source_zeros);
        EXPECT_EQ(fast.decoded_zeros, ref.decoded_zeros);
        EXPECT_EQ(fast.induced_zeros, ref.induced_zeros);
        // Sums: the same partial sums in the same order, so the same bits
        // (NaN sources make them NaN in both).
        EXPECT_TRUE(SameBits(fast.sum_sq_err, ref.sum_sq_err));
        EXPECT_TRUE(SameBits(fast.sum_abs_err, ref.sum_abs_err));
        EXPECT_TRUE(SameBits(fast.sum_xx, ref.sum_xx));
        EXPECT_TRUE(SameBits(fast.sum_hh, ref.sum_hh));
        EXPECT_TRUE(SameBits(fast.sum_xh, ref.sum_xh));
        ASSERT_EQ(groups_fast.size(), groups_ref.size());
        for (size_t g = 0; g < groups_ref.size(); ++g) {
          ASSERT_TRUE(SameBits(groups_fast[g].sum, groups_ref[g].sum))
              << "group " << g;
          ASSERT_TRUE(SameBits(groups_fast[g].max, groups_ref[g].max))
              << "group " << g;
          ASSERT_EQ(groups_fast[g].count, groups_ref[g].count) << "group " << g;
        }
      }
    }
}

// The group sums follow the documented order: four partials per run, the
// last count % 4 elements into the first, then (p0 + p1) + (p2 + p3).
TEST(ErrorPassTest, GroupSumsAddEachRunInFourPartials) {
  // One run of 6 elements, source above the decoded value by i + 1 steps of
  // 1, so error in steps i + 1; its group gets a second run of 1 element.
  std::vector<float> values(7, 0), x = {1e16f, 1, 1, 1, 1, 1, 2};
  const std::vector<QuantRun> runs = {{6, 0, 1, 1, -1e20, 1e20},
                                      {1, 0, 1, 1, -1e20, 1e20}};
  for (bool fast : {false, true}) {
    std::vector<double> es(7);
    std::vector<GroupAcc> groups(1);
    ErrorSums s;
    (fast ? AccumulateErrors : AccumulateErrorsScalar)(
        values.data(), runs.data(), 2, x.data(), 0, es.data(), &s,
        groups.data());
    // Partials: {1e16 + 1 + 1, 1, 1, 1} (1e16 + 1 rounds to 1e16 each
    // time), then the second run's 2.
    const double p0 = (static_cast<double>(1e16f) + 1.0) + 1.0;
    EXPECT_EQ(groups[0].sum, ((p0 + 1.0) + (1.0 + 1.0)) + 2.0);
    EXPECT_EQ(groups[0].max, 1e16f);
    EXPECT_EQ(groups[0].count, 7u);
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

TEST(ErrorPassTest, KeepAboveGathersTheLargerValuesInOrderAndTheirMaximum) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  for (int64_t m : {0, 1, 7, 8, 9, 100, 1001}) {
    SCOPED_TRACE(m);
    std::vector<double> v(m);
    for (double& x : v) x = u(rng);
    if (m > 5) v[3] = std::numeric_limits<double>::quiet_NaN();
    if (m > 9) v[9] = std::numeric_limits<double>::infinity();
    std::vector<double> want;
    double want_max = 0;
    for (double x : v) {
      if (x > 0.9) want.push_back(x);
      want_max = std::max(want_max, x);
    }
    // The dispatched path, the reference, and the AVX2 path where the CPU
    // has it (KeepAbove takes AVX-512 instead where it can).
    std::vector<decltype(&KeepAbove)> paths = {KeepAbove, KeepAboveScalar};
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
      paths.push_back(error_pass_internal::KeepAboveAvx2);
    }
#endif
    for (const auto keep_above : paths) {
      std::vector<double> out(m + 8);
      double max = -1;
      const int64_t k = keep_above(v.data(), m, 0.9, out.data(), &max);
      out.resize(k);
      EXPECT_EQ(out, want);
      EXPECT_EQ(max, want_max);
      // In place, as the percentile trim compacts.
      std::vector<double> w = v;
      w.resize(m + 8);
      EXPECT_EQ(keep_above(w.data(), m, 0.9, w.data(), &max), k);
      w.resize(k);
      EXPECT_EQ(w, want);
    }
  }
}

// Levels -8..7 of step 1: each element is within its run's bound, clipped
// (beyond an end further than rounding to it explains) or not nearest.
TEST(ErrorPassTest, ClassifiesEachElementAgainstItsRunsBound) {
  //                          within  nn    clip  within  nn
  std::vector<float> values = {0, 0, 7, 7, -3};
  std::vector<float> x = {0.4f, 1.0f, 9.0f, 7.4f, -1.5f};
  QuantRun run{5, 0, 1, 1, -8, 7};
  for (bool fast : {false, true}) {
    std::vector<double> es(5);
    ErrorSums s;
    (fast ? AccumulateErrors : AccumulateErrorsScalar)(
        values.data(), &run, 1, x.data(), 0, es.data(), &s, nullptr);
    EXPECT_EQ(s.not_nearest, 2);
    EXPECT_EQ(s.clipped, 1);
    EXPECT_EQ(s.clipped_beyond_bound, 1) << "no clipping by design";
    EXPECT_EQ(s.max_excess_not_nearest, 1.0) << "1.5 steps against 0.5";
    EXPECT_EQ(s.max_excess_clipped, 1.5) << "2 steps against 0.5";
  }
  // A designed clip of half a step more at the top: 8.0 on level 7 is
  // clipped, and within the bound; 7.4 rounds to level 7 and is not clipped.
  run.extra_above = 0.5;
  x[2] = 8.0f;
  std::vector<double> es(5);
  for (bool fast : {false, true}) {
    ErrorSums s;
    (fast ? AccumulateErrors : AccumulateErrorsScalar)(
        values.data(), &run, 1, x.data(), 0, es.data(), &s, nullptr);
    EXPECT_EQ(s.clipped, 1);
    EXPECT_EQ(s.clipped_beyond_bound, 0);
    EXPECT_EQ(s.max_excess_clipped, 0);
    EXPECT_EQ(s.not_nearest, 2);
  }
  // The slack a rounded f16 scale adds: 0.05 real units, plus 0.01 per unit
  // from the origin: the element at 0 decoded from 1.0 (1 step) is within
  // 0.5 + 0.05 + 0 only if the slack covers it; it does not.
  run.slack = 0.05;
  run.slack_rel = 0.01;
  ErrorSums t;
  AccumulateErrors(values.data(), &run, 1, x.data(), 0, es.data(), &t);
  EXPECT_EQ(t.not_nearest, 2);
  EXPECT_DOUBLE_EQ(t.max_excess_not_nearest, 1.5 - (0.5 + 0.05 + 0.03));
}

TEST(ErrorPassTest, ZeroedRunsLeaveTheStepMetrics) {
  std::vector<float> values = {0, 0, 0, 0, 0, 1};
  std::vector<float> x = {0.3f, -0.2f, 0, 0.1f, 0.5f, 1};
  const std::vector<QuantRun> runs = {{5, 0, 0, 0, 0, 0}, {1, 1, 1, 1, -8, 7}};
  for (bool fast : {false, true}) {
    std::vector<double> es(6);
    ErrorSums s;
    (fast ? AccumulateErrors : AccumulateErrorsScalar)(
        values.data(), runs.data(), 2, x.data(), 0, es.data(), &s, nullptr);
    EXPECT_EQ(s.zeroed_elements, 5);
    EXPECT_EQ(s.max_err_steps, 0) << "not infinite";
    EXPECT_EQ(s.above_half_step, 0);
    EXPECT_EQ(s.not_nearest + s.clipped, 0);
    EXPECT_EQ(s.max_abs_err, 0.5) << "the real-unit metrics keep them";
  }
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
