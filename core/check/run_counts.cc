#include "core/check/run_counts.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "core/check/rules.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TM_RUN_COUNTS_SIMD 1
#endif

namespace tensormorph {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kF16 = static_cast<float>(kF16Max);

// Counted in 32-bit lanes, folded into the 64-bit totals every 2^30.
constexpr int64_t kChunk = int64_t{1} << 30;

// Namespace scope, not a function's static: read once per call, without
// the guard.
#if defined(TM_RUN_COUNTS_SIMD)
std::atomic<bool> simd_on{__builtin_cpu_supports("avx2") != 0};
#else
std::atomic<bool> simd_on{false};
#endif
std::atomic<bool>& SimdFlag() { return simd_on; }

// Whether any of v[0, n) is NaN, infinite or past fp16's range: the values
// the fast passes leave to the scalar one.
bool AnySpecialScalar(const float* v, int64_t n) {
  bool any = false;
  for (int64_t k = 0; k < n; ++k) any |= !(std::fabs(v[k]) <= kF16);
  return any;
}

#if defined(TM_RUN_COUNTS_SIMD)
#define TM_AVX2 __attribute__((target("avx2,popcnt")))

TM_AVX2 bool AnySpecialAvx2(const float* v, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 f16 = _mm256_set1_ps(kF16);
  __m256 any = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    // !(|x| <= 65504): NaN, Inf and past fp16 alike.
    const __m256 a0 = _mm256_and_ps(_mm256_loadu_ps(v + k), abs_mask);
    const __m256 a1 = _mm256_and_ps(_mm256_loadu_ps(v + k + 8), abs_mask);
    const __m256 a2 = _mm256_and_ps(_mm256_loadu_ps(v + k + 16), abs_mask);
    const __m256 a3 = _mm256_and_ps(_mm256_loadu_ps(v + k + 24), abs_mask);
    any = _mm256_or_ps(any, _mm256_cmp_ps(a0, f16, _CMP_NLE_UQ));
    any = _mm256_or_ps(any, _mm256_cmp_ps(a1, f16, _CMP_NLE_UQ));
    any = _mm256_or_ps(any, _mm256_cmp_ps(a2, f16, _CMP_NLE_UQ));
    any = _mm256_or_ps(any, _mm256_cmp_ps(a3, f16, _CMP_NLE_UQ));
  }
  for (; k + 8 <= n; k += 8) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(v + k), abs_mask);
    any = _mm256_or_ps(any, _mm256_cmp_ps(a, f16, _CMP_NLE_UQ));
  }
  return _mm256_movemask_ps(any) != 0 || AnySpecialScalar(v + k, n - k);
}

// CountRun in one AVX2 pass, or false when a value is NaN, Inf or past
// fp16 (rare: a finding), which the scalar pass then counts. Without such
// values nan, inf and over are 0 and "neither zero nor infinite" is x != 0.
// Lanes count down from 0 (a true compare is -1) in 32 bits: n < 2^31 * 8.
TM_AVX2 inline bool CountOrdinaryAvx2(const float* v, int64_t n, float first,
                                      float lo, float hi, RunCounts* c) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 f16 = _mm256_set1_ps(kF16);
  const __m256 zero = _mm256_setzero_ps();
  const __m256 vf = _mm256_set1_ps(first);
  const __m256 vl = _mm256_set1_ps(lo);
  const __m256 vh = _mm256_set1_ps(hi);
  __m256 any = _mm256_setzero_ps();
  __m256i zc = _mm256_setzero_si256(), dc = zc, lc = zc, hc = zc;
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 x = _mm256_loadu_ps(v + k);
    // !(|x| <= 65504): NaN, Inf and past fp16 alike.
    any = _mm256_or_ps(
        any, _mm256_cmp_ps(_mm256_and_ps(x, abs_mask), f16, _CMP_NLE_UQ));
    const __m256 z = _mm256_cmp_ps(x, zero, _CMP_EQ_OQ);
    const __m256 d = _mm256_cmp_ps(x, vf, _CMP_NEQ_UQ);
    const __m256 l = _mm256_andnot_ps(z, _mm256_cmp_ps(x, vl, _CMP_EQ_OQ));
    const __m256 h = _mm256_andnot_ps(z, _mm256_cmp_ps(x, vh, _CMP_EQ_OQ));
    zc = _mm256_add_epi32(zc, _mm256_castps_si256(z));
    dc = _mm256_add_epi32(dc, _mm256_castps_si256(d));
    lc = _mm256_add_epi32(lc, _mm256_castps_si256(l));
    hc = _mm256_add_epi32(hc, _mm256_castps_si256(h));
  }
  if (_mm256_movemask_ps(any) != 0 || AnySpecialScalar(v + k, n - k))
    return false;
  // The four totals at once: [z, d, l, h] in each 128-bit half, then summed.
  const __m256i zdlh =
      _mm256_hadd_epi32(_mm256_hadd_epi32(zc, dc), _mm256_hadd_epi32(lc, hc));
  const __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(zdlh),
                                    _mm256_extracti128_si256(zdlh, 1));
  c->zeros = -static_cast<int64_t>(_mm_extract_epi32(sum, 0));
  c->differ = -static_cast<int64_t>(_mm_extract_epi32(sum, 1));
  c->at_low = -static_cast<int64_t>(_mm_extract_epi32(sum, 2));
  c->at_high = -static_cast<int64_t>(_mm_extract_epi32(sum, 3));
  for (; k < n; ++k) {
    const float x = v[k];
    c->zeros += x == 0;
    c->differ += x != first;
    c->at_low += (x == lo) & (x != 0);
    c->at_high += (x == hi) & (x != 0);
  }
  return true;
}
#endif

}  // namespace

