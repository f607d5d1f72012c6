// The per-element arithmetic of a quantization diff: each element's error and
// error in steps, and the sums, counts and maxima over a run of elements.
// A scalar reference and an AVX2 fast path chosen at run time; tests hold the
// fast path to the reference on random inputs.
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
  int64_t clipped = 0;          // source beyond the group's range by > step/2
  int64_t source_zeros = 0, decoded_zeros = 0;
  int64_t induced_zeros = 0;  // source != 0, decoded == 0
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

// Adds the elements the runs cover, m = the sum of their counts, decoded
// `values[0, m)` against `x[0, m)` (source), into `sums`; `first` is the
// flat index of element 0. Writes each element's error in steps to
// err_steps[0, m).
void AccumulateErrors(const float* values, const QuantRun* runs,
                      size_t num_runs, const float* x, int64_t first,
                      double* err_steps, ErrorSums* sums);

// The scalar reference: sums in element order. AccumulateErrors agrees with
// it exactly in err_steps, counts and maxima; its sums may differ in the last
// bits (four partial sums).
void AccumulateErrorsScalar(const float* values, const QuantRun* runs,
                            size_t num_runs, const float* x, int64_t first,
                            double* err_steps, ErrorSums* sums);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_ERROR_PASS_H_
