// The per-element arithmetic of a quantization diff: each element's error and
// error in steps, and the sums, counts and maxima over a run of elements.
// A scalar reference and AVX2 and AVX-512 fast paths chosen at run time; tests
// hold the fast paths to the reference, bit for bit, on random inputs.
#ifndef TENSORMORPH_CORE_DIFF_ERROR_PASS_H_
#define TENSORMORPH_CORE_DIFF_ERROR_PASS_H_

#include <cstdint>

#include "core/quant/encoding.h"

namespace tensormorph {

// Running totals, in double.
struct ErrorSums {
  double sum_sq_err = 0, sum_abs_err = 0;
  double sum_xx = 0, sum_hh = 0, sum_xh = 0;  // source², decoded², product
  double max_abs_err = 0;
  int64_t max_abs_err_index = 0;  // the first element with max_abs_err
  double max_err_steps = 0;
  int64_t above_half_step = 0;  // error > 0.5 step
  // clipped: the source lies outside what the group's range represents,
  // further beyond its first or last level than rounding to it explains
  // (RunLimits' clip_lo / clip_hi), whether or not the format clips so by
  // design; clipped_beyond_bound: of those, the ones further out than the
  // format's bound allows at that end (a correct quantizer makes none).
  // not_nearest: inside the range, the error exceeds the bound (so another
  // level is nearer). These two are the excess over each run's rounding
  // bound (QuantRun).
  int64_t clipped = 0;
  int64_t clipped_beyond_bound = 0;
  int64_t not_nearest = 0;
  // How far beyond their bound (in steps) the worst of each kind lies; 0
  // when none is.
  double max_excess_not_nearest = 0, max_excess_clipped = 0;
  // Elements of runs whose steps are both zero (a stored scale of 0): their
  // error in steps reads 0 and they count in no step metric above; the
  // real-unit sums include them.
  int64_t zeroed_elements = 0;
  int64_t source_zeros = 0, decoded_zeros = 0;
  int64_t induced_zeros = 0;  // source != 0, decoded == 0
};

// What every path derives once per run from its QuantRun: the reciprocal
// steps the bound divides by, and the sources beyond which an element is
// clipped: range_max + (the bound at range_max, without the clipping the
// format allows by design) * step_above, and likewise below. A zero-step
// run (both steps 0) is `zeroed`.
struct RunLimits {
  double inv_below, inv_above;
  double clip_lo, clip_hi;
  bool zeroed;
};
inline RunLimits LimitsOf(const QuantRun& r) {
  RunLimits l;
  l.zeroed = r.step_below == 0 && r.step_above == 0;
  l.inv_below = 1.0 / r.step_below;
  l.inv_above = 1.0 / r.step_above;
  const double top =
      r.bound +
      (r.slack + r.slack_rel * __builtin_fabs(r.range_max - r.origin)) *
          l.inv_above;
  const double bottom =
      r.bound +
      (r.slack + r.slack_rel * __builtin_fabs(r.range_min - r.origin)) *
          l.inv_below;
  l.clip_hi = r.range_max + top * r.step_above;
  l.clip_lo = r.range_min - bottom * r.step_below;
  return l;
}

// How far element (source xs, decoded xq, error in steps v) of run `e` lies
// beyond its bound, in steps (<= 0 when within), and whether it is clipped,
// spelled as every path computes it, operation for operation: the same bits.
struct ElementExcess {
  double excess;
  bool clipped;
};
inline ElementExcess ExcessOf(double xs, double xq, double v, const QuantRun& e,
                              const RunLimits& l) {
  const double inv = xs > xq ? l.inv_above : l.inv_below;
  const double extra = xs > e.range_max
                           ? e.extra_above
                           : (xs < e.range_min ? e.extra_below : 0.0);
  const double allowed =
      (e.bound +
       (e.slack + e.slack_rel * __builtin_fabs(xq - e.origin)) * inv) +
      extra;
  return {v - allowed, (xs > l.clip_hi) || (xs < l.clip_lo)};
}

// One group's errors in steps: their sum, maximum and count. The sum adds
// each run of the group as four partial sums (element k of the run into
// partial k % 4, in order, its last len % 4 elements into partial 0), then
// (p0 + p1) + (p2 + p3); the maximum is taken in double and rounded once.
struct GroupAcc {
  double sum = 0;
  float max = 0;
  uint32_t count = 0;
};

// Error of `source` against the decoded `value` of an element of run `e`,
// in units of the step towards the source: 0 when exact, +inf when that step
// is 0 (a constant group missed).
inline double ErrorInSteps(double source, double value, const QuantRun& e) {
  const double err = __builtin_fabs(source - value);
  const double step = source > value ? e.step_above : e.step_below;
  if (err == 0) return 0;
  return step > 0 ? err / step : __builtin_inf();
}

// Adds the elements the runs cover (each run's bound as QuantRun states it;
// see ErrorSums for the kinds of excess), m = the sum of their counts, decoded
// `values[0, m)` against `x[0, m)` (source), into `sums`; `first` is the
// flat index of element 0. Writes each element's error in steps to
// err_steps[0, m). When `groups` is not null, adds each run with a group
// id >= 0 to groups[id] (REQUIRES: the table holds every such id).
// Sums: each run's first count - count % 4 elements go to four partial sums
// (element k of a run into partial k % 4), kept across the call's runs and
// added to `sums` at the end as (p0 + p1) + (p2 + p3); the rest go straight
// to `sums` in element order. The result is a function of the runs alone,
// the same bits on every path.
void AccumulateErrors(const float* values, const QuantRun* runs,
                      size_t num_runs, const float* x, int64_t first,
                      double* err_steps, ErrorSums* sums,
                      GroupAcc* groups = nullptr);

// The scalar reference, element by element in the order above: the fast
// path agrees with it bit for bit.
void AccumulateErrorsScalar(const float* values, const QuantRun* runs,
                            size_t num_runs, const float* x, int64_t first,
                            double* err_steps, ErrorSums* sums,
                            GroupAcc* groups = nullptr);

// Copies the values of v[0, m) greater than `floor` (so never NaN), in
// order, to out[0, k) and returns k: the errors that can still move a
// percentile, gathered without a branch per element (a few percent of
// them pass, at random, which a branch mispredicts). Sets *max to the
// largest of v[0, m) (NaN passed over; 0 when there is none larger).
// REQUIRES: `out` has room for m + 8 values (the fast path stores whole
// vectors past the kept ones); out == v is allowed (compaction in place).
int64_t KeepAbove(const double* v, int64_t m, double floor, double* out,
                  double* max);
int64_t KeepAboveScalar(const double* v, int64_t m, double floor, double* out,
                        double* max);
namespace error_pass_internal {
// KeepAbove's AVX2 path (x86-64), which it takes where the CPU has AVX2 but
// not AVX-512; here so that a test runs it on any AVX2 CPU.
// REQUIRES: the CPU has AVX2.
int64_t KeepAboveAvx2(const double* v, int64_t m, double floor, double* out,
                      double* max);
}  // namespace error_pass_internal

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_ERROR_PASS_H_
