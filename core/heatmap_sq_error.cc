#include "core/heatmap_sq_error.h"

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/util/lane_sum.h"
#include "core/util/prefetch.h"

namespace tensormorph {
namespace {

constexpr int kLanes = kSumLanes;

// The plain statement of AddSqErrorRow, and the path where the CPU (or the
// test cap) has no AVX2.
void AddSqErrorRowScalar(const float* x, const float* v, const double* w,
                         const std::vector<int64_t>& run, double* lanes) {
  for (size_t j = 0; j + 1 < run.size(); ++j) {
    double* const l = lanes + j * kLanes;
    for (int64_t c = run[j]; c < run[j + 1]; ++c) {
      const double e = static_cast<double>(x[c]) - static_cast<double>(v[c]);
      l[(c - run[j]) % kLanes] += w[c] * (e * e);
    }
  }
}

#if defined(__x86_64__)
// Asks for the source's cache line 1 KiB past `x`, which may lie past the
// data (a prefetch never faults), as stats.cc's passes do: the source is
// usually read where it is mapped, from memory rather than cache (the
// decoded values and the weights are in L2 and L1), and the hardware
// prefetcher alone left its loads waiting behind the arithmetic. Q4_K's
// map 1.59-1.71 G el/s without, 1.84-2.08 with (256 B ahead: 1.83-2.03;
// 4 KiB: 1.76-1.85).
inline void PrefetchSource(const float* x) { PrefetchAhead<1024>(x); }

// w * (e * e), e = x - v, of four columns in double: separate operations,
// each rounded once, as the scalar statement's.
__attribute__((target("avx2"), always_inline)) inline __m256d Terms4(
    __m128 x, __m128 v, __m256d w) {
  const __m256d e = _mm256_sub_pd(_mm256_cvtps_pd(x), _mm256_cvtps_pd(v));
  return _mm256_mul_pd(w, _mm256_mul_pd(e, e));
}

// A cell's lanes in four vectors of four, loaded and stored once per row
// of the cell: sixteen columns at a time into the four, then the row's
// last (up to 15) through masked loads whose other lanes read +0.0 in x, v
// and w, so that their terms are +0.0 and leave the lanes as they are.
__attribute__((target("avx2"))) void AddSqErrorRowAvx2(
    const float* x, const float* v, const double* w,
    const std::vector<int64_t>& run, double* lanes) {
  for (size_t j = 0; j + 1 < run.size(); ++j) {
    double* const l = lanes + j * kLanes;
    __m256d a[4];
    for (int i = 0; i < 4; ++i) a[i] = _mm256_loadu_pd(l + 4 * i);
    int64_t c = run[j];
    for (; c + kLanes <= run[j + 1]; c += kLanes) {
      PrefetchSource(x + c);
      for (int i = 0; i < 4; ++i) {
        const int64_t k = c + 4 * i;
        a[i] =
            _mm256_add_pd(a[i], Terms4(_mm_loadu_ps(x + k), _mm_loadu_ps(v + k),
                                       _mm256_loadu_pd(w + k)));
      }
    }
    const int rest = static_cast<int>(run[j + 1] - c);
    for (int i = 0; i < 4 && 4 * i < rest; ++i) {
      const int64_t k = c + 4 * i;
      const __m128i m = _mm_cmpgt_epi32(_mm_set1_epi32(rest - 4 * i),
                                        _mm_setr_epi32(0, 1, 2, 3));
      a[i] = _mm256_add_pd(
          a[i], Terms4(_mm_maskload_ps(x + k, m), _mm_maskload_ps(v + k, m),
                       _mm256_maskload_pd(w + k, _mm256_cvtepi32_epi64(m))));
    }
    for (int i = 0; i < 4; ++i) _mm256_storeu_pd(l + 4 * i, a[i]);
  }
}

// GCC 12's AVX-512 conversions pass _mm512_undefined_*(), a self-initialised
// variable that -W(maybe-)uninitialized reports inside the intrinsics'
// header (as decode_simd.cc notes).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// Terms4 of eight columns, those outside `m` +0.0 (their loads masked).
__attribute__((target("avx512f,avx512vl"), always_inline)) inline __m512d
Terms8(const float* x, const float* v, const double* w, __mmask8 m) {
  const __m512d e = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, x)),
                                  _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, v)));
  return _mm512_mul_pd(_mm512_maskz_loadu_pd(m, w), _mm512_mul_pd(e, e));
}

// AddSqErrorRowAvx2 in two vectors of eight lanes: a full mask for the
// sixteens, then the row's last (up to 15) columns masked into the first
// vector and, past eight, the second.
__attribute__((target("avx512f,avx512vl"))) void AddSqErrorRowAvx512(
    const float* x, const float* v, const double* w,
    const std::vector<int64_t>& run, double* lanes) {
  for (size_t j = 0; j + 1 < run.size(); ++j) {
    double* const l = lanes + j * kLanes;
    __m512d a0 = _mm512_loadu_pd(l), a1 = _mm512_loadu_pd(l + 8);
    int64_t c = run[j];
    for (; c + kLanes <= run[j + 1]; c += kLanes) {
      PrefetchSource(x + c);
      a0 = _mm512_add_pd(a0, Terms8(x + c, v + c, w + c, 0xff));
      a1 = _mm512_add_pd(a1, Terms8(x + c + 8, v + c + 8, w + c + 8, 0xff));
    }
    const int rest = static_cast<int>(run[j + 1] - c);
    if (rest > 0) {
      const __mmask8 m0 = static_cast<__mmask8>((1u << std::min(rest, 8)) - 1);
      a0 = _mm512_add_pd(a0, Terms8(x + c, v + c, w + c, m0));
    }
    if (rest > 8) {
      const __mmask8 m1 = static_cast<__mmask8>((1u << (rest - 8)) - 1);
      a1 = _mm512_add_pd(a1, Terms8(x + c + 8, v + c + 8, w + c + 8, m1));
    }
    _mm512_storeu_pd(l, a0);
    _mm512_storeu_pd(l + 8, a1);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

}  // namespace

void AddSqErrorRow(const float* x, const float* v, const double* w,
                   const std::vector<int64_t>& run, DecodeSimd simd,
                   double* lanes) {
#if defined(__x86_64__)
  if (simd >= DecodeSimd::kAvx512) {
    AddSqErrorRowAvx512(x, v, w, run, lanes);
    return;
  }
  if (simd >= DecodeSimd::kAvx2) {
    AddSqErrorRowAvx2(x, v, w, run, lanes);
    return;
  }
#endif
  AddSqErrorRowScalar(x, v, w, run, lanes);
}

}  // namespace tensormorph
