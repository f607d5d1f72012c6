#include "core/stats.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/format/stored_tensor.h"
#include "core/io/fault_guard.h"
#include "core/quant/block_util.h"
#include "core/quant/decode_simd.h"
#include "core/quant/float_formats.h"
#include "core/quant/levels.h"
#include "core/stats_bins.h"
#include "core/stats_code_blocks.h"
#include "core/stats_codes.h"
#include "core/util/error_reason.h"
#include "core/util/lane_sum.h"
#include "core/util/prefetch.h"
#include "core/util/status_macros.h"

namespace tensormorph {

namespace {

// The number of partial sums the mean and std are summed in (the contract
// in stats.h): element i of the tensor goes to lane i % kLanes.
constexpr int kLanes = kSumLanes;

// The moments, specials and zeros of the elements folded so far: each sum
// as kLanes partial sums, each lane's elements added in index order.
struct Moments {
  double sum[kLanes] = {}, sum_sq[kLanes] = {};
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  int64_t nan = 0, inf = 0, zeros = 0;
  int64_t zeros_with_ref = 0, pruned = 0;  // with a reference
  // The first zero folded (its sign), for a min or max of zero: the
  // element-order min and max keep the earlier of equal values, which
  // lanes compared apart cannot tell.
  bool have_zero = false;
  float first_zero = 0;
};

// A fold's counts of specials and zeros into `m` (with a reference: its
// zeros and those the reference has too).
void AddClassCounts(int64_t nan, int64_t inf, int64_t zeros, int64_t pruned,
                    bool with_ref, Moments* m) {
  m->nan += nan;
  m->inf += inf;
  m->zeros += zeros;
  if (with_ref) {
    m->zeros_with_ref += zeros;
    m->pruned += pruned;
  }
}

// Folds element j of v[0, n) (global index start + j), beside the reference
// x[j] when given, into `m`. A non-finite element adds +0.0 to its lane,
// which leaves the lane as it is: a lane starts at +0.0 and a sum of doubles
// is -0.0 only when both terms are, so no lane is ever -0.0. The vector
// paths (FoldBlocksAvx2, FoldBlocksAvx512) give these bits exactly: the same
// lanes, each rounded addition the same, no contraction (-ffp-contract=off).
void FoldMomentsScalar(const float* v, const float* x, int64_t n, int64_t start,
                       Moments* m) {
  float lo = m->lo, hi = m->hi;
  int64_t nan = 0, inf = 0, zeros = 0, pruned = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float f = v[j];
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    const uint32_t mag = bits & 0x7fffffffu;
    const bool finite = mag < 0x7f800000u;
    nan += mag > 0x7f800000u;
    inf += mag == 0x7f800000u;
    const double d = finite ? static_cast<double>(f) : 0.0;
    const int lane = static_cast<int>((start + j) & (kLanes - 1));
    m->sum[lane] += d;
    m->sum_sq[lane] += d * d;
    lo = finite && f < lo ? f : lo;
    hi = finite && hi < f ? f : hi;
    const bool zero = mag == 0;
    zeros += zero;
    if (x != nullptr) pruned += zero && x[j] == 0;
  }
  m->lo = lo;
  m->hi = hi;
  AddClassCounts(nan, inf, zeros, pruned, x != nullptr, m);
}

#if defined(__x86_64__)
// FoldMomentsScalar over `blocks` blocks of kLanes elements, the first at a
// global index that is a multiple of kLanes: lanes 0-3, 4-7, 8-11 and
// 12-15 in four vectors of doubles per sum, each lane's additions in index
// order, rounded once each as the scalar ones are. Min and max per float
// lane (NaN and infinities replaced by the bound that cannot win); the
// counts by popcounts of compare masks into general registers, which
// leaves the sixteen vector registers to the sums, the bounds and the
// constants: with the counts in vectors too, the sums were spilled to the
// stack and each addition waited on a store and a reload.
__attribute__((target("avx2,popcnt"))) void FoldBlocksAvx2(const float* v,
                                                           const float* x,
                                                           int64_t blocks,
                                                           Moments* m) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf_bits = _mm256_set1_epi32(0x7f800000);
  const __m256 pos_inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256 neg_inf =
      _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256d s[4], q[4];
  for (int k = 0; k < 4; ++k) {
    s[k] = _mm256_loadu_pd(m->sum + 4 * k);
    q[k] = _mm256_loadu_pd(m->sum_sq + 4 * k);
  }
  __m256 lo = _mm256_set1_ps(m->lo), hi = _mm256_set1_ps(m->hi);
  int64_t nan = 0, inf = 0, zeros = 0, pruned = 0;
  for (int64_t done = 0; done < blocks; ++done) {
    const float* b = v + done * kLanes;
    PrefetchAhead<2048>(b);
    for (int h = 0; h < 2; ++h) {
      const __m256 f = _mm256_loadu_ps(b + 8 * h);
      const __m256i mag = _mm256_and_si256(_mm256_castps_si256(f), abs_mask);
      const __m256i fin = _mm256_cmpgt_epi32(inf_bits, mag);
      const unsigned zero =
          static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(
              _mm256_cmpeq_epi32(mag, _mm256_setzero_si256()))));
      nan += std::popcount(static_cast<unsigned>(_mm256_movemask_ps(
          _mm256_castsi256_ps(_mm256_cmpgt_epi32(mag, inf_bits)))));
      inf += std::popcount(static_cast<unsigned>(_mm256_movemask_ps(
          _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, inf_bits)))));
      zeros += std::popcount(zero);
      if (x != nullptr) {
        const unsigned xz = static_cast<unsigned>(_mm256_movemask_ps(
            _mm256_cmp_ps(_mm256_loadu_ps(x + done * kLanes + 8 * h),
                          _mm256_setzero_ps(), _CMP_EQ_OQ)));
        pruned += std::popcount(zero & xz);
      }
      const __m256 finf = _mm256_castsi256_ps(fin);
      lo = _mm256_min_ps(_mm256_blendv_ps(pos_inf, f, finf), lo);
      hi = _mm256_max_ps(_mm256_blendv_ps(neg_inf, f, finf), hi);
      const __m256 fz = _mm256_and_ps(f, finf);  // non-finite: +0.0
      const __m256d d0 = _mm256_cvtps_pd(_mm256_castps256_ps128(fz));
      const __m256d d1 = _mm256_cvtps_pd(_mm256_extractf128_ps(fz, 1));
      s[2 * h] = _mm256_add_pd(s[2 * h], d0);
      s[2 * h + 1] = _mm256_add_pd(s[2 * h + 1], d1);
      q[2 * h] = _mm256_add_pd(q[2 * h], _mm256_mul_pd(d0, d0));
      q[2 * h + 1] = _mm256_add_pd(q[2 * h + 1], _mm256_mul_pd(d1, d1));
    }
  }
  AddClassCounts(nan, inf, zeros, pruned, x != nullptr, m);
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_pd(m->sum + 4 * k, s[k]);
    _mm256_storeu_pd(m->sum_sq + 4 * k, q[k]);
  }
  alignas(32) float l[8], u[8];
  _mm256_store_ps(l, lo);
  _mm256_store_ps(u, hi);
  for (int k = 0; k < 8; ++k) {
    m->lo = l[k] < m->lo ? l[k] : m->lo;
    m->hi = m->hi < u[k] ? u[k] : m->hi;
  }
}