RunCounts CountRunScalar(const float* v, int64_t n, float first, float lo,
                         float hi) {
  int32_t nan_c = 0, inf_c = 0, zero_c = 0, diff_c = 0, low_c = 0, high_c = 0,
          over_c = 0;
  RunCounts c;
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t end = std::min(n, start + kChunk);
    for (int64_t k = start; k < end; ++k) {
      const float x = v[k];
      const float a = std::fabs(x);
      // Infinities are their own rule, never "on an end level".
      const bool nonzero = (x != 0) & (a != kInf);
      nan_c += x != x;
      inf_c += a == kInf;
      zero_c += x == 0;
      diff_c += x != first;
      low_c += (x == lo) & nonzero;
      high_c += (x == hi) & nonzero;
      over_c += (a > kF16) & (a != kInf);
    }
    c.nan += nan_c;
    c.inf += inf_c;
    c.zeros += zero_c;
    c.differ += diff_c;
    c.at_low += low_c;
    c.at_high += high_c;
    c.over += over_c;
    nan_c = inf_c = zero_c = diff_c = low_c = high_c = over_c = 0;
  }
  return c;
}

namespace {

bool LevelsUsable(float lo, float hi) {
  return std::isfinite(lo) && std::isfinite(hi) && lo != hi;
}

bool OrdinaryScalar(const float* g, int64_t len, float lo, float hi) {
  if (!LevelsUsable(lo, hi)) return false;
  const RunCounts c = CountRunScalar(g, len, g[0], lo, hi);
  return c.nan == 0 && c.inf == 0 && c.over == 0 && c.zeros < len &&
         c.differ > 0 && 4 * (c.at_low + c.at_high) <= len;
}

#if defined(TM_RUN_COUNTS_SIMD)
// OrdinaryScalar(g, len, lo, hi) for len a multiple of 32 and end levels
// that are finite, distinct and not zero, in about half the operations of
// the general pass below. Exact, not an estimate:
// - !(|x| <= 65504) (NaN, Inf, past fp16) is |x|'s bits above 65504's: the
//   bits of a non-negative float order as its value, NaN's above Inf's;
// - a value not the first implies not all zero;
// - neither end level is zero, so a value on one is not zero.
// End-level values are counted 32 at a time (packed to bytes, one popcount).
TM_AVX2 inline bool Ordinary32Avx2(const float* g, int64_t len, float lo,
                                   float hi) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256 vf = _mm256_set1_ps(g[0]);
  const __m256 vl = _mm256_set1_ps(lo);
  const __m256 vh = _mm256_set1_ps(hi);
  __m256i top = _mm256_setzero_si256();  // the largest |x| bits
  __m256 differ = _mm256_setzero_ps();
  int64_t ends = 0;
  for (int64_t k = 0; k < len; k += 32) {
    const __m256 x0 = _mm256_loadu_ps(g + k);
    const __m256 x1 = _mm256_loadu_ps(g + k + 8);
    const __m256 x2 = _mm256_loadu_ps(g + k + 16);
    const __m256 x3 = _mm256_loadu_ps(g + k + 24);
    const __m256i a01 =
        _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(x0), abs_mask),
                         _mm256_and_si256(_mm256_castps_si256(x1), abs_mask));
    const __m256i a23 =
        _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(x2), abs_mask),
                         _mm256_and_si256(_mm256_castps_si256(x3), abs_mask));
    top = _mm256_max_epi32(top, _mm256_max_epi32(a01, a23));
    differ = _mm256_or_ps(
        differ, _mm256_or_ps(_mm256_or_ps(_mm256_cmp_ps(x0, vf, _CMP_NEQ_UQ),
                                          _mm256_cmp_ps(x1, vf, _CMP_NEQ_UQ)),
                             _mm256_or_ps(_mm256_cmp_ps(x2, vf, _CMP_NEQ_UQ),
                                          _mm256_cmp_ps(x3, vf, _CMP_NEQ_UQ))));
    const __m256i e0 = _mm256_castps_si256(_mm256_or_ps(
        _mm256_cmp_ps(x0, vl, _CMP_EQ_OQ), _mm256_cmp_ps(x0, vh, _CMP_EQ_OQ)));
    const __m256i e1 = _mm256_castps_si256(_mm256_or_ps(
        _mm256_cmp_ps(x1, vl, _CMP_EQ_OQ), _mm256_cmp_ps(x1, vh, _CMP_EQ_OQ)));
    const __m256i e2 = _mm256_castps_si256(_mm256_or_ps(
        _mm256_cmp_ps(x2, vl, _CMP_EQ_OQ), _mm256_cmp_ps(x2, vh, _CMP_EQ_OQ)));
    const __m256i e3 = _mm256_castps_si256(_mm256_or_ps(
        _mm256_cmp_ps(x3, vl, _CMP_EQ_OQ), _mm256_cmp_ps(x3, vh, _CMP_EQ_OQ)));
    // -1 or 0 per value, saturated to bytes: one bit each in the mask.
    const __m256i e = _mm256_packs_epi16(_mm256_packs_epi32(e0, e1),
                                         _mm256_packs_epi32(e2, e3));
    ends += __builtin_popcount(static_cast<unsigned>(_mm256_movemask_epi8(e)));
  }
  const int32_t f16_bits = 0x477fe000;  // 65504.0f
  const __m256i over = _mm256_cmpgt_epi32(top, _mm256_set1_epi32(f16_bits));
  return _mm256_movemask_epi8(over) == 0 && _mm256_movemask_ps(differ) != 0 &&
         4 * ends <= len;
}

