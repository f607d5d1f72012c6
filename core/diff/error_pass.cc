#include "core/diff/error_pass.h"

#include <algorithm>
#include <cmath>

#include "core/diff/error_element.h"
#include "core/diff/error_lanes256.h"
#include "core/diff/error_lanes512.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tensormorph {

using error_pass_internal::AddElement;
using error_pass_internal::FoldLaneMaxima;
using error_pass_internal::Partials;

void AccumulateErrorsScalar(const float* values, const QuantRun* runs,
                            size_t num_runs, const float* x, int64_t first,
                            double* err_steps, ErrorSums* s, GroupAcc* groups) {
  Partials p;
  int64_t i = 0;
  for (size_t r = 0; r < num_runs; ++r) {
    const QuantRun& e = runs[r];
    const RunLimits l = LimitsOf(e);
    const int64_t start = i, end = i + e.count, body = e.count - e.count % 4;
    double gs[4] = {0, 0, 0, 0}, gm[4] = {0, 0, 0, 0};
    for (; i < end; ++i) {
      const int64_t k = i - start;
      const int lane = k < body ? static_cast<int>(k % 4) : -1;
      const double v =
          AddElement(values, e, l, x, i, first, lane, &p, err_steps, s);
      const int gl = lane < 0 ? 0 : lane;
      gs[gl] += v;
      gm[gl] = std::max(gm[gl], v);
    }
    if (groups != nullptr && e.group >= 0) {
      GroupAcc& a = groups[e.group];
      a.sum += (gs[0] + gs[1]) + (gs[2] + gs[3]);
      a.max =
          std::max(a.max, static_cast<float>(std::max(std::max(gm[0], gm[1]),
                                                      std::max(gm[2], gm[3]))));
      a.count += static_cast<uint32_t>(e.count);
    }
  }
  s->sum_sq_err += (p.sq[0] + p.sq[1]) + (p.sq[2] + p.sq[3]);
  s->sum_abs_err += (p.ab[0] + p.ab[1]) + (p.ab[2] + p.ab[3]);
  s->sum_xx += (p.xx[0] + p.xx[1]) + (p.xx[2] + p.xx[3]);
  s->sum_hh += (p.hh[0] + p.hh[1]) + (p.hh[2] + p.hh[3]);
  s->sum_xh += (p.xh[0] + p.xh[1]) + (p.xh[2] + p.xh[3]);
}