// GCC 12 warns of its own AVX-512 intrinsics' undefined operands (as
// decode_simd.cc notes).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// FoldBlocksAvx2's fold, sixteen lanes a step: lanes 0-7 and 8-15 in one
// vector of doubles each per sum, the same additions in the same order (so
// the same bits); the classes of each element as mask registers, counted
// by popcounts. Half the instructions of the AVX2 path, whose F32 fold was
// a third of that format's statistics.
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,popcnt"))) void
FoldBlocksAvx512(const float* v, const float* x, int64_t blocks, Moments* m) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf_bits = _mm512_set1_epi32(0x7f800000);
  __m512d s0 = _mm512_loadu_pd(m->sum), s1 = _mm512_loadu_pd(m->sum + 8);
  __m512d q0 = _mm512_loadu_pd(m->sum_sq), q1 = _mm512_loadu_pd(m->sum_sq + 8);
  __m512 lo = _mm512_set1_ps(m->lo), hi = _mm512_set1_ps(m->hi);
  int64_t nan = 0, inf = 0, zeros = 0, pruned = 0;
  for (int64_t done = 0; done < blocks; ++done) {
    const float* b = v + done * kLanes;
    PrefetchAhead<2048>(b);
    const __m512 f = _mm512_loadu_ps(b);
    const __m512i mag = _mm512_and_si512(_mm512_castps_si512(f), abs_mask);
    const __mmask16 fin = _mm512_cmplt_epi32_mask(mag, inf_bits);
    const __mmask16 zero = _mm512_cmpeq_epi32_mask(mag, _mm512_setzero_si512());
    nan += std::popcount(
        static_cast<unsigned>(_mm512_cmpgt_epi32_mask(mag, inf_bits)));
    inf += std::popcount(
        static_cast<unsigned>(_mm512_cmpeq_epi32_mask(mag, inf_bits)));
    zeros += std::popcount(static_cast<unsigned>(zero));
    if (x != nullptr) {
      const __mmask16 xz = _mm512_cmp_ps_mask(
          _mm512_loadu_ps(x + done * kLanes), _mm512_setzero_ps(), _CMP_EQ_OQ);
      pruned += std::popcount(static_cast<unsigned>(zero & xz));
    }
    // min(f, lo) keeps lo on ties, as FoldBlocksAvx2's min(blend, lo) does.
    lo = _mm512_mask_min_ps(lo, fin, f, lo);
    hi = _mm512_mask_max_ps(hi, fin, f, hi);
    const __m512 fz = _mm512_maskz_mov_ps(fin, f);  // non-finite: +0.0
    const __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(fz));
    const __m512d d1 = _mm512_cvtps_pd(
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(fz), 1)));
    s0 = _mm512_add_pd(s0, d0);
    s1 = _mm512_add_pd(s1, d1);
    q0 = _mm512_add_pd(q0, _mm512_mul_pd(d0, d0));
    q1 = _mm512_add_pd(q1, _mm512_mul_pd(d1, d1));
  }
  AddClassCounts(nan, inf, zeros, pruned, x != nullptr, m);
  _mm512_storeu_pd(m->sum, s0);
  _mm512_storeu_pd(m->sum + 8, s1);
  _mm512_storeu_pd(m->sum_sq, q0);
  _mm512_storeu_pd(m->sum_sq + 8, q1);
  alignas(64) float l[16], u[16];
  _mm512_store_ps(l, lo);
  _mm512_store_ps(u, hi);
  for (int k = 0; k < 16; ++k) {
    m->lo = l[k] < m->lo ? l[k] : m->lo;
    m->hi = m->hi < u[k] ? u[k] : m->hi;
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// Values of v[0, n) counted by their top 16 bits (FineHistogram: a BF16
// value's code), the non-finite ones too: no test per element, one load
// and one increment.
void CountFine(const float* v, int64_t n, int64_t* fine) {
  for (int64_t j = 0; j < n; ++j) ++fine[std::bit_cast<uint32_t>(v[j]) >> 16];
}

// How pass 1 keys a value's fine bucket. kTop16: its float32 top 16 bits
// (CountFine; for BF16 that is its code). kF16: the float16 code of a value
// that is one (plain F16: Decode's values are float16 values exactly, so
// the conversion back is exact), through F16C.
enum class FineKey { kTop16, kF16 };

// The value of code `c` (< 2^16) counted under `key` where every bucket is
// one value (plain F16 by kF16, BF16 by kTop16).
float CodeValue(FineKey key, uint32_t c) {
  return key == FineKey::kF16 ? F16ToF32(static_cast<uint16_t>(c))
                              : std::bit_cast<float>(c << 16);
}

// A code present among a plain F16 or BF16 tensor's elements, and how many
// times.
struct CodeCount {
  uint32_t code;
  int64_t count;
};

// The sums of the mean and std of plain F16 and BF16 (stats.h): over the
// finite codes in ascending order (`present`), count times value and count
// times the value's square, each product and each addition rounded on its
// own.
void CodeOrderSums(FineKey key, const std::vector<CodeCount>& present,
                   double* sum, double* sum_sq) {
  double s = 0, q = 0;
  for (const CodeCount& c : present) {
    const double v = CodeValue(key, c.code);
    if (!std::isfinite(v)) continue;
    const double n = static_cast<double>(c.count);
    s += n * v;
    q += n * (v * v);
  }
  *sum = s;
  *sum_sq = q;
}

#if defined(__x86_64__)
// CountFine by float16 code: eight conversions at a time, each exact (the
// value is a float16's), NaN to some NaN code (which the histogram skips).
__attribute__((target("avx2,f16c"))) void CountF16CodesAvx2(const float* v,
                                                            int64_t n,
                                                            int64_t* fine) {
  alignas(16) uint16_t h[8];
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    _mm_store_si128(reinterpret_cast<__m128i*>(h),
                    _mm256_cvtps_ph(_mm256_loadu_ps(v + j), _MM_FROUND_NO_EXC));
    ++fine[h[0]];
    ++fine[h[1]];
    ++fine[h[2]];
    ++fine[h[3]];
    ++fine[h[4]];
    ++fine[h[5]];
    ++fine[h[6]];
    ++fine[h[7]];
  }
  for (; j < n; ++j) ++fine[_cvtss_sh(v[j], _MM_FROUND_NO_EXC)];
}
#endif

// The float16 code of `f`, a value Decode made of one (exactly a float16
// value): its bits moved back, the inverse of the widening; any NaN to a
// NaN code (which the fold counts as NaN, whatever its payload).
uint16_t F16CodeOf(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t e = (bits >> 23) & 0xffu, mant = bits & 0x7fffffu;
  if (e == 0xff) {
    return static_cast<uint16_t>(sign | 0x7c00u | (mant >> 13) | (mant != 0));
  }
  if (e == 0) return sign;  // zero: no float16 value is a float32 subnormal
  if (e >= 113) {           // a normal float16: exponent e - 127 + 15 >= 1
    return static_cast<uint16_t>(sign | ((e - 112) << 10) | (mant >> 13));
  }
  // A float16 subnormal, k * 2^-24 = (2^23 + mant) * 2^(e - 150).
  return static_cast<uint16_t>(sign | ((0x800000u | mant) >> (126 - e)));
}

// CountF16CodesAvx2's counts without F16C: the same codes (a finite value's
// conversion is exact either way; NaN to some NaN code).
void CountF16Codes(const float* v, int64_t n, int64_t* fine) {
  for (int64_t j = 0; j < n; ++j) ++fine[F16CodeOf(v[j])];
}

// Counts v[0, n) into `fine` by `key`: CountFine, or the float16 codes
// (through F16C where `avx2`; the same counts either way).
void CountByKey(const float* v, int64_t n, FineKey key, bool avx2,
                int64_t* fine) {
  if (key == FineKey::kTop16) {
    CountFine(v, n, fine);
    return;
  }
#if defined(__x86_64__)
  if (avx2) {
    CountF16CodesAvx2(v, n, fine);
    return;
  }
#endif
  CountF16Codes(v, n, fine);
}

// Folds v[0, n) (global indices start..start + n - 1) into `m`, in pieces
// that stay in the L1 cache for the fine count beside: the vector path of
// `simd`, from the first index at a lane-0 boundary, with the scalar path
// before and after; the same bits at every level.
void FoldMoments(const float* v, const float* x, int64_t n, int64_t start,
                 DecodeSimd simd, Moments* m, int64_t* fine,
                 FineKey key = FineKey::kTop16) {
  const bool avx2 = simd >= DecodeSimd::kAvx2;
  const int64_t zeros_before = m->zeros;
  constexpr int64_t kPiece = 4096;
  for (int64_t p = 0; p < n; p += kPiece) {
    const int64_t len = std::min(kPiece, n - p);
    const float* pv = v + p;
    const float* px = x != nullptr ? x + p : nullptr;
    int64_t j = 0;
#if defined(__x86_64__)
    if (avx2) {
      j = std::min(len, (-(start + p)) & (kLanes - 1));
      FoldMomentsScalar(pv, px, j, start + p, m);
      const int64_t blocks = (len - j) / kLanes;
      if (simd >= DecodeSimd::kAvx512) {
        FoldBlocksAvx512(pv + j, px != nullptr ? px + j : nullptr, blocks, m);
      } else {
        FoldBlocksAvx2(pv + j, px != nullptr ? px + j : nullptr, blocks, m);
      }
      j += blocks * kLanes;
    }
#endif
    FoldMomentsScalar(pv + j, px != nullptr ? px + j : nullptr, len - j,
                      start + p + j, m);
    if (fine != nullptr) CountByKey(pv, len, key, avx2, fine);
  }
  if (!m->have_zero && m->zeros > zeros_before) {
    for (int64_t j = 0; j < n; ++j) {
      if ((std::bit_cast<uint32_t>(v[j]) & 0x7fffffffu) == 0) {
        m->have_zero = true;
        m->first_zero = v[j];
        break;
      }
    }
  }
}

// A run's finite elements and those on its group's end levels.
struct EndLevelCounts {
  int64_t finite = 0, low = 0, high = 0;  // high: on range_max, not range_min
};