TM_AVX2 void MarkOrdinaryAvx2(const float* v, const QuantRun* runs, int64_t n,
                              int64_t len, uint8_t* ordinary) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 f16 = _mm256_set1_ps(kF16);
  const __m256 zero = _mm256_setzero_ps();
  const __m256 ones = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  const bool by_32 = len % 32 == 0;
  const float* g = v;
  for (int64_t i = 0; i < n; g += runs[i].count, ++i) {
    const float lo = static_cast<float>(runs[i].range_min);
    const float hi = static_cast<float>(runs[i].range_max);
    if (runs[i].count != len || !LevelsUsable(lo, hi)) {
      ordinary[i] = 0;
      continue;
    }
    if (by_32 && lo != 0 && hi != 0) {
      ordinary[i] = Ordinary32Avx2(g, len, lo, hi);
      continue;
    }
    const __m256 vf = _mm256_set1_ps(g[0]);
    const __m256 vl = _mm256_set1_ps(lo);
    const __m256 vh = _mm256_set1_ps(hi);
    // any: a special value; all_zero: every value zero so far; differ: a
    // value not the first; ends: values on an end level (lo != hi, so
    // at_low + at_high, zeros aside).
    __m256 any = zero, all_zero = ones, differ = zero;
    int64_t ends = 0;
    int64_t k = 0;
    for (; k + 8 <= len; k += 8) {
      const __m256 x = _mm256_loadu_ps(g + k);
      any = _mm256_or_ps(
          any, _mm256_cmp_ps(_mm256_and_ps(x, abs_mask), f16, _CMP_NLE_UQ));
      const __m256 z = _mm256_cmp_ps(x, zero, _CMP_EQ_OQ);
      all_zero = _mm256_and_ps(all_zero, z);
      differ = _mm256_or_ps(differ, _mm256_cmp_ps(x, vf, _CMP_NEQ_UQ));
      const __m256 e =
          _mm256_andnot_ps(z, _mm256_or_ps(_mm256_cmp_ps(x, vl, _CMP_EQ_OQ),
                                           _mm256_cmp_ps(x, vh, _CMP_EQ_OQ)));
      ends += __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(e)));
    }
    if (k < len) {
      ordinary[i] = OrdinaryScalar(g, len, lo, hi);
      continue;
    }
    ordinary[i] = _mm256_movemask_ps(any) == 0 &&
                  _mm256_movemask_ps(all_zero) != 0xff &&
                  _mm256_movemask_ps(differ) != 0 && 4 * ends <= len;
  }
}

