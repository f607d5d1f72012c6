// The running state of the quantization diff's AVX-512 error passes (the
// runs' in error_pass.cc, the plain floats' in float_runs.cc), its updates
// and its fold into ErrorSums: one spelling, so the two passes cannot drift
// apart from each other or from AccumulateErrors' contract. Internal to
// core/diff; x86-64 only, and only for code compiled with AVX-512F.
//
// Contract, as AccumulateErrors states it for the scalar reference:
// - Sums: element k of the vectors' stretch (a run's body, count - count % 4
//   elements, for the runs' pass; all but the last m % 4 elements for the
//   floats') goes to partial k % 4, the partials kept across the call; an
//   eight-wide step adds its low half, then its high half, so partial k % 4
//   still receives its elements in order. The fold adds (p0 + p1) +
//   (p2 + p3) to the totals. The elements past the stretch are the scalar
//   statement's (AddElement), straight into ErrorSums.
// - Maxima of |error|: each lane keeps its first maximum above the start;
//   the fold takes the largest, and of equal ones the earliest element
//   (lowest index), as element order would. Lanes that never took one hold
//   index -1 and are passed over.
// - Error-in-steps maximum: NaN passed over, as std::max(max, v) does.
// - Maxima of excess: kept values are positive and never NaN, so their
//   maximum does not depend on the order it is taken in.
// - Counts: exact integers, order-free.
#ifndef TENSORMORPH_CORE_DIFF_ERROR_LANES512_H_
#define TENSORMORPH_CORE_DIFF_ERROR_LANES512_H_

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "core/diff/error_element.h"
#include "core/diff/error_pass.h"