// As `finite && double(v) == range` for each element, in float compares
// and integer sums that vectorize (no element equals a NaN bound, and a
// non-finite one equals no finite bound).
EndLevelCounts CountAtEndLevelsScalar(const float* v, int64_t n, float lo,
                                      float hi) {
  int64_t finite = 0, low = 0, high = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float f = v[i];
    const uint32_t mag = std::bit_cast<uint32_t>(f) & 0x7fffffffu;
    const int at_low = f == lo, at_high = f == hi;
    finite += mag < 0x7f800000u;
    low += at_low;
    high += at_high & (at_low ^ 1);
  }
  return {finite, low, high};
}

#if defined(__x86_64__)
// CountAtEndLevelsScalar eight values at a time: the same float compares
// (ordered: a NaN equals nothing), counted by popcounts of their masks.
// A run is a group of 32 or so: the SSE2 loop the compiler made of the
// scalar one (64-bit sums) was a third of the first pass's own time.
__attribute__((target("avx2,popcnt"))) EndLevelCounts CountAtEndLevelsAvx2(
    const float* v, int64_t n, float lo, float hi) {
  const __m256 low_level = _mm256_set1_ps(lo), high_level = _mm256_set1_ps(hi);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf_bits = _mm256_set1_epi32(0x7f800000);
  int64_t finite = 0, low = 0, high = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_loadu_ps(v + i);
    const __m256i mag = _mm256_and_si256(_mm256_castps_si256(f), abs_mask);
    const unsigned fin = static_cast<unsigned>(_mm256_movemask_ps(
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(inf_bits, mag))));
    const unsigned at_low = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_cmp_ps(f, low_level, _CMP_EQ_OQ)));
    const unsigned at_high = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_cmp_ps(f, high_level, _CMP_EQ_OQ)));
    finite += std::popcount(fin);
    low += std::popcount(at_low);
    high += std::popcount(at_high & ~at_low);
  }
  const EndLevelCounts tail = CountAtEndLevelsScalar(v + i, n - i, lo, hi);
  return {finite + tail.finite, low + tail.low, high + tail.high};
}
#endif

// As `finite && double(v) == range` for each element of the run, the
// vector path where `avx2`; the same counts either way.
EndLevelCounts CountAtEndLevels(const float* v, int64_t n, const QuantRun& r,
                                bool avx2) {
  const float lo = AsFloatOrNaN(r.range_min), hi = AsFloatOrNaN(r.range_max);
#if defined(__x86_64__)
  if (avx2) return CountAtEndLevelsAvx2(v, n, lo, hi);
#endif
  (void)avx2;
  return CountAtEndLevelsScalar(v, n, lo, hi);
}

#if defined(__x86_64__)
// Adds the count of each code k < 16 among c[0, n) (n a multiple of 32) to
// counts[k]; returns how many it counted. 32 codes at a time, one compare
// and one subtract per level into byte counters (eight levels at a time,
// to stay in registers), summed out (psadbw) before a byte could wrap:
// about a third of an increment's cost per code, where one increment per
// code was half of what the first pass did beside its moments.
__attribute__((target("avx2"))) int64_t CountNibblesAvx2(const uint8_t* c,
                                                         int64_t n,
                                                         int64_t* counts) {
  int64_t total = 0;
  for (int half = 0; half < 2; ++half) {
    for (int64_t i = 0; i < n;) {
      const int64_t end = std::min(n, i + 255 * 32);
      __m256i acc[8];
      for (__m256i& a : acc) a = _mm256_setzero_si256();
      for (; i < end; i += 32) {
        const __m256i x =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + i));
        for (int k = 0; k < 8; ++k) {
          const __m256i eq = _mm256_cmpeq_epi8(
              x, _mm256_set1_epi8(static_cast<char>(8 * half + k)));
          acc[k] = _mm256_sub_epi8(acc[k], eq);
        }
      }
      for (int k = 0; k < 8; ++k) {
        alignas(32) uint64_t lanes[4];
        _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                           _mm256_sad_epu8(acc[k], _mm256_setzero_si256()));
        const int64_t sum =
            static_cast<int64_t>(lanes[0] + lanes[1] + lanes[2] + lanes[3]);
        counts[8 * half + k] += sum;
        total += sum;
      }
    }
  }
  return total;
}
#endif

// A histogram of 8-bit codes, in four interleaved copies so that a run of
// equal codes does not wait on its own increments.
class CodeCounter {
 public:
  // `nibbles`: the codes are of 4 bits or fewer and the CPU has AVX2: codes
  // 0..15 are counted by vector compares (CountNibblesAvx2), any other one
  // by the loop below; the same counts either way.
  void Add(const uint8_t* c, int64_t n, bool nibbles) {
    int64_t i = 0;
#if defined(__x86_64__)
    if (nibbles) {
      i = n - n % 32;
      const int64_t counted = CountNibblesAvx2(c, i, h_[1]);
      if (counted != i) {
        for (int64_t k = 0; k < i; ++k) h_[0][c[k]] += c[k] >= 16;
      }
    }
#endif
    (void)nibbles;
    for (; i + 4 <= n; i += 4) {
      ++h_[0][c[i]];
      ++h_[1][c[i + 1]];
      ++h_[2][c[i + 2]];
      ++h_[3][c[i + 3]];
    }
    for (; i < n; ++i) ++h_[0][c[i]];
  }
  // Adds the counts into `hist` (2^bits entries), each code masked to its
  // bits as Inspect's code_bits_value is.
  void AddTo(std::vector<int64_t>* hist) const {
    const size_t mask = hist->size() - 1;
    for (size_t k = 0; k < 256; ++k)
      (*hist)[k & mask] += h_[0][k] + h_[1][k] + h_[2][k] + h_[3][k];
  }

 private:
  int64_t h_[4][256] = {};
};

// A set of group ids: a bitmap for ids below the element count (ids are
// dense, so all of them), a hash set for any other; consecutive repeats
// (a group's runs, row after row) cost one comparison.
class GroupSet {
 public:
  explicit GroupSet(int64_t elements) : limit_(elements) {}
  void Insert(int64_t g) {
    if (g == last_) return;
    last_ = g;
    if (g < 0 || g >= limit_) {
      other_.insert(g);
      return;
    }
    const size_t w = static_cast<size_t>(g >> 6);
    if (w >= bits_.size()) bits_.resize(std::max(w + 1, 2 * bits_.size()));
    const uint64_t bit = uint64_t{1} << (g & 63);
    count_ += (bits_[w] & bit) == 0;
    bits_[w] |= bit;
  }
  int64_t size() const { return count_ + static_cast<int64_t>(other_.size()); }

 private:
  int64_t limit_;
  int64_t last_ = std::numeric_limits<int64_t>::min();
  std::vector<uint64_t> bits_;
  int64_t count_ = 0;
  absl::flat_hash_set<int64_t> other_;
};

// A chunk's decoded values and the runs of consecutive elements sharing a
// group: DecodeRuns where the runs' ranges are needed (level usage); else
// Decode beside GroupIds, or no ids at all for an encoding that is not
// quantized (plain dtypes, whose every element has group -1; checked on the
// first element). Never Inspect per element unless the encoding's own
// DecodeRuns does.
class ChunkReader {
 public:
  // `in_place`: plain float32 stored as such may be read where it lies
  // (Encoding::StoredF32) rather than copied; every read of values() must
  // then be under GuardedRead (in_place() says so).
  ChunkReader(const LogicalTensor& t, bool ranges, size_t capacity,
              bool in_place)
      : t_(t),
        ranges_(ranges),
        allow_in_place_(in_place),
        capacity_(capacity) {}

  // After Init, outside the fault guard (it allocates): the buffer values
  // are decoded into, unless they are read in place (then never touched:
  // no megabyte of fresh pages zeroed for nothing).
  void AllocateBuffer() {
    if (stored_ == nullptr) v_.resize(capacity_);
  }

  // REQUIRES: the tensor is not empty. Errors: as GroupIds.
  absl::Status Init() {
    if (ranges_ || t_.encoding->info().quantized || t_.num_elements == 0) {
      return absl::OkStatus();
    }
    const int64_t zero = 0;
    int64_t g = 0;
    if (absl::Status s = t_.encoding->GroupIds({&zero, 1}, &g); !s.ok())
      return s;
    plain_ = g == -1;
    if (plain_ && allow_in_place_) stored_ = t_.encoding->StoredF32();
    return absl::OkStatus();
  }

  absl::Status Read(int64_t first, int64_t m) {
    if (ranges_) {
      at_ = v_.data();
      return t_.encoding->DecodeRuns(first, m, v_.data(), &runs_);
    }
    if (absl::Status s = ReadValues(first, m); !s.ok()) return s;
    runs_.clear();
    if (plain_) {
      runs_.push_back({m, -1});
      return absl::OkStatus();
    }
    idx_.resize(static_cast<size_t>(m));
    ids_.resize(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) idx_[i] = first + i;
    if (absl::Status s = t_.encoding->GroupIds(idx_, ids_.data()); !s.ok())
      return s;
    for (int64_t i = 0; i < m; ++i) {
      if (runs_.empty() || runs_.back().group != ids_[i]) {
        runs_.push_back({0, ids_[i]});
      }
      ++runs_.back().count;
    }
    return absl::OkStatus();
  }
  absl::Status ReadValues(int64_t first, int64_t m) {
    if (stored_ != nullptr) {
      at_ = stored_ + first;
      return absl::OkStatus();
    }
    at_ = v_.data();
    return t_.encoding->Decode(first, m, v_.data());
  }
  const float* values() const { return at_; }
  bool in_place() const { return stored_ != nullptr; }
  const std::vector<QuantRun>& runs() const { return runs_; }