// Sixteen codes a step: |code| >= limit as a signed 16-bit compare (the
// magnitudes are below 0x8000).
TM_AVX2 bool AnyFloat16SpecialAvx2(const uint8_t* codes, int64_t n,
                                   uint16_t limit) {
  const __m256i mag = _mm256_set1_epi16(0x7fff);
  const __m256i below = _mm256_set1_epi16(static_cast<int16_t>(limit - 1));
  __m256i any = _mm256_setzero_si256();
  int64_t k = 0;
  for (; k + 64 <= n; k += 64) {
    const __m256i* p = reinterpret_cast<const __m256i*>(codes + 2 * k);
    const __m256i m0 = _mm256_and_si256(_mm256_loadu_si256(p), mag);
    const __m256i m1 = _mm256_and_si256(_mm256_loadu_si256(p + 1), mag);
    const __m256i m2 = _mm256_and_si256(_mm256_loadu_si256(p + 2), mag);
    const __m256i m3 = _mm256_and_si256(_mm256_loadu_si256(p + 3), mag);
    const __m256i top =
        _mm256_max_epi16(_mm256_max_epi16(m0, m1), _mm256_max_epi16(m2, m3));
    any = _mm256_or_si256(any, _mm256_cmpgt_epi16(top, below));
  }
  return !_mm256_testz_si256(any, any) ||
         AnyFloat16SpecialScalar(codes + 2 * k, n - k, limit);
}
#endif

}  // namespace

bool AnyFloat16SpecialScalar(const uint8_t* codes, int64_t n, uint16_t limit) {
  bool any = false;
  for (int64_t k = 0; k < n; ++k) {
    const uint16_t c =
        static_cast<uint16_t>(codes[2 * k] | codes[2 * k + 1] << 8);
    any |= (c & 0x7fff) >= limit;
  }
  return any;
}

bool AnyFloat16Special(const uint8_t* codes, int64_t n, uint16_t limit) {
#if defined(TM_RUN_COUNTS_SIMD)
  if (SimdFlag().load(std::memory_order_relaxed)) {
    return AnyFloat16SpecialAvx2(codes, n, limit);
  }
#endif
  return AnyFloat16SpecialScalar(codes, n, limit);
}

void MarkOrdinaryRuns(const float* v, const QuantRun* runs, int64_t n,
                      int64_t len, uint8_t* ordinary) {
#if defined(TM_RUN_COUNTS_SIMD)
  if (SimdFlag().load(std::memory_order_relaxed) && len >= 8) {
    MarkOrdinaryAvx2(v, runs, n, len, ordinary);
    return;
  }
#endif
  const float* g = v;
  for (int64_t i = 0; i < n; g += runs[i].count, ++i) {
    ordinary[i] = runs[i].count == len &&
                  OrdinaryScalar(g, len, static_cast<float>(runs[i].range_min),
                                 static_cast<float>(runs[i].range_max));
  }
}

RunCounts CountRun(const float* v, int64_t n, float first, float lo, float hi) {
#if defined(TM_RUN_COUNTS_SIMD)
  // Special values are rare (a finding): the pass that counts ordinary
  // values with four compares also notes whether there are any.
  // Lanes count in 32 bits: runs longer than a piece never occur, but stay
  // exact on the scalar pass.
  RunCounts c;
  if (SimdFlag().load(std::memory_order_relaxed) && n < (int64_t{1} << 30) &&
      CountOrdinaryAvx2(v, n, first, lo, hi, &c))
    return c;
#endif
  return CountRunScalar(v, n, first, lo, hi);
}

RunCounts CountSpecials(const float* v, int64_t n) {
  bool any = true;
#if defined(TM_RUN_COUNTS_SIMD)
  if (SimdFlag().load(std::memory_order_relaxed)) any = AnySpecialAvx2(v, n);
#endif
  RunCounts c;
  if (!any) return c;
  const RunCounts all = CountRunScalar(v, n, 0, std::nanf(""), std::nanf(""));
  c.nan = all.nan;
  c.inf = all.inf;
  c.over = all.over;
  return c;
}

bool RunCountsSimd() { return SimdFlag().load(); }
void SetRunCountsSimd(bool on) {
#if defined(TM_RUN_COUNTS_SIMD)
  SimdFlag().store(on && __builtin_cpu_supports("avx2"));
#else
  (void)on;
#endif
}

}  // namespace tensormorph