#if defined(__x86_64__)
namespace {

// One run's parameters in registers, and its group's running sum and
// maximum.
struct Run256 {
  __m256d below, above_step, hi, lo, below_ok, above_ok, live;
  __m256d inv_below, inv_above, bound, slack, slack_rel, origin;
  __m256d range_min, range_max, extra_below, extra_above;
  __m256d group_sum, group_max;
};

__attribute__((target("avx2"))) Run256 Run256Of(const QuantRun& run,
                                                const RunLimits& l) {
  const __m256d zero = _mm256_setzero_pd();
  Run256 r;
  r.below = _mm256_set1_pd(run.step_below);
  r.above_step = _mm256_set1_pd(run.step_above);
  r.hi = _mm256_set1_pd(l.clip_hi);
  r.lo = _mm256_set1_pd(l.clip_lo);
  r.below_ok = _mm256_cmp_pd(r.below, zero, _CMP_GT_OQ);
  r.above_ok = _mm256_cmp_pd(r.above_step, zero, _CMP_GT_OQ);
  r.live = l.zeroed ? zero : _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
  r.inv_below = _mm256_set1_pd(l.inv_below);
  r.inv_above = _mm256_set1_pd(l.inv_above);
  r.bound = _mm256_set1_pd(run.bound);
  r.slack = _mm256_set1_pd(run.slack);
  r.slack_rel = _mm256_set1_pd(run.slack_rel);
  r.origin = _mm256_set1_pd(run.origin);
  r.range_min = _mm256_set1_pd(run.range_min);
  r.range_max = _mm256_set1_pd(run.range_max);
  r.extra_below = _mm256_set1_pd(run.extra_below);
  r.extra_above = _mm256_set1_pd(run.extra_above);
  r.group_sum = zero;
  r.group_max = zero;
  return r;
}

// Elements [i, i + 4) of a run, `idx` their flat indices. Every comparison
// is ordered (false on NaN) like the scalar code's, so the two agree on NaN
// sources too.
__attribute__((target("avx2"), always_inline)) inline void Step256(
    const float* values, const float* x, int64_t i, __m256i idx,
    double* err_steps, Run256& r, error_pass_internal::Lanes256& st) {
  const __m256d zero = _mm256_setzero_pd();
  const __m256d sign = _mm256_set1_pd(-0.0);
  const __m256d xs = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
  const __m256d xq = _mm256_cvtps_pd(_mm_loadu_ps(values + i));
  const __m256d err = _mm256_andnot_pd(sign, _mm256_sub_pd(xs, xq));
  const __m256d up = _mm256_cmp_pd(xs, xq, _CMP_GT_OQ);
  const __m256d step = _mm256_blendv_pd(r.below, r.above_step, up);
  const __m256d step_ok = _mm256_blendv_pd(r.below_ok, r.above_ok, up);
  __m256d v = _mm256_blendv_pd(_mm256_set1_pd(__builtin_inf()),
                               _mm256_div_pd(err, step), step_ok);
  v = _mm256_blendv_pd(v, zero, _mm256_cmp_pd(err, zero, _CMP_EQ_OQ));
  v = _mm256_and_pd(v, r.live);
  _mm256_storeu_pd(err_steps + i, v);
  r.group_sum = _mm256_add_pd(r.group_sum, v);
  // v > max ? v : max, as std::max(max, v): a NaN is passed over.
  r.group_max = _mm256_max_pd(v, r.group_max);
  error_pass_internal::AddMomentsAndMaxima256(err, xs, xq, v, idx, st);
  // The bound, as AddElement spells it.
  const __m256d inv = _mm256_blendv_pd(r.inv_below, r.inv_above, up);
  __m256d extra =
      _mm256_and_pd(r.extra_below, _mm256_cmp_pd(xs, r.range_min, _CMP_LT_OQ));
  extra = _mm256_blendv_pd(extra, r.extra_above,
                           _mm256_cmp_pd(xs, r.range_max, _CMP_GT_OQ));
  const __m256d dist = _mm256_andnot_pd(sign, _mm256_sub_pd(xq, r.origin));
  const __m256d allowed = _mm256_add_pd(
      _mm256_add_pd(
          r.bound,
          _mm256_mul_pd(
              _mm256_add_pd(r.slack, _mm256_mul_pd(r.slack_rel, dist)), inv)),
      extra);
  const __m256d excess = _mm256_sub_pd(v, allowed);
  const __m256d clip =
      _mm256_and_pd(r.live, _mm256_or_pd(_mm256_cmp_pd(xs, r.hi, _CMP_GT_OQ),
                                         _mm256_cmp_pd(xs, r.lo, _CMP_LT_OQ)));
  const __m256d beyond =
      _mm256_and_pd(r.live, _mm256_cmp_pd(excess, zero, _CMP_GT_OQ));
  error_pass_internal::AddVerdicts256(xs, xq, excess, clip, beyond, st);
}

}  // namespace

namespace error_pass_internal {

// Four elements of a run at a time, its parameters in registers; a run's
// last few elements go through the scalar code.
__attribute__((target("avx2"))) void AccumulateErrorsAvx2(
    const float* values, const QuantRun* runs, size_t num_runs, const float* x,
    int64_t first, double* err_steps, ErrorSums* s, GroupAcc* groups) {
  Lanes256 st = StartLanes256(*s);
  const __m256i four = _mm256_set1_epi64x(4);
  int64_t i = 0;
  for (size_t n = 0; n < num_runs; ++n) {
    const QuantRun& run = runs[n];
    const RunLimits l = LimitsOf(run);
    const int64_t start = i, end = i + run.count;
    Run256 r = Run256Of(run, l);
    __m256i idx = _mm256_add_epi64(_mm256_set1_epi64x(first + i),
                                   _mm256_set_epi64x(3, 2, 1, 0));
    for (; i + 4 <= end; i += 4, idx = _mm256_add_epi64(idx, four)) {
      Step256(values, x, i, idx, err_steps, r, st);
    }
    if (l.zeroed) s->zeroed_elements += i - start;
    alignas(32) double gs[4], gm[4];
    _mm256_store_pd(gs, r.group_sum);
    _mm256_store_pd(gm, r.group_max);
    Partials unused;
    for (; i < end; ++i) {
      const double v =
          AddElement(values, run, l, x, i, first, -1, &unused, err_steps, s);
      gs[0] += v;
      gm[0] = std::max(gm[0], v);
    }
    if (groups != nullptr && run.group >= 0) {
      GroupAcc& a = groups[run.group];
      a.sum += (gs[0] + gs[1]) + (gs[2] + gs[3]);
      a.max =
          std::max(a.max, static_cast<float>(std::max(std::max(gm[0], gm[1]),
                                                      std::max(gm[2], gm[3]))));
      a.count += static_cast<uint32_t>(run.count);
    }
  }
  FoldLanes256(st, s);
}

}  // namespace error_pass_internal