 private:
  const LogicalTensor& t_;
  bool ranges_;
  bool allow_in_place_;
  size_t capacity_;
  bool plain_ = false;
  const float* stored_ = nullptr;  // the elements in place, or nullptr
  const float* at_ = nullptr;      // the values of the last read
  std::vector<float> v_;
  std::vector<QuantRun> runs_;
  std::vector<int64_t> idx_, ids_;
};

constexpr int64_t kFineMinElements = int64_t{1} << 16;

// Sorts 16-bit codes ascending: by their low byte, then stably by their high
// byte (two counting passes; std::sort of a norm's 4,096 codes cost ten
// times the rest of its statistics).
void SortCodes(std::vector<uint16_t>* codes) {
  std::vector<uint16_t> other(codes->size());
  for (int shift : {0, 8}) {
    size_t start[257] = {};
    for (uint16_t c : *codes) ++start[((c >> shift) & 0xff) + 1];
    for (int b = 0; b < 256; ++b) start[b + 1] += start[b];
    for (uint16_t c : *codes) other[start[(c >> shift) & 0xff]++] = c;
    codes->swap(other);
  }
}

// Bins each finite code of `present` whole, as Binner::Add would bin each
// of its values: no edge cuts a code, so the histogram is done without a
// look at a value.
void AddCodes(FineKey key, const std::vector<CodeCount>& present,
              const Binner& binner, int64_t* hist) {
  for (const CodeCount& c : present) {
    const float v = CodeValue(key, c.code);
    if (std::isfinite(v)) hist[binner.Bin(v)] += c.count;
  }
}

// Plain F16 and BF16 values counted by their 16-bit code (FineKey), one
// value a bucket: their histogram, bounds, specials and moments are read
// off the counts.
class FineHistogram {
 public:
  static constexpr size_t kBuckets = size_t{1} << 16;
  explicit FineHistogram(bool used) : count_(used ? kBuckets : 0, 0) {}
  int64_t* counts() { return count_.data(); }

 private:
  std::vector<int64_t> count_;
};

}  // namespace

absl::Status CheckStatsRequest(const LogicalTensor& t, const LogicalTensor* ref,
                               const StatsOptions& o) {
  if (absl::Status s = CheckReference(t, ref, o.ref_rows); !s.ok()) return s;
  const int64_t n = t.num_elements;
  const bool one_group = o.group.has_value();
  const int64_t want = o.group.value_or(-1);
  if (one_group) {
    if (want < 0) {
      return RequestFieldError(
          "group", absl::StrCat("group ", want, " of tensor '", t.name,
                                "' is negative; group ids count from 0 "
                                "(ScalarInspection.group)"));
    }
    ScalarInfo first;
    if (n > 0) {
      if (absl::Status s =
              GuardedRead([&] { return t.encoding->Inspect(0, &first); });
          !s.ok()) {
        return s;
      }
    }
    if (first.group < 0) {
      return RequestFieldError(
          "group",
          absl::StrCat("tensor '", t.name, "' (", t.encoding->info().scheme,
                       n == 0 ? ", empty" : "",
                       ") has no quantization groups, so it has no group ",
                       want));
    }
    // Ids are dense in row-major order of the group grid, so the last
    // element is in the last group, except where act-order's g_idx
    // reorders columns (then the pass below finds the range).
    ScalarInfo last;
    if (absl::Status s =
            GuardedRead([&] { return t.encoding->Inspect(n - 1, &last); });
        !s.ok()) {
      return s;
    }
    if (!t.encoding->info().act_order && want > last.group) {
      return RequestFieldError(
          "group",
          absl::StrCat("group ", want, " is past the last group of tensor '",
                       t.name, "', which has groups 0..", last.group));
    }
  }
  return absl::OkStatus();
}

namespace {

// One ComputeStats call, in its steps: FirstPass (everything but the
// histogram, whose range it may find), Summarize (the statistics of the
// first pass, and the Inspects they need), HistogramPass. The state the
// steps share lives here rather than in one long function.
class StatsPass {
 public:
  // `by_codes`: take the histogram and level usage from codes per run
  // where the encoding allows (CodesPass).
  StatsPass(const LogicalTensor& t, const LogicalTensor* ref,
            const StatsOptions& o, bool by_codes);

  // REQUIRES: CheckStatsRequest(t, ref, o) is OK; called once.
  // Errors: as ComputeStats (past CheckStatsRequest's).
  absl::Status Run();
  TensorStats& stats() { return st_; }
  // After an OK Run: the encoding could not give a chunk's codes as
  // CodeLevelRuns (or a code was 16 or more), so stats() is incomplete; a
  // pass without `by_codes` gives the answer.
  bool codes_failed() const { return codes_failed_; }

 private:
  absl::Status CancelledAt(int64_t first, const char* pass) const;
  // Reads chunk [first, first + m) for the first pass: values and runs,
  // codes (and the first code with its top bit set), the reference.
  absl::Status ReadFirst(int64_t first, int64_t m);
  // The chunk's runs: group bookkeeping, end levels, and with a group asked
  // for, that group's moments and codes.
  void FoldRuns(int64_t first);
  absl::Status FirstPass();
  // With by_codes_: pass 1 is the moments alone (values, no runs or codes).
  absl::Status MomentsPass();
  // Plain F16 and BF16 without a reference: pass 1 counts codes and nothing
  // else (fine_); the specials, zeros and bounds are then read off the
  // counts (CodeSpecials), the moments too (SummarizeMoments).
  absl::Status CodeCountPass();
  // The codes of chunk [first, first + m) of a plain F16 or BF16 tensor
  // given to `add(codes, n)` (uint16_t codes): where they are stored, under
  // the fault guard (a BF16 code is its value's kTop16 key), or keyed back
  // from decoded values (exactly).
  template <typename Add>
  absl::Status ForCodes(int64_t first, int64_t m, Add add);
  // present_ from fine_'s table.
  void PresentFromTable();
  // mo_'s counts of NaN, infinities and zeros, its bounds and first zero,
  // from present_; a zero bound of both signs present takes the first
  // zero's, found by reading values up to it.
  absl::Status CodeSpecials();
  // Everything but the level usage (SummarizeLevels).
  void SummarizeMoments();
  absl::Status SummarizeLevels();
  // Reads chunk [first, first + m) for the histogram pass.
  absl::Status ReadSecond(int64_t first, int64_t m, bool values_done);
  // Bins the reference's values of the chunk (those of options.group
  // with one).
  void AddReference(const BinEdges& edges, int64_t m);
  absl::Status AddValues(const BinEdges& edges, int64_t m);
  absl::Status HistogramPass();
  // With by_codes_, pass 2, from Encoding::CodeLevelRuns or a ggml
  // tensor's stored blocks (BlocksPass), decoding nothing: per run, its
  // codes counted, and each of its 16 levels (Decode's values) binned once
  // and added with its count; the end levels, groups and code histogram
  // from the same counts (TallyRun). Sets codes_failed_ (and stops) where
  // CodeLevelRuns cannot give a chunk's codes (or a code is 16 or more).
  absl::Status CodesPass();
  // Reads chunk [first, first + m) for CodesPass: its codes and runs, as
  // AffineCodeRuns gives them where the encoding can (affine_), else with
  // their runs' levels as CodeLevelRuns gives them (level_codes_); the
  // first code with its top bit set; the reference. False where neither
  // can (the per-value pass then reports any error).
  bool ReadCodeLevels(int64_t first, int64_t m);
  // The chunk's runs as CodesPass says; false where a code is 16 or more.
  bool AddRunsByCodes(int64_t first, const BinEdges& edges);
  // The same for `codes` in `runs`, run j's levels and marks from
  // levels_of(j, lo, hi, AffineLevels*), lo and hi its end levels.
  template <typename LevelsOf>
  bool AddRuns(int64_t first, const std::vector<uint8_t>& codes,
               const std::vector<QuantRun>& runs, const BinEdges& edges,
               LevelsOf levels_of);
  // One run's share, from its codes' counts, its 16 levels and their bins
  // (BinEdges::Bin16): the histogram (each level added once with its
  // count, a non-finite one into the spare entry), end levels, groups.
  // `at`: the run's first element.
  // AddCodeCounts then adds the counts to the code histogram.
  void TallyRun(int64_t at, const QuantRun& r, const uint32_t count[16],
                const AffineLevels& levels, const int32_t bin[16]);
  // code_counts_ += the counts of `runs` runs, summed in 32 bits first (in
  // vectors: 16 additions to memory a run were a fifth of TallyRun).
  // REQUIRES: at most 2^32 - 1 codes in the runs.
  void AddCodeCounts(const uint32_t (*count)[16], int runs);
  // TallyRun's histogram: two tables of bins + 1 entries (the last for
  // non-finite levels), added into st_.histogram once the pass is done.
  void FoldTally();
  // CodesPass over ggml blocks read where they are stored (blocks_, of
  // blocks_type_'s row): each block's sub-blocks counted from its code
  // bytes, their levels as the decoder's (TallyBlocks).
  absl::Status BlocksPass(const BinEdges& edges);
  // Blocks [b0, b1): their sub-blocks' runs, counts, levels and bins, then
  // each run tallied, 64 runs at a time: TallyRun's loads of a run's counts
  // and bins, right after the vector stores that wrote them, each waited
  // on the store (a quarter of Q4_K's statistics); a batch later they come
  // from the cache. kSubs: blocks_type_->sub_blocks or more (the arrays
  // sized to it).
  template <int kSubs>
  void TallyBlocks(int64_t b0, int64_t b1, const BinEdges& edges);