namespace tensormorph {
namespace error_pass_internal {

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_pd(), which
// -W(maybe-)uninitialized reports inside the intrinsics' header; clang has
// no -Wmaybe-uninitialized and would warn about the pragma itself.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// Four-wide partial sums, eight-wide maxima, counts.
struct Lanes512 {
  __m256d sq, ab, xx, hh, xh;
  __m512d max_abs, max_steps, max_nn, max_clip;
  __m512i max_idx;  // the element of each lane's max_abs; -1: none taken
  int64_t above = 0, clipped = 0, clipped_beyond = 0, not_nearest = 0,
          src_zeros = 0, dec_zeros = 0, induced = 0;
};

// Zero sums and counts; maxima that start from `s`'s, so only a larger
// element (or, for |error|, an equal earlier one) replaces them.
__attribute__((target("avx512f"), always_inline)) inline Lanes512 StartLanes512(
    const ErrorSums& s) {
  Lanes512 st;
  st.sq = st.ab = st.xx = st.hh = st.xh = _mm256_setzero_pd();
  st.max_abs = _mm512_set1_pd(s.max_abs_err);
  st.max_idx = _mm512_set1_epi64(-1);
  st.max_steps = _mm512_set1_pd(s.max_err_steps);
  st.max_nn = _mm512_set1_pd(s.max_excess_not_nearest);
  st.max_clip = _mm512_set1_pd(s.max_excess_clipped);
  return st;
}

// The sums of elements [i, i + 8) (kFull) or [i, i + 4) (the upper lanes
// then ignored): |error| `err`, source `xs`, decoded `xq`.
template <bool kFull>
__attribute__((target("avx512f"), always_inline)) inline void AddMoments(
    __m512d err, __m512d xs, __m512d xq, Lanes512& st) {
  const __m512d t_sq = _mm512_mul_pd(err, err);
  const __m512d t_xx = _mm512_mul_pd(xs, xs);
  const __m512d t_hh = _mm512_mul_pd(xq, xq);
  const __m512d t_xh = _mm512_mul_pd(xs, xq);
  st.sq = _mm256_add_pd(st.sq, _mm512_castpd512_pd256(t_sq));
  st.ab = _mm256_add_pd(st.ab, _mm512_castpd512_pd256(err));
  st.xx = _mm256_add_pd(st.xx, _mm512_castpd512_pd256(t_xx));
  st.hh = _mm256_add_pd(st.hh, _mm512_castpd512_pd256(t_hh));
  st.xh = _mm256_add_pd(st.xh, _mm512_castpd512_pd256(t_xh));
  if constexpr (kFull) {
    st.sq = _mm256_add_pd(st.sq, _mm512_extractf64x4_pd(t_sq, 1));
    st.ab = _mm256_add_pd(st.ab, _mm512_extractf64x4_pd(err, 1));
    st.xx = _mm256_add_pd(st.xx, _mm512_extractf64x4_pd(t_xx, 1));
    st.hh = _mm256_add_pd(st.hh, _mm512_extractf64x4_pd(t_hh, 1));
    st.xh = _mm256_add_pd(st.xh, _mm512_extractf64x4_pd(t_xh, 1));
  }
}

// The maxima of elements [i, i + 8) (kFull) or [i, i + 4), `index` the
// flat index of element i: |error| `err` with its index, error in steps `v`,
// and the count of v above half a step.
template <bool kFull>
__attribute__((target("avx512f"), always_inline)) inline void AddMaxima(
    __m512d err, __m512d v, int64_t index, Lanes512& st) {
  constexpr __mmask8 lanes = kFull ? 0xFF : 0x0F;
  const __m512i idx = _mm512_add_epi64(
      _mm512_set1_epi64(index), _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
  const __mmask8 new_max =
      _mm512_cmp_pd_mask(err, st.max_abs, _CMP_GT_OQ) & lanes;
  st.max_abs = _mm512_mask_blend_pd(new_max, st.max_abs, err);
  st.max_idx = _mm512_mask_blend_epi64(new_max, st.max_idx, idx);
  st.max_steps = _mm512_mask_max_pd(st.max_steps, lanes, v, st.max_steps);
  st.above += __builtin_popcount(
      _mm512_cmp_pd_mask(v, _mm512_set1_pd(0.5), _CMP_GT_OQ) & lanes);
}

// The verdicts of elements [i, i + 8) (kFull) or [i, i + 4): `excess` over
// the bound, in steps; `clip` and `beyond` (excess > 0) as masks the caller
// has already limited to the step's live lanes. Then the zeros of source
// `xs` and decoded `xq`.
template <bool kFull>
__attribute__((target("avx512f"), always_inline)) inline void AddVerdicts(
    __m512d xs, __m512d xq, __m512d excess, __mmask8 clip, __mmask8 beyond,
    Lanes512& st) {
  constexpr __mmask8 lanes = kFull ? 0xFF : 0x0F;
  const __m512d zero = _mm512_setzero_pd();
  const __mmask8 nn = beyond & static_cast<__mmask8>(~clip);
  st.clipped += __builtin_popcount(clip);
  st.clipped_beyond += __builtin_popcount(clip & beyond);
  st.not_nearest += __builtin_popcount(nn);
  st.max_nn = _mm512_max_pd(_mm512_maskz_mov_pd(nn, excess), st.max_nn);
  st.max_clip =
      _mm512_max_pd(_mm512_maskz_mov_pd(clip & beyond, excess), st.max_clip);
  const __mmask8 sz = _mm512_cmp_pd_mask(xs, zero, _CMP_EQ_OQ) & lanes;
  const __mmask8 dz = _mm512_cmp_pd_mask(xq, zero, _CMP_EQ_OQ) & lanes;
  st.src_zeros += __builtin_popcount(sz);
  st.dec_zeros += __builtin_popcount(dz);
  st.induced += __builtin_popcount(dz & ~sz & 0xFF);
}

// The state's partials, counts and maxima into `s`, as the contract above
// states.
__attribute__((target("avx512f"))) inline void FoldLanes512(const Lanes512& st,
                                                            ErrorSums* s) {
  alignas(32) double lane4[4];
  const __m256d* partials[5] = {&st.sq, &st.ab, &st.xx, &st.hh, &st.xh};
  double* totals[5] = {&s->sum_sq_err, &s->sum_abs_err, &s->sum_xx, &s->sum_hh,
                       &s->sum_xh};
  for (int t = 0; t < 5; ++t) {
    _mm256_store_pd(lane4, *partials[t]);
    *totals[t] += (lane4[0] + lane4[1]) + (lane4[2] + lane4[3]);
  }
  s->above_half_step += st.above;
  s->clipped += st.clipped;
  s->clipped_beyond_bound += st.clipped_beyond;
  s->not_nearest += st.not_nearest;
  s->source_zeros += st.src_zeros;
  s->decoded_zeros += st.dec_zeros;
  s->induced_zeros += st.induced;
  alignas(64) double lane_max[8], lane_steps[8];
  alignas(64) int64_t lane_idx[8];
  _mm512_store_pd(lane_max, st.max_abs);
  _mm512_store_si512(lane_idx, st.max_idx);
  _mm512_store_pd(lane_steps, st.max_steps);
  FoldLaneMaxima(lane_max, lane_idx, lane_steps, 8, s);
  s->max_excess_not_nearest =
      std::max(s->max_excess_not_nearest, _mm512_reduce_max_pd(st.max_nn));
  s->max_excess_clipped =
      std::max(s->max_excess_clipped, _mm512_reduce_max_pd(st.max_clip));
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace error_pass_internal
}  // namespace tensormorph

#endif  // defined(__x86_64__)
#endif  // TENSORMORPH_CORE_DIFF_ERROR_LANES512_H_