namespace {

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_pd(), which
// -Wmaybe-uninitialized reports inside the intrinsics' header (clang knows
// no such warning, and would warn about the pragma).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// One run's parameters and its group's running sum and maximum.
struct Run512 {
  __m512d below, above_step, hi, lo;
  __m512d inv_below, inv_above, bound, slack, slack_rel, origin;
  __m512d range_min, range_max, extra_below, extra_above;
  __mmask8 below_ok, above_ok;
  __mmask8 live;  // 0 for a zeroed run
  __m256d group_sum;
  __m512d group_max;
};

// Elements [i, i + 8) (kFull) or [i, i + 4): the upper lanes then read as
// zeros and are masked out of every count, maximum and store. The group sum
// takes an eight-wide term's low half, then its high half, as the moments
// do (error_lanes512.h): element k of the run still goes to partial k % 4.
template <bool kFull>
__attribute__((target("avx512f"), always_inline)) inline void Step512(
    const float* values, const float* x, int64_t i, int64_t first,
    double* err_steps, Run512& r, error_pass_internal::Lanes512& st) {
  constexpr __mmask8 lanes = kFull ? 0xFF : 0x0F;
  const __m512d zero = _mm512_setzero_pd();
  __m512d xs, xq;
  if constexpr (kFull) {
    xs = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    xq = _mm512_cvtps_pd(_mm256_loadu_ps(values + i));
  } else {
    xs = _mm512_zextpd256_pd512(_mm256_cvtps_pd(_mm_loadu_ps(x + i)));
    xq = _mm512_zextpd256_pd512(_mm256_cvtps_pd(_mm_loadu_ps(values + i)));
  }
  const __m512d err = _mm512_abs_pd(_mm512_sub_pd(xs, xq));
  const __mmask8 up = _mm512_cmp_pd_mask(xs, xq, _CMP_GT_OQ);
  const __m512d step = _mm512_mask_blend_pd(up, r.below, r.above_step);
  const __mmask8 ok = (up & r.above_ok) | (~up & r.below_ok);
  __m512d v = _mm512_mask_blend_pd(ok, _mm512_set1_pd(__builtin_inf()),
                                   _mm512_div_pd(err, step));
  v = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(err, zero, _CMP_EQ_OQ), v, zero);
  v = _mm512_maskz_mov_pd(r.live, v);
  error_pass_internal::AddMoments<kFull>(err, xs, xq, st);
  r.group_sum = _mm256_add_pd(r.group_sum, _mm512_castpd512_pd256(v));
  if constexpr (kFull) {
    _mm512_storeu_pd(err_steps + i, v);
    r.group_sum = _mm256_add_pd(r.group_sum, _mm512_extractf64x4_pd(v, 1));
  } else {
    _mm512_mask_storeu_pd(err_steps + i, lanes, v);
  }
  // v > max ? v : max, as std::max(max, v): a NaN is passed over. MAXPD is
  // exactly that (its second operand when unordered or equal), in one
  // short-latency instruction where a compare and a blend made a longer
  // chain. The upper lanes of a half step are zeros, which change no
  // maximum of errors (never below zero).
  r.group_max = _mm512_max_pd(v, r.group_max);
  error_pass_internal::AddMaxima<kFull>(err, v, first + i, st);
  // The bound, as AddElement spells it.
  const __m512d inv = _mm512_mask_blend_pd(up, r.inv_below, r.inv_above);
  __m512d extra = _mm512_maskz_mov_pd(
      _mm512_cmp_pd_mask(xs, r.range_min, _CMP_LT_OQ), r.extra_below);
  extra = _mm512_mask_mov_pd(
      extra, _mm512_cmp_pd_mask(xs, r.range_max, _CMP_GT_OQ), r.extra_above);
  const __m512d dist = _mm512_abs_pd(_mm512_sub_pd(xq, r.origin));
  const __m512d allowed = _mm512_add_pd(
      _mm512_add_pd(
          r.bound,
          _mm512_mul_pd(
              _mm512_add_pd(r.slack, _mm512_mul_pd(r.slack_rel, dist)), inv)),
      extra);
  const __m512d excess = _mm512_sub_pd(v, allowed);
  const __mmask8 clip = (_mm512_cmp_pd_mask(xs, r.hi, _CMP_GT_OQ) |
                         _mm512_cmp_pd_mask(xs, r.lo, _CMP_LT_OQ)) &
                        lanes & r.live;
  const __mmask8 beyond =
      _mm512_cmp_pd_mask(excess, zero, _CMP_GT_OQ) & lanes & r.live;
  error_pass_internal::AddVerdicts<kFull>(xs, xq, excess, clip, beyond, st);
}