  void Fold(const float* values, const float* refs, int64_t count,
            int64_t start) {
    FoldMoments(values, refs, count, start, simd_, &mo_,
                use_fine_ ? fine_.counts() : nullptr, fine_key_);
  }
  const float* RefsAt(int64_t k) {
    return ref_ != nullptr ? x_.data() + k : nullptr;
  }

  const LogicalTensor& t_;
  const LogicalTensor* ref_;
  const StatsOptions& o_;
  const int64_t n_;
  const bool one_group_;
  const int64_t want_;
  const int64_t chunk_;
  TensorStats st_;
  ChunkReader reader_;
  std::vector<float> x_;
  std::vector<uint8_t> codes_;
  CodeCounter code_counter_;
  GroupSet groups_, at_end_level_;
  Moments mo_;
  // Plain F16 or BF16 (FineCodes): fine_ counts codes, one value each.
  FineKey fine_key_ = FineKey::kTop16;
  const bool fine_codes_;
  // Their codes present and the counts, ascending (PresentFromTable; or,
  // under kFineMinElements without a reference, the codes sorted: no
  // table of 2^16 counts to clear and scan three times for a norm's few
  // thousand elements).
  std::vector<CodeCount> present_;
  // Plain F16 and BF16 counted in fine_'s table (from kFineMinElements
  // on, or with a reference: pass 1 folds the values beside).
  const bool use_fine_;
  // Codes of 4 bits or fewer, no group asked: CodesPass.
  const bool by_codes_;
  FineHistogram fine_;
  const DecodeSimd simd_;
  const bool avx2_;
  // Codes of 4 bits or fewer, counted in vectors (CodeCounter::Add).
  bool nibbles_ = false;
  bool codes_failed_ = false;
  // CodesPass' chunk: integer codes as AffineCodeRuns gives them (their
  // levels computed with their marks, in registers: through CodeLevelRuns'
  // table GPTQ g128 measured 686-689 M elements/s against 710-718), until
  // the encoding answers UNIMPLEMENTED; then from CodeLevelRuns.
  bool affine_form_ = true;
  Encoding::AffineCodes affine_;
  Encoding::LevelCodes level_codes_;
  // With by_codes_: a ggml tensor's blocks where stored (StoredCodeBlocks),
  // whose codes CodesPass reads itself; else nullptr (CodeLevelRuns).
  const uint8_t* blocks_ = nullptr;
  const CodeBlockType* blocks_type_ = nullptr;
  int64_t code_counts_[16] = {};  // CodesPass' code histogram
  std::vector<int64_t> tally_;    // TallyRun's (FoldTally)
  int64_t counted_ = 0;           // elements of the group (all: n)
  int64_t max_group_ = -1;        // the last group id seen, to name the range
  int64_t level_index_ = -1;      // an element whose group's levels are listed
  bool many_groups_ = false;      // no group asked and elements in several
  int64_t only_group_ = -1;
  // The first element whose code has its top bit set: its ScalarInfo::code
  // tells whether the format reads codes as signed.
  int64_t top_code_at_ = -1;
  uint8_t top_bit_ = 0;
};

// Whether `t`'s values are plain float16 or bfloat16 codes (every element
// a code of the format, no other parameter: PlainFloatSteps), counted by
// code, 65,536 buckets of one value each, whose moments are then the code
// order's (stats.h); and the key that counts them.
bool FineCodes(const LogicalTensor& t, FineKey* key) {
  *key = FineKey::kTop16;
  if (t.encoding->PlainFloatSteps() == nullptr) return false;
  const std::string& scheme = t.encoding->info().scheme;
  if (scheme == "F16") *key = FineKey::kF16;
  return scheme == "F16" || scheme == "BF16";
}

size_t BufferElements(const LogicalTensor& t, const StatsOptions& o) {
  const int64_t chunk = std::max<int64_t>(1, o.chunk_elements);
  return static_cast<size_t>(
      std::min(chunk, std::max<int64_t>(t.num_elements, 1)));
}

bool HasLevels(const EncodingInfo& info) {
  return info.quantized && info.bits <= 8;
}

// Where a group's values are at most 16 levels, read off its codes
// (CodesPass): codes of 4 bits or fewer. Not for one group asked (its
// elements are picked from the runs in pass 1 already).
bool ByCodes(const EncodingInfo& info, const StatsOptions& o) {
  return HasLevels(info) && info.bits <= 4 && !o.group.has_value();
}

StatsPass::StatsPass(const LogicalTensor& t, const LogicalTensor* ref,
                     const StatsOptions& o, bool by_codes)
    : t_(t),
      ref_(ref),
      o_(o),
      n_(t.num_elements),
      one_group_(o.group.has_value()),
      want_(o.group.value_or(-1)),
      chunk_(std::max<int64_t>(1, o.chunk_elements)),
      // In place only where every value is folded at once (no group
      // asked), so that each read of them can be guarded as a whole.
      reader_(t, HasLevels(t.encoding->info()), BufferElements(t, o),
              !o.group.has_value()),
      x_(ref != nullptr ? BufferElements(t, o) : 0),
      // CodesPass reads its codes with their runs (ReadCodeLevels).
      codes_(HasLevels(t.encoding->info()) &&
                     !(by_codes && ByCodes(t.encoding->info(), o))
                 ? BufferElements(t, o)
                 : 0),
      groups_(t.num_elements),
      at_end_level_(t.num_elements),
      // Plain F16 and BF16 count codes at every size: their moments come
      // from the counts (SummarizeCodes).
      fine_codes_(FineCodes(t, &fine_key_)),
      use_fine_(fine_codes_ &&
                (t.num_elements >= kFineMinElements || ref != nullptr)),
      by_codes_(by_codes && ByCodes(t.encoding->info(), o)),
      fine_(use_fine_),
      simd_(ActiveDecodeSimd()),
      avx2_(simd_ >= DecodeSimd::kAvx2) {
  const EncodingInfo& info = t.encoding->info();
  if (by_codes_) blocks_type_ = StoredCodeBlocks(t, &blocks_);
  st_.has_levels = HasLevels(info);
  st_.code_bits = info.bits;
  if (st_.has_levels) st_.code_histogram.assign(size_t{1} << info.bits, 0);
  st_.has_reference = ref != nullptr;
  top_bit_ = static_cast<uint8_t>(
      st_.has_levels && info.bits >= 1 ? 1u << (info.bits - 1) : 0u);
  nibbles_ = avx2_ && st_.has_levels && info.bits <= 4;
}

absl::Status StatsPass::Run() {
  TM_RETURN_IF_ERROR(GuardedRead([&] { return reader_.Init(); }));
  reader_.AllocateBuffer();
  if (by_codes_) {
    TM_RETURN_IF_ERROR(MomentsPass());
    SummarizeMoments();
    TM_RETURN_IF_ERROR(CodesPass());
    return codes_failed_ ? absl::OkStatus() : SummarizeLevels();
  }
  // Plain F16 and BF16 without a reference need nothing of pass 1 but
  // their codes' counts.
  if (fine_codes_ && ref_ == nullptr) {
    TM_RETURN_IF_ERROR(CodeCountPass());
  } else {
    TM_RETURN_IF_ERROR(FirstPass());
    if (fine_codes_) PresentFromTable();  // FoldMoments counted them
  }
  TM_RETURN_IF_ERROR(SummarizeLevels());
  SummarizeMoments();
  return HistogramPass();
}

absl::Status StatsPass::CancelledAt(int64_t first, const char* pass) const {
  if (!o_.cancelled || !o_.cancelled()) return absl::OkStatus();
  return absl::CancelledError(absl::StrCat("statistics of '", t_.name,
                                           "' cancelled at element ", first,
                                           " of ", n_, " (", pass, ")"));
}

absl::Status StatsPass::ReadFirst(int64_t first, int64_t m) {
  return GuardedRead([&]() -> absl::Status {
    TM_RETURN_IF_ERROR(reader_.Read(first, m));
    if (st_.has_levels) {
      TM_RETURN_IF_ERROR(t_.encoding->RawCodes(first, m, codes_.data()));
      if (top_code_at_ < 0 && top_bit_ != 0) {
        for (int64_t k = 0; k < m; ++k) {
          if ((codes_[k] & top_bit_) != 0) {
            top_code_at_ = first + k;
            break;
          }
        }
      }
    }
    return ref_ != nullptr
               ? DecodeMappedRows(*ref_, o_.ref_rows, first, m, x_.data())
               : absl::OkStatus();
  });
}

void StatsPass::FoldRuns(int64_t first) {
  const float* v = reader_.values();
  int64_t i = 0;
  for (const QuantRun& r : reader_.runs()) {
    const int64_t k = i;
    i += r.count;
    max_group_ = std::max(max_group_, r.group);
    if (one_group_ && r.group != want_) continue;
    counted_ += r.count;
    if (level_index_ < 0) {
      level_index_ = first + k;
      only_group_ = r.group;
    } else if (r.group != only_group_) {
      many_groups_ = true;
    }
    // Without a group asked for, every run is counted: the chunk's
    // elements are folded at once (FirstPass).
    if (one_group_) {
      Fold(v + k, RefsAt(k), r.count, first + k);
      if (st_.has_levels)
        code_counter_.Add(codes_.data() + k, r.count, nibbles_);
    }
    if (st_.has_levels && r.group >= 0) {
      const EndLevelCounts ends = CountAtEndLevels(v + k, r.count, r, avx2_);
      st_.at_lowest_level += ends.low;
      st_.at_highest_level += ends.high;
      if (ends.finite > 0) groups_.Insert(r.group);
      if (ends.low + ends.high > 0) at_end_level_.Insert(r.group);
    }
  }
}

absl::Status StatsPass::FirstPass() {
  for (int64_t first = 0; first < n_; first += chunk_) {
    TM_RETURN_IF_ERROR(CancelledAt(first, "first pass"));
    const int64_t m = std::min(chunk_, n_ - first);
    TM_RETURN_IF_ERROR(ReadFirst(first, m));
    FoldRuns(first);
    if (one_group_) continue;
    const float* v = reader_.values();
    if (reader_.in_place()) {
      // The mapping itself: under the guard, as Decode would read it
      // (FoldMoments allocates nothing).
      TM_RETURN_IF_ERROR(GuardedRead([&] {
        Fold(v, RefsAt(0), m, first);
        return absl::OkStatus();
      }));
    } else {
      Fold(v, RefsAt(0), m, first);
    }
    if (st_.has_levels) code_counter_.Add(codes_.data(), m, nibbles_);
  }
  if (one_group_ && counted_ == 0) {
    return RequestFieldError(
        "group",
        absl::StrCat("group ", want_, " is past the last group of tensor '",
                     t_.name, "', which has groups 0..", max_group_));
  }
  return absl::OkStatus();
}

absl::Status StatsPass::MomentsPass() {
  for (int64_t first = 0; first < n_; first += chunk_) {
    TM_RETURN_IF_ERROR(CancelledAt(first, "first pass"));
    const int64_t m = std::min(chunk_, n_ - first);
    TM_RETURN_IF_ERROR(GuardedRead([&]() -> absl::Status {
      TM_RETURN_IF_ERROR(reader_.ReadValues(first, m));
      return ref_ != nullptr
                 ? DecodeMappedRows(*ref_, o_.ref_rows, first, m, x_.data())
                 : absl::OkStatus();
    }));
    Fold(reader_.values(), RefsAt(0), m, first);
  }
  counted_ = n_;
  return absl::OkStatus();
}

template <typename Add>
absl::Status StatsPass::ForCodes(int64_t first, int64_t m, Add add) {
  const uint16_t* stored = fine_key_ == FineKey::kF16
                               ? t_.encoding->StoredF16()
                               : t_.encoding->StoredBF16();
  if (stored != nullptr) {
    return GuardedRead([&] {
      add(stored + first, m);
      return absl::OkStatus();
    });
  }
  TM_RETURN_IF_ERROR(GuardedRead([&] { return reader_.ReadValues(first, m); }));
  const float* v = reader_.values();
  uint16_t keys[1024];
  for (int64_t j = 0; j < m; j += 1024) {
    const int64_t len = std::min<int64_t>(1024, m - j);
    for (int64_t k = 0; k < len; ++k) {
      keys[k] =
          fine_key_ == FineKey::kF16
              ? F16CodeOf(v[j + k])
              : static_cast<uint16_t>(std::bit_cast<uint32_t>(v[j + k]) >> 16);
    }
    add(keys, len);
  }
  return absl::OkStatus();
}

absl::Status StatsPass::CodeCountPass() {
  if (use_fine_) {
    int64_t* fine = fine_.counts();
    for (int64_t first = 0; first < n_; first += chunk_) {
      TM_RETURN_IF_ERROR(CancelledAt(first, "first pass"));
      const int64_t m = std::min(chunk_, n_ - first);
      TM_RETURN_IF_ERROR(ForCodes(first, m, [&](const uint16_t* c, int64_t n) {
        for (int64_t j = 0; j < n; ++j) ++fine[c[j]];
      }));
    }
    PresentFromTable();
  } else {
    // Under kFineMinElements (one chunk or a few): the codes sorted.
    std::vector<uint16_t> codes;
    codes.reserve(static_cast<size_t>(n_));
    for (int64_t first = 0; first < n_; first += chunk_) {
      TM_RETURN_IF_ERROR(CancelledAt(first, "first pass"));
      const int64_t m = std::min(chunk_, n_ - first);
      TM_RETURN_IF_ERROR(ForCodes(first, m, [&](const uint16_t* c, int64_t n) {
        codes.insert(codes.end(), c, c + n);
      }));
    }
    SortCodes(&codes);
    for (size_t i = 0; i < codes.size();) {
      size_t j = i;
      while (j < codes.size() && codes[j] == codes[i]) ++j;
      present_.push_back({codes[i], static_cast<int64_t>(j - i)});
      i = j;
    }
  }
  // What FoldRuns records of a plain tensor's one run a chunk.
  counted_ = n_;
  if (n_ > 0) level_index_ = 0;
  return CodeSpecials();
}

void StatsPass::PresentFromTable() {
  const int64_t* count = fine_.counts();
  for (uint32_t c = 0; c < FineHistogram::kBuckets; ++c) {
    if (count[c] != 0) present_.push_back({c, count[c]});
  }
}

absl::Status StatsPass::CodeSpecials() {
  bool positive = false, negative = false;  // +0 and -0 present
  for (const CodeCount& c : present_) {
    const float v = CodeValue(fine_key_, c.code);
    if (std::isnan(v)) {
      mo_.nan += c.count;
    } else if (std::isinf(v)) {
      mo_.inf += c.count;
    } else {
      mo_.zeros += v == 0 ? c.count : 0;
      mo_.lo = std::min(mo_.lo, v);
      mo_.hi = std::max(mo_.hi, v);
      positive |= c.code == 0;
      negative |= c.code == 0x8000;
    }
  }
  if (!(positive || negative) || (mo_.lo != 0 && mo_.hi != 0)) {
    return absl::OkStatus();
  }
  mo_.have_zero = true;
  mo_.first_zero = negative && !positive ? -0.0f : 0.0f;
  if (!(positive && negative)) return absl::OkStatus();
  // Both signs: the first in index order (a bound of zero keeps it).
  for (int64_t first = 0; first < n_; first += chunk_) {
    TM_RETURN_IF_ERROR(CancelledAt(first, "first pass"));
    const int64_t m = std::min(chunk_, n_ - first);
    int64_t at = -1;
    TM_RETURN_IF_ERROR(GuardedRead([&]() -> absl::Status {
      TM_RETURN_IF_ERROR(reader_.ReadValues(first, m));
      const float* v = reader_.values();
      for (int64_t j = 0; j < m && at < 0; ++j) {
        if ((std::bit_cast<uint32_t>(v[j]) & 0x7fffffffu) == 0) at = j;
      }
      if (at >= 0) mo_.first_zero = reader_.values()[at];
      return absl::OkStatus();
    }));
    if (at >= 0) break;
  }
  return absl::OkStatus();
}

absl::Status StatsPass::SummarizeLevels() {
  if (st_.has_levels && by_codes_) {
    const size_t mask = st_.code_histogram.size() - 1;
    for (size_t k = 0; k < 16; ++k)
      st_.code_histogram[k & mask] += code_counts_[k];
  } else if (st_.has_levels) {
    code_counter_.AddTo(&st_.code_histogram);
  }
  if (top_code_at_ >= 0) {
    ScalarInfo s;
    TM_RETURN_IF_ERROR(
        GuardedRead([&] { return t_.encoding->Inspect(top_code_at_, &s); }));
    st_.codes_signed = s.code < 0;
  }
  if (level_index_ >= 0 && !many_groups_) {
    ScalarInfo s;
    TM_RETURN_IF_ERROR(
        GuardedRead([&] { return t_.encoding->Inspect(level_index_, &s); }));
    st_.levels = GroupLevels(s);
  }
  st_.groups = groups_.size();
  st_.groups_at_end_level = at_end_level_.size();
  for (int64_t c : st_.code_histogram) st_.levels_used += c > 0;
  return absl::OkStatus();
}

void StatsPass::SummarizeMoments() {
  st_.count = counted_;
  st_.nan_count = mo_.nan;
  st_.inf_count = mo_.inf;
  st_.zeros = mo_.zeros;
  st_.pruned_zeros = mo_.pruned;
  st_.induced_zeros = mo_.zeros_with_ref - mo_.pruned;
  const int64_t finite = counted_ - st_.nan_count - st_.inf_count;
  if (finite > 0) {
    // A min or max of zero is the first zero in index order, as the
    // element-order comparison keeps it (+0 and -0 compare equal).
    const double lo = mo_.lo == 0 ? mo_.first_zero : mo_.lo;
    const double hi = mo_.hi == 0 ? mo_.first_zero : mo_.hi;
    st_.min = lo;
    st_.max = hi;
    double sum = SumOfLanes(mo_.sum), sum_sq = SumOfLanes(mo_.sum_sq);
    if (fine_codes_) CodeOrderSums(fine_key_, present_, &sum, &sum_sq);
    st_.mean = sum / finite;
    st_.std = std::sqrt(std::max(0.0, sum_sq / finite - st_.mean * st_.mean));
    st_.absmax = std::max(std::fabs(lo), std::fabs(hi));
  }
  st_.sparsity = counted_ > 0 ? static_cast<double>(st_.zeros) / counted_ : 0;
}

absl::Status StatsPass::ReadSecond(int64_t first, int64_t m, bool values_done) {
  // One group: the values come with their groups, to pick the group's.
  return GuardedRead([&]() -> absl::Status {
    if (one_group_) {
      TM_RETURN_IF_ERROR(reader_.Read(first, m));
    } else if (!values_done) {
      TM_RETURN_IF_ERROR(reader_.ReadValues(first, m));
    }
    return ref_ != nullptr
               ? DecodeMappedRows(*ref_, o_.ref_rows, first, m, x_.data())
               : absl::OkStatus();
  });
}

void StatsPass::AddReference(const BinEdges& edges, int64_t m) {
  int64_t* hist = st_.reference_histogram.data();
  auto add = [&](const float* x, int64_t count) { edges.Add(x, count, hist); };
  if (!one_group_) {
    add(x_.data(), m);
    return;
  }
  int64_t i = 0;
  for (const QuantRun& r : reader_.runs()) {
    if (r.group == want_) add(x_.data() + i, r.count);
    i += r.count;
  }
}

absl::Status StatsPass::AddValues(const BinEdges& edges, int64_t m) {
  const float* v = reader_.values();
  auto add = [&](const float* values, int64_t count) {
    edges.Add(values, count, st_.histogram.data());
  };
  if (!one_group_) {
    if (!reader_.in_place()) {
      add(v, m);
      return absl::OkStatus();
    }
    // In place: under the guard (binning allocates nothing).
    return GuardedRead([&] {
      add(v, m);
      return absl::OkStatus();
    });
  }
  int64_t i = 0;
  for (const QuantRun& r : reader_.runs()) {
    if (r.group == want_) add(v + i, r.count);
    i += r.count;
  }
  return absl::OkStatus();
}

absl::Status StatsPass::CodesPass() {
  st_.hist_min = o_.range_min.value_or(st_.min);
  st_.hist_max = o_.range_max.value_or(st_.max);
  const int bins = std::max(1, o_.bins);
  st_.histogram.assign(bins, 0);
  if (ref_ != nullptr) st_.reference_histogram.assign(bins, 0);
  const BinEdges edges(Binner(st_.hist_min, st_.hist_max, bins), simd_, n_);
  tally_.assign(2 * (static_cast<size_t>(bins) + 1), 0);
  if (blocks_ != nullptr) {
    TM_RETURN_IF_ERROR(BlocksPass(edges));
    FoldTally();
    if (ref_ == nullptr) return absl::OkStatus();
  }
  for (int64_t first = 0; first < n_; first += chunk_) {
    TM_RETURN_IF_ERROR(CancelledAt(first, "histogram pass"));
    const int64_t m = std::min(chunk_, n_ - first);
    if (blocks_ != nullptr) {  // only the reference's values to read
      TM_RETURN_IF_ERROR(GuardedRead([&] {
        return DecodeMappedRows(*ref_, o_.ref_rows, first, m, x_.data());
      }));
    } else if (!ReadCodeLevels(first, m) || !AddRunsByCodes(first, edges)) {
      codes_failed_ = true;
      return absl::OkStatus();
    }
    if (ref_ != nullptr) AddReference(edges, m);
  }
  if (blocks_ == nullptr) FoldTally();
  return absl::OkStatus();
}

void StatsPass::AddCodeCounts(const uint32_t (*count)[16], int runs) {
  uint32_t sum[16] = {};
  for (int r = 0; r < runs; ++r) {
    for (int c = 0; c < 16; ++c) sum[c] += count[r][c];
  }
  for (int c = 0; c < 16; ++c) code_counts_[c] += sum[c];
}

void StatsPass::FoldTally() {
  const size_t odd = tally_.size() / 2;
  for (size_t b = 0; b < st_.histogram.size(); ++b) {
    st_.histogram[b] += tally_[b] + tally_[odd + b];
  }
}

bool StatsPass::ReadCodeLevels(int64_t first, int64_t m) {
  const absl::Status s = GuardedRead([&]() -> absl::Status {
    if (affine_form_) {
      const absl::Status a = t_.encoding->AffineCodeRuns(first, m, &affine_);
      if (a.code() != absl::StatusCode::kUnimplemented) TM_RETURN_IF_ERROR(a);
      affine_form_ = a.ok();
    }
    if (!affine_form_) {
      TM_RETURN_IF_ERROR(t_.encoding->CodeLevelRuns(first, m, &level_codes_));
    }
    const uint8_t* codes =
        affine_form_ ? affine_.codes.data() : level_codes_.codes.data();
    if (top_code_at_ < 0 && top_bit_ != 0) {
      for (int64_t k = 0; k < m; ++k) {
        if ((codes[k] & top_bit_) != 0) {
          top_code_at_ = first + k;
          break;
        }
      }
    }
    return ref_ != nullptr
               ? DecodeMappedRows(*ref_, o_.ref_rows, first, m, x_.data())
               : absl::OkStatus();
  });
  return s.ok();
}

bool StatsPass::AddRunsByCodes(int64_t first, const BinEdges& edges) {
  if (affine_form_) {
    const Encoding::AffineCodes& a = affine_;
    return AddRuns(first, a.codes, a.runs, edges,
                   [&](size_t j, float lo, float hi, AffineLevels* levels) {
                     ComputeAffineLevels(a.scale[j], a.bias[j], a.flip, lo, hi,
                                         avx2_, levels);
                   });
  }
  const Encoding::LevelCodes& l = level_codes_;
  return AddRuns(first, l.codes, l.runs, edges,
                 [&](size_t j, float lo, float hi, AffineLevels* levels) {
                   MarkLevels(l.level.data() + 16 * j, lo, hi, avx2_, levels);
                 });
}

template <typename LevelsOf>
bool StatsPass::AddRuns(int64_t first, const std::vector<uint8_t>& codes,
                        const std::vector<QuantRun>& runs,
                        const BinEdges& edges, LevelsOf levels_of) {
  const int64_t size = static_cast<int64_t>(codes.size());
  int64_t i = 0;
  for (size_t j = 0; j < runs.size(); ++j) {
    const QuantRun& r = runs[j];
    const int64_t k = i;
    i += r.count;
    uint32_t count[16];
    if (r.count > size - k ||
        !CountCodes(codes.data() + k, r.count, simd_, count)) {
      return false;
    }
    AffineLevels levels;
    levels_of(j, AsFloatOrNaN(r.range_min), AsFloatOrNaN(r.range_max), &levels);
    int32_t bin[16];
    edges.Bin16(levels.level, bin);
    TallyRun(first + k, r, count, levels, bin);
    for (int c = 0; c < 16; ++c) code_counts_[c] += count[c];
  }
  return true;
}

void StatsPass::TallyRun(int64_t at, const QuantRun& r,
                         const uint32_t count[16], const AffineLevels& levels,
                         const int32_t bin[16]) {
  max_group_ = std::max(max_group_, r.group);
  if (level_index_ < 0) {
    level_index_ = at;
    only_group_ = r.group;
  } else if (r.group != only_group_) {
    many_groups_ = true;
  }
  // Each element of code c is level c, so the counts stand for the
  // values: CountAtEndLevels and Binner per element. Every level is added,
  // without a branch: a non-finite one's bin is the spare entry (Bin16),
  // and even and odd codes go to two tables, so that neighbouring levels
  // in one bin do not wait on each other's increment.
  int64_t* hist = tally_.data();
  const size_t odd = tally_.size() / 2;
  for (int c = 0; c < 16; c += 2) {
    hist[bin[c]] += count[c];
    hist[odd + bin[c + 1]] += count[c + 1];
  }
  // The run's codes less those on non-finite levels (mostly none): walking
  // the finite levels' bits instead was a chain of dependent steps, 45% of
  // the run's time.
  int64_t finite = r.count, low = 0, high = 0;
  for (uint32_t u = ~levels.finite & 0xffffu; u != 0; u &= u - 1)
    finite -= count[std::countr_zero(u)];
  for (uint32_t u = levels.low; u != 0; u &= u - 1)
    low += count[std::countr_zero(u)];
  for (uint32_t u = levels.high; u != 0; u &= u - 1)
    high += count[std::countr_zero(u)];
  if (r.group < 0) return;
  st_.at_lowest_level += low;
  st_.at_highest_level += high;
  if (finite > 0) groups_.Insert(r.group);
  if (low + high > 0) at_end_level_.Insert(r.group);
}

absl::Status StatsPass::BlocksPass(const BinEdges& edges) {
  const int64_t elems = blocks_type_->elements;
  const int64_t blocks = n_ / elems;
  const int64_t per_poll = std::max<int64_t>(1, chunk_ / elems);
  const int subs = blocks_type_->sub_blocks;
  for (int64_t b0 = 0; b0 < blocks; b0 += per_poll) {
    TM_RETURN_IF_ERROR(CancelledAt(b0 * elems, "histogram pass"));
    const int64_t b1 = std::min(blocks, b0 + per_poll);
    // The blocks are the file's mapped bytes, read in place under the
    // guard. Nothing here holds a resource across a read of them (a fault
    // unwinds by siglongjmp): the locals are plain arrays, and TallyRun's
    // one allocation, GroupSet's bitmap growing, completes between reads.
    TM_RETURN_IF_ERROR(GuardedRead([&] {
      if (subs == 1) {
        TallyBlocks<1>(b0, b1, edges);
      } else if (subs <= 8) {
        TallyBlocks<8>(b0, b1, edges);
      } else {
        TallyBlocks<kMaxCodeSubBlocks>(b0, b1, edges);
      }
      return absl::OkStatus();
    }));
  }
  return absl::OkStatus();
}

template <int kSubs>
void StatsPass::TallyBlocks(int64_t b0, int64_t b1, const BinEdges& edges) {
  const CodeBlockType& type = *blocks_type_;
  const int subs = kSubs == 1 ? 1 : type.sub_blocks;  // <= kSubs
  const int64_t sub_elems = type.elements / subs;
  constexpr int kBatch = 64 / kSubs;  // blocks
  QuantRun runs[kBatch][kSubs];
  uint32_t counts[kBatch][kSubs][16];
  AffineLevels levels[kBatch][kSubs];
  int32_t bin[kBatch][kSubs][16];
  for (int64_t start = b0; start < b1; start += kBatch) {
    const int nb = static_cast<int>(std::min<int64_t>(kBatch, b1 - start));
    for (int k = 0; k < nb; ++k) {
      const uint8_t* p = blocks_ + (start + k) * type.bytes;
      type.runs(p, (start + k) * subs, runs[k]);
      type.count(p, simd_, counts[k]);
      type.levels(p, runs[k], avx2_, levels[k]);
      if (top_code_at_ < 0) {
        const int e = type.first_high_code(p);
        if (e >= 0) top_code_at_ = (start + k) * type.elements + e;
      }
    }
    // The runs' levels side by side, binned a batch a call (the edge table
    // loaded into registers once).
    float level[kBatch][kSubs][16];
    for (int k = 0; k < nb; ++k) {
      for (int s = 0; s < subs; ++s) {
        std::memcpy(level[k][s], levels[k][s].level, sizeof(level[k][s]));
      }
      if (subs < kSubs) edges.Bin16(level[k][0], bin[k][0], subs);
    }
    if (subs == kSubs) edges.Bin16(level[0][0], bin[0][0], nb * kSubs);
    for (int k = 0; k < nb; ++k) {
      const int64_t first = (start + k) * type.elements;
      for (int s = 0; s < subs; ++s) {
        TallyRun(first + s * sub_elems, runs[k][s], counts[k][s], levels[k][s],
                 bin[k][s]);
      }
      AddCodeCounts(counts[k], subs);
    }
  }
}

absl::Status StatsPass::HistogramPass() {
  st_.hist_min = o_.range_min.value_or(st_.min);
  st_.hist_max = o_.range_max.value_or(st_.max);
  const int bins = std::max(1, o_.bins);
  st_.histogram.assign(bins, 0);
  const Binner binner(st_.hist_min, st_.hist_max, bins);
  // Plain F16 and BF16 codes are binned whole; other values one by one.
  const bool values_done = fine_codes_;
  if (values_done) AddCodes(fine_key_, present_, binner, st_.histogram.data());
  // The source's values, binned alike, need the pass whatever the codes.
  if (ref_ != nullptr) st_.reference_histogram.assign(bins, 0);
  if (values_done && ref_ == nullptr) return absl::OkStatus();
  const BinEdges edges(binner, simd_, counted_);
  for (int64_t first = 0; first < n_; first += chunk_) {
    TM_RETURN_IF_ERROR(CancelledAt(first, "histogram pass"));
    const int64_t m = std::min(chunk_, n_ - first);
    TM_RETURN_IF_ERROR(ReadSecond(first, m, values_done));
    if (ref_ != nullptr) AddReference(edges, m);
    if (!values_done) TM_RETURN_IF_ERROR(AddValues(edges, m));
  }
  return absl::OkStatus();
}

// Whether CodesPass applies to `t` and pays: it reads codes through
// Encoding::CodeLevelRuns (conventions' groups: integer codes, codebooks,
// MLX and HQQ), which the first 8192 elements must take, and its work is
// per run and per level a run uses, so it wants runs long beside their 16
// levels: 32 or more on average. Measured: GPTQ int4 in groups of 32 by
// codes 312-318 M elements/s against 226-229 by value, groups of 128
// 613-675 against 333-343; NF4 (blocks of 64) 580-609 against 38-48 (a
// codebook's DecodeRuns is a run per element), MLX int4 g64 568-609
// against 457-467, gpt-oss MXFP4 (groups of 32) 403-414 against 32-46.
// (Shorter runs are not measured; ggml's blocks, not of that form, read by
// DecodeRuns with each level checked against its elements took Q4_K from
// 403 to 231.)
bool RunsLongEnough(const LogicalTensor& t, const StatsOptions& o) {
  constexpr int64_t kMinMeanRun = 32;
  if (!ByCodes(t.encoding->info(), o) || t.num_elements == 0) return false;
  const int64_t m = std::min<int64_t>(t.num_elements, 8192);
  Encoding::LevelCodes probe;
  const absl::Status s =
      GuardedRead([&] { return t.encoding->CodeLevelRuns(0, m, &probe); });
  return s.ok() && !probe.runs.empty() &&
         m >= kMinMeanRun * static_cast<int64_t>(probe.runs.size());
}

// Which pass ComputeStats takes (StatsPathForTesting).
StatsPath PathOf(const LogicalTensor& t, const StatsOptions& o) {
  const uint8_t* blocks;
  if (ByCodes(t.encoding->info(), o) && StoredCodeBlocks(t, &blocks) != nullptr)
    return StatsPath::kStoredBlocks;
  return RunsLongEnough(t, o) ? StatsPath::kCodeRuns : StatsPath::kValues;
}

}  // namespace

absl::StatusOr<TensorStats> ComputeStats(const LogicalTensor& t,
                                         const LogicalTensor* ref,
                                         const StatsOptions& o) {
  TM_RETURN_IF_ERROR(CheckStatsRequest(t, ref, o));
  StatsPass pass(t, ref, o, PathOf(t, o) != StatsPath::kValues);
  TM_RETURN_IF_ERROR(pass.Run());
  if (!pass.codes_failed()) return std::move(pass.stats());
  StatsPass by_values(t, ref, o, /*by_codes=*/false);
  TM_RETURN_IF_ERROR(by_values.Run());
  return std::move(by_values.stats());
}

StatsPath StatsPathForTesting(const LogicalTensor& t, const StatsOptions& o) {
  return PathOf(t, o);
}

}  // namespace tensormorph
