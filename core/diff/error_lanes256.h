// The running state of the quantization diff's AVX2 error passes (the runs'
// in error_pass.cc, the plain floats' in float_runs.cc), its updates and its
// fold into ErrorSums: error_lanes512.h's contract at four lanes, one
// spelling for both passes. Internal to core/diff; x86-64 only, and only for
// code compiled with AVX2.
#ifndef TENSORMORPH_CORE_DIFF_ERROR_LANES256_H_
#define TENSORMORPH_CORE_DIFF_ERROR_LANES256_H_

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "core/diff/error_element.h"

namespace tensormorph {
namespace error_pass_internal {

// Whether the CPU runs the AVX2 passes.
inline bool HaveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}

#define TM_LANES256_STEP __attribute__((target("avx2"), always_inline)) inline

// A true comparison is all ones (-1): subtracting it counts one.
TM_LANES256_STEP __m256i Count(__m256i acc, __m256d mask) {
  return _mm256_sub_epi64(acc, _mm256_castpd_si256(mask));
}

TM_LANES256_STEP double Sum(__m256d v) {
  alignas(32) double lane[4];
  _mm256_store_pd(lane, v);
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

TM_LANES256_STEP int64_t Sum(__m256i v) {
  alignas(32) int64_t lane[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lane), v);
  return lane[0] + lane[1] + lane[2] + lane[3];
}

// Four-wide partials (element k of the stretch into partial k % 4), maxima
// and counts.
struct Lanes256 {
  __m256d sq, ab, xx, hh, xh;
  __m256d max_abs, max_steps, max_nn, max_clip;
  __m256i max_idx;  // the element of each lane's max_abs; -1: none taken
  __m256i above, clipped, clipped_beyond, src_zeros, dec_zeros, induced,
      not_nearest;
};

// Zero sums and counts; maxima that start from `s`'s.
TM_LANES256_STEP Lanes256 StartLanes256(const ErrorSums& s) {
  Lanes256 st;
  st.sq = st.ab = st.xx = st.hh = st.xh = _mm256_setzero_pd();
  st.max_abs = _mm256_set1_pd(s.max_abs_err);
  st.max_idx = _mm256_set1_epi64x(-1);
  st.max_steps = _mm256_set1_pd(s.max_err_steps);
  st.max_nn = _mm256_set1_pd(s.max_excess_not_nearest);
  st.max_clip = _mm256_set1_pd(s.max_excess_clipped);
  st.above = st.clipped = st.clipped_beyond = st.src_zeros = st.dec_zeros =
      st.induced = st.not_nearest = _mm256_setzero_si256();
  return st;
}

// The sums, maxima and count above half a step of four elements: |error|
// `err`, source `xs`, decoded `xq`, error in steps `v`, `idx` their flat
// indices. Every comparison is ordered (false on NaN) like the scalar
// code's.
TM_LANES256_STEP void AddMomentsAndMaxima256(__m256d err, __m256d xs,
                                             __m256d xq, __m256d v, __m256i idx,
                                             Lanes256& st) {
  st.sq = _mm256_add_pd(st.sq, _mm256_mul_pd(err, err));
  st.ab = _mm256_add_pd(st.ab, err);
  st.xx = _mm256_add_pd(st.xx, _mm256_mul_pd(xs, xs));
  st.hh = _mm256_add_pd(st.hh, _mm256_mul_pd(xq, xq));
  st.xh = _mm256_add_pd(st.xh, _mm256_mul_pd(xs, xq));
  const __m256d new_max = _mm256_cmp_pd(err, st.max_abs, _CMP_GT_OQ);
  st.max_abs = _mm256_blendv_pd(st.max_abs, err, new_max);
  st.max_idx = _mm256_castpd_si256(_mm256_blendv_pd(
      _mm256_castsi256_pd(st.max_idx), _mm256_castsi256_pd(idx), new_max));
  st.max_steps = _mm256_blendv_pd(st.max_steps, v,
                                  _mm256_cmp_pd(v, st.max_steps, _CMP_GT_OQ));
  st.above = Count(st.above, _mm256_cmp_pd(v, _mm256_set1_pd(0.5), _CMP_GT_OQ));
}

// The verdicts of four elements: `excess` over the bound, in steps; `clip`
// and `beyond` (excess > 0) as masks the caller has limited to live lanes.
// Then the zeros of source `xs` and decoded `xq`.
TM_LANES256_STEP void AddVerdicts256(__m256d xs, __m256d xq, __m256d excess,
                                     __m256d clip, __m256d beyond,
                                     Lanes256& st) {
  const __m256d zero = _mm256_setzero_pd();
  const __m256d nn = _mm256_andnot_pd(clip, beyond);
  st.clipped = Count(st.clipped, clip);
  st.clipped_beyond = Count(st.clipped_beyond, _mm256_and_pd(clip, beyond));
  st.not_nearest = Count(st.not_nearest, nn);
  st.max_nn = _mm256_max_pd(_mm256_and_pd(excess, nn), st.max_nn);
  st.max_clip = _mm256_max_pd(
      _mm256_and_pd(excess, _mm256_and_pd(clip, beyond)), st.max_clip);
  const __m256d sz = _mm256_cmp_pd(xs, zero, _CMP_EQ_OQ);
  const __m256d dz = _mm256_cmp_pd(xq, zero, _CMP_EQ_OQ);
  st.src_zeros = Count(st.src_zeros, sz);
  st.dec_zeros = Count(st.dec_zeros, dz);
  st.induced = Count(st.induced, _mm256_andnot_pd(sz, dz));
}

// The state's partials, counts and maxima into `s`.
__attribute__((target("avx2"))) inline void FoldLanes256(const Lanes256& st,
                                                         ErrorSums* s) {
  s->sum_sq_err += Sum(st.sq);
  s->sum_abs_err += Sum(st.ab);
  s->sum_xx += Sum(st.xx);
  s->sum_hh += Sum(st.hh);
  s->sum_xh += Sum(st.xh);
  s->above_half_step += Sum(st.above);
  s->clipped += Sum(st.clipped);
  s->clipped_beyond_bound += Sum(st.clipped_beyond);
  s->not_nearest += Sum(st.not_nearest);
  s->source_zeros += Sum(st.src_zeros);
  s->decoded_zeros += Sum(st.dec_zeros);
  s->induced_zeros += Sum(st.induced);
  alignas(32) double lane_max[4], lane_steps[4];
  alignas(32) int64_t lane_idx[4];
  _mm256_store_pd(lane_max, st.max_abs);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lane_idx), st.max_idx);
  _mm256_store_pd(lane_steps, st.max_steps);
  FoldLaneMaxima(lane_max, lane_idx, lane_steps, 4, s);
  // Excesses kept are positive and never NaN: their maximum does not depend
  // on the order it is taken in.
  _mm256_store_pd(lane_max, st.max_nn);
  for (double v : lane_max) {
    s->max_excess_not_nearest = std::max(s->max_excess_not_nearest, v);
  }
  _mm256_store_pd(lane_max, st.max_clip);
  for (double v : lane_max) {
    s->max_excess_clipped = std::max(s->max_excess_clipped, v);
  }
}

#undef TM_LANES256_STEP

}  // namespace error_pass_internal
}  // namespace tensormorph

#endif  // defined(__x86_64__)
#endif  // TENSORMORPH_CORE_DIFF_ERROR_LANES256_H_