// Eight elements at a time where a run's body (all but its last count % 4)
// allows, then four; the same results as AccumulateErrorsAvx2, bit for bit.
__attribute__((target("avx512f"))) void AccumulateErrorsAvx512(
    const float* values, const QuantRun* runs, size_t num_runs, const float* x,
    int64_t first, double* err_steps, ErrorSums* s, GroupAcc* groups) {
  error_pass_internal::Lanes512 st = error_pass_internal::StartLanes512(*s);
  int64_t i = 0;
  for (size_t n = 0; n < num_runs; ++n) {
    const QuantRun& run = runs[n];
    const int64_t start = i, end = i + run.count,
                  body_end = end - run.count % 4;
    const RunLimits l = LimitsOf(run);
    Run512 r;
    r.below = _mm512_set1_pd(run.step_below);
    r.above_step = _mm512_set1_pd(run.step_above);
    r.hi = _mm512_set1_pd(l.clip_hi);
    r.lo = _mm512_set1_pd(l.clip_lo);
    r.inv_below = _mm512_set1_pd(l.inv_below);
    r.inv_above = _mm512_set1_pd(l.inv_above);
    r.bound = _mm512_set1_pd(run.bound);
    r.slack = _mm512_set1_pd(run.slack);
    r.slack_rel = _mm512_set1_pd(run.slack_rel);
    r.origin = _mm512_set1_pd(run.origin);
    r.range_min = _mm512_set1_pd(run.range_min);
    r.range_max = _mm512_set1_pd(run.range_max);
    r.extra_below = _mm512_set1_pd(run.extra_below);
    r.extra_above = _mm512_set1_pd(run.extra_above);
    r.live = l.zeroed ? 0 : 0xFF;
    r.below_ok = run.step_below > 0 ? 0xFF : 0;
    r.above_ok = run.step_above > 0 ? 0xFF : 0;
    r.group_sum = _mm256_setzero_pd();
    r.group_max = _mm512_setzero_pd();
    for (; i + 8 <= body_end; i += 8) {
      Step512<true>(values, x, i, first, err_steps, r, st);
    }
    if (i < body_end) {
      Step512<false>(values, x, i, first, err_steps, r, st);
      i += 4;
    }
    if (l.zeroed) s->zeroed_elements += i - start;
    alignas(32) double gs[4];
    _mm256_store_pd(gs, r.group_sum);
    // The lanes are never NaN (passed over above) nor below zero, so their
    // maximum does not depend on the order it is taken in.
    double gmax = _mm512_reduce_max_pd(r.group_max);
    Partials unused;
    for (; i < end; ++i) {
      const double v =
          AddElement(values, run, l, x, i, first, -1, &unused, err_steps, s);
      gs[0] += v;
      gmax = std::max(gmax, v);
    }
    if (groups != nullptr && run.group >= 0) {
      GroupAcc& a = groups[run.group];
      a.sum += (gs[0] + gs[1]) + (gs[2] + gs[3]);
      a.max = std::max(a.max, static_cast<float>(gmax));
      a.count += static_cast<uint32_t>(run.count);
    }
  }
  error_pass_internal::FoldLanes512(st, s);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// Eight at a time: compressed within a register, then one whole store
// (a compressing store to memory is microcoded and slow on AMD Zen 4).
__attribute__((target("avx512f"))) int64_t KeepAboveAvx512(
    const double* v, int64_t m, double floor, double* out, double* max) {
  const __m512d f = _mm512_set1_pd(floor);
  __m512d top = _mm512_setzero_pd();
  int64_t k = 0, i = 0;
  for (; i + 8 <= m; i += 8) {
    const __m512d x = _mm512_loadu_pd(v + i);
    // x > top ? x : top, as std::max(top, x): a NaN is passed over. MAXPD
    // is exactly that (its second operand when unordered or equal) in one
    // short-latency instruction, where a compare into a mask and a blend
    // made this chain, one link per eight values, the loop's bound.
    top = _mm512_max_pd(x, top);
    const __mmask8 keep = _mm512_cmp_pd_mask(x, f, _CMP_GT_OQ);
    _mm512_storeu_pd(out + k, _mm512_maskz_compress_pd(keep, x));
    k += __builtin_popcount(keep);
  }
  double tail_max;
  k += KeepAboveScalar(v + i, m - i, floor, out + k, &tail_max);
  alignas(64) double lane[8];
  _mm512_store_pd(lane, top);
  for (double x : lane) tail_max = std::max(tail_max, x);
  *max = tail_max;
  return k;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

bool HaveAvx512() {
  static const bool have = __builtin_cpu_supports("avx512f");
  return have;
}

// For each mask of four kept lanes, the 32-bit lane order that moves the
// kept doubles to the front in order (AVX2 has no compress).
struct CompressOrder {
  alignas(32) int32_t lane[16][8];
};
constexpr CompressOrder MakeCompressOrder() {
  CompressOrder t{};
  for (int mask = 0; mask < 16; ++mask) {
    int n = 0;
    for (int j = 0; j < 4; ++j) {
      if ((mask >> j & 1) == 0) continue;
      t.lane[mask][2 * n] = 2 * j;
      t.lane[mask][2 * n + 1] = 2 * j + 1;
      ++n;
    }
  }
  return t;
}
constexpr CompressOrder kCompressOrder = MakeCompressOrder();

}  // namespace

namespace error_pass_internal {

// Four at a time, as KeepAboveAvx512 takes eight: a permute moves the kept
// values to the front of the register, then one whole store.
__attribute__((target("avx2"))) int64_t KeepAboveAvx2(const double* v,
                                                      int64_t m, double floor,
                                                      double* out,
                                                      double* max) {
  const __m256d f = _mm256_set1_pd(floor);
  __m256d top = _mm256_setzero_pd();
  int64_t k = 0, i = 0;
  for (; i + 4 <= m; i += 4) {
    const __m256d x = _mm256_loadu_pd(v + i);
    top = _mm256_max_pd(x, top);  // std::max(top, x), as KeepAboveAvx512's
    const int keep = _mm256_movemask_pd(_mm256_cmp_pd(x, f, _CMP_GT_OQ));
    const __m256i order = _mm256_load_si256(
        reinterpret_cast<const __m256i*>(kCompressOrder.lane[keep]));
    _mm256_storeu_pd(out + k, _mm256_castsi256_pd(_mm256_permutevar8x32_epi32(
                                  _mm256_castpd_si256(x), order)));
    k += __builtin_popcount(keep);
  }
  double tail_max;
  k += KeepAboveScalar(v + i, m - i, floor, out + k, &tail_max);
  alignas(32) double lane[4];
  _mm256_store_pd(lane, top);
  for (double x : lane) tail_max = std::max(tail_max, x);
  *max = tail_max;
  return k;
}

}  // namespace error_pass_internal
#endif

int64_t KeepAboveScalar(const double* v, int64_t m, double floor, double* out,
                        double* max) {
  int64_t k = 0;
  double top = 0;
  for (int64_t i = 0; i < m; ++i) {
    const double x = v[i];
    out[k] = x;
    k += x > floor;
    top = std::max(top, x);
  }
  *max = top;
  return k;
}

int64_t KeepAbove(const double* v, int64_t m, double floor, double* out,
                  double* max) {
#if defined(__x86_64__)
  if (HaveAvx512()) return KeepAboveAvx512(v, m, floor, out, max);
  if (error_pass_internal::HaveAvx2()) {
    return error_pass_internal::KeepAboveAvx2(v, m, floor, out, max);
  }
#endif
  return KeepAboveScalar(v, m, floor, out, max);
}

void AccumulateErrors(const float* values, const QuantRun* runs,
                      size_t num_runs, const float* x, int64_t first,
                      double* err_steps, ErrorSums* sums, GroupAcc* groups) {
#if defined(__x86_64__)
  if (HaveAvx512()) {
    AccumulateErrorsAvx512(values, runs, num_runs, x, first, err_steps, sums,
                           groups);
    return;
  }
  if (error_pass_internal::HaveAvx2()) {
    error_pass_internal::AccumulateErrorsAvx2(values, runs, num_runs, x, first,
                                              err_steps, sums, groups);
    return;
  }
#endif
  AccumulateErrorsScalar(values, runs, num_runs, x, first, err_steps, sums,
                         groups);
}

}  // namespace tensormorph
