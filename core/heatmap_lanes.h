// What the heatmap's mean kernels share (core/heatmap.cc's decoded and F16
// or BF16 code paths, core/heatmap_q4k and core/heatmap_q8's blocks): which
// cell layouts a kernel of `chunk` columns takes, and, with AVX-512 or AVX2,
// a chunk's lanes held in registers down the rows and ended as
// core/heatmap.h says (stored, or combined by SumOfLanes' tree). Internal
// to core/.
#ifndef TENSORMORPH_CORE_HEATMAP_LANES_H_
#define TENSORMORPH_CORE_HEATMAP_LANES_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tensormorph {

// Whether every cell of `run` (column edges, run[0] = 0; at least one cell)
// is of one width 16, 32 or 64 and they fill whole chunks of `chunk`
// columns (a multiple of 64): a kernel of `chunk` columns then takes
// chunk / width cells a call.
inline bool CellsInWholeChunks(const std::vector<int64_t>& run, int64_t chunk) {
  if (run.size() < 2) return false;
  const int64_t w = run[1] - run[0];
  const size_t width = run.size() - 1;
  if ((w != 16 && w != 32 && w != 64) ||
      width % static_cast<size_t>(chunk / w) != 0) {
    return false;
  }
  for (size_t j = 1; j < width; ++j) {
    if (run[j + 1] - run[j] != w) return false;
  }
  return true;
}

#if defined(__x86_64__)
// GCC 12's AVX-512 extracts pass _mm512_undefined_*(), a self-initialised
// variable that -W(maybe-)uninitialized reports inside the intrinsics'
// header (as decode_simd.cc notes).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define TM_LANES_STEP \
  __attribute__((target("avx512f,avx2"), always_inline)) inline

// Lanes, per cell c of a call, in a[2 c] (lanes 0-7) and a[2 c + 1]
// (8-15): +0.0 to start a band, else loaded. Every access to `a` is at a
// constant index (the fold expressions are unrolled in the source, not by
// the optimiser), so that GCC keeps the array in registers: with the loops
// unrolled only late, it kept it in memory and a load and a store went with
// every addition.
template <int... C>
TM_LANES_STEP void StartLanes(bool start, const double* lanes, __m512d* a,
                              std::integer_sequence<int, C...>) {
  ((a[C] = start ? _mm512_setzero_pd() : _mm512_loadu_pd(lanes + 8 * C)), ...);
}

// Stores a cell's lanes, or combines them into *sum: SumOfLanes' tree,
// addition for addition: p[k] + p[k + 8]; its halves added, q[k] + q[k + 4];
// then r[k] + r[k + 2]; then the two.
TM_LANES_STEP void EndCell(bool finish, __m512d l0, __m512d l1, double* lanes,
                           double* sum) {
  if (!finish) {
    _mm512_storeu_pd(lanes, l0);
    _mm512_storeu_pd(lanes + 8, l1);
    return;
  }
  const __m512d s = _mm512_add_pd(l0, l1);
  const __m256d q =
      _mm256_add_pd(_mm512_castpd512_pd256(s), _mm512_extractf64x4_pd(s, 1));
  const __m128d h =
      _mm_add_pd(_mm256_castpd256_pd128(q), _mm256_extractf128_pd(q, 1));
  *sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

// EndCell of each cell C of a call: lanes[16 C..], sums[C].
template <int... C>
TM_LANES_STEP void EndLanes(bool finish, const __m512d* a, double* lanes,
                            double* sums, std::integer_sequence<int, C...>) {
  (EndCell(finish, a[2 * C], a[2 * C + 1], lanes + 16 * C, sums + C), ...);
}

#undef TM_LANES_STEP

#define TM_LANES_STEP_AVX2 __attribute__((target("avx2"), always_inline)) inline

// AVX2's twins: cell c's lanes in four vectors of four, a[4 c] (lanes
// 0-3) to a[4 c + 3] (12-15).
template <int... C>
TM_LANES_STEP_AVX2 void StartLanes(bool start, const double* lanes, __m256d* a,
                                   std::integer_sequence<int, C...>) {
  ((a[C] = start ? _mm256_setzero_pd() : _mm256_loadu_pd(lanes + 4 * C)), ...);
}

// The same tree: (l0 + l2) holds p[k] + p[k + 8] for k < 4, (l1 + l3) for
// 4 <= k < 8; their sum q[k] + q[k + 4]; its halves added; then the two.
TM_LANES_STEP_AVX2 void EndCell(bool finish, const __m256d* l, double* lanes,
                                double* sum) {
  if (!finish) {
    for (int k = 0; k < 4; ++k) _mm256_storeu_pd(lanes + 4 * k, l[k]);
    return;
  }
  const __m256d q =
      _mm256_add_pd(_mm256_add_pd(l[0], l[2]), _mm256_add_pd(l[1], l[3]));
  const __m128d h =
      _mm_add_pd(_mm256_castpd256_pd128(q), _mm256_extractf128_pd(q, 1));
  *sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

template <int... C>
TM_LANES_STEP_AVX2 void EndLanes(bool finish, const __m256d* a, double* lanes,
                                 double* sums,
                                 std::integer_sequence<int, C...>) {
  (EndCell(finish, a + 4 * C, lanes + 16 * C, sums + C), ...);
}

#undef TM_LANES_STEP_AVX2
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_HEATMAP_LANES_H_
