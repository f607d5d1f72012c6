// One element of a quantization diff, as the scalar references add it: the
// statement every error pass (runs, plain floats) is held to, shared so that
// the per-element arithmetic is spelled once. Internal to core/diff.
#ifndef TENSORMORPH_CORE_DIFF_ERROR_ELEMENT_H_
#define TENSORMORPH_CORE_DIFF_ERROR_ELEMENT_H_

#include <cmath>
#include <cstdint>

#include "core/diff/error_pass.h"

namespace tensormorph {
namespace error_pass_internal {

// The four partial sums of AccumulateErrors' contract.
struct Partials {
  double sq[4] = {}, ab[4] = {}, xx[4] = {}, hh[4] = {}, xh[4] = {};
};

// Element i of a run: its error in steps, counts and maxima into `s`, and
// its sums into lane `lane` of `p`, or straight into `s` when lane < 0.
// The bound arithmetic is spelled as the fast paths compute it, operation
// for operation.
inline double AddElement(const float* values, const QuantRun& e,
                         const RunLimits& l, const float* x, int64_t i,
                         int64_t first, int lane, Partials* p,
                         double* err_steps, ErrorSums* s) {
  const double xs = x[i];
  const double xq = values[i];
  const double err = std::fabs(xs - xq);
  const double v = l.zeroed ? 0.0 : ErrorInSteps(xs, values[i], e);
  err_steps[i] = v;
  if (lane >= 0) {
    p->sq[lane] += err * err;
    p->ab[lane] += err;
    p->xx[lane] += xs * xs;
    p->hh[lane] += xq * xq;
    p->xh[lane] += xs * xq;
  } else {
    s->sum_sq_err += err * err;
    s->sum_abs_err += err;
    s->sum_xx += xs * xs;
    s->sum_hh += xq * xq;
    s->sum_xh += xs * xq;
  }
  if (err > s->max_abs_err) {
    s->max_abs_err = err;
    s->max_abs_err_index = first + i;
  }
  s->source_zeros += xs == 0;
  s->decoded_zeros += xq == 0;
  s->induced_zeros += (xq == 0) & (xs != 0);
  if (l.zeroed) {
    ++s->zeroed_elements;
    return v;
  }
  if (v > s->max_err_steps) s->max_err_steps = v;
  s->above_half_step += v > 0.5;
  const auto [excess, clip] = ExcessOf(xs, xq, v, e, l);
  const bool beyond = excess > 0;
  s->clipped += clip;
  s->clipped_beyond_bound += beyond & clip;
  s->not_nearest += beyond & !clip;
  if (beyond & !clip && excess > s->max_excess_not_nearest) {
    s->max_excess_not_nearest = excess;
  }
  if (beyond & clip && excess > s->max_excess_clipped) {
    s->max_excess_clipped = excess;
  }
  return v;
}

// The maxima a vector path kept per lane, `lanes` of them, into `s`: of
// |error| the largest, and of equal ones the earliest element (each lane
// kept its first maximum above the old one; lane_idx[k] < 0 when lane k took
// none), as element order would; of the error in steps the largest, NaN
// passed over as AddElement passes it over.
inline void FoldLaneMaxima(const double* lane_abs, const int64_t* lane_idx,
                           const double* lane_steps, int lanes, ErrorSums* s) {
  for (int k = 0; k < lanes; ++k) {
    if (lane_idx[k] < 0) continue;
    if (lane_abs[k] > s->max_abs_err ||
        (lane_abs[k] == s->max_abs_err && lane_idx[k] < s->max_abs_err_index)) {
      s->max_abs_err = lane_abs[k];
      s->max_abs_err_index = lane_idx[k];
    }
  }
  for (int k = 0; k < lanes; ++k) {
    if (lane_steps[k] > s->max_err_steps) s->max_err_steps = lane_steps[k];
  }
}

#if defined(__x86_64__)
// The AVX2 path (error_pass.cc), named so that tests hold it to the scalar
// reference on machines that dispatch to AVX-512.
// REQUIRES: the CPU has AVX2.
void AccumulateErrorsAvx2(const float* values, const QuantRun* runs,
                          size_t num_runs, const float* x, int64_t first,
                          double* err_steps, ErrorSums* s, GroupAcc* groups);
#endif

}  // namespace error_pass_internal
}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_ERROR_ELEMENT_H_
