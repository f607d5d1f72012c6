#include "core/stats_bins.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tensormorph {

namespace {

// Floats as unsigned integers in the order of their values (-0 just below
// +0), so that a bisection over the integers is one over the floats.
uint32_t OrderKey(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  return (u & 0x80000000u) != 0 ? ~u : u | 0x80000000u;
}

float FromOrderKey(uint32_t k) {
  return std::bit_cast<float>((k & 0x80000000u) != 0 ? k & 0x7fffffffu : ~k);
}

// The vector path's table size: four registers of sixteen floats.
constexpr int kVectorBins = 64;
// Its counts of pairs of bins (AddAvx512).
constexpr size_t kPairTable = kVectorBins * kVectorBins;

#if defined(__x86_64__)
// GCC 12 warns of its own AVX-512 intrinsics' undefined operands (as
// decode_simd.cc notes).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define TM_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))

// A table of 64 floats in four registers, looked up by sixteen indices.
struct Table64 {
  __m512 t[4];
  TM_AVX512 explicit Table64(const float* p) {
    for (int k = 0; k < 4; ++k) t[k] = _mm512_loadu_ps(p + 16 * k);
  }
  TM_AVX512 __m512 operator()(__m512i idx) const {
    const __m512 low = _mm512_permutex2var_ps(t[0], idx, t[1]);
    const __m512 high = _mm512_permutex2var_ps(t[2], idx, t[3]);
    return _mm512_mask_blend_ps(
        _mm512_test_epi32_mask(idx, _mm512_set1_epi32(32)), low, high);
  }
};

// Sixteen values' bins (indices into the tables), estimated and moved one
// step where the estimate was off by one; *unsure: lanes (finite ones) that
// are still outside their bin's edges, for the scalar walk.
struct Vector16 {
  Table64 lower, upper;
  __m512 min, inv_width, top;
  TM_AVX512 Vector16(const float* lo, const float* up, float m, float inv,
                     int bins)
      : lower(lo),
        upper(up),
        min(_mm512_set1_ps(m)),
        inv_width(_mm512_set1_ps(inv)),
        top(_mm512_set1_ps(static_cast<float>(bins - 1))) {}
  TM_AVX512 __m512i Bins(__m512 f, __mmask16 finite, __mmask16* unsure) const {
    // max(NaN, 0) is 0: every lane's index is in the table.
    const __m512 a = _mm512_min_ps(
        _mm512_max_ps(_mm512_mul_ps(_mm512_sub_ps(f, min), inv_width),
                      _mm512_setzero_ps()),
        top);
    __m512i b = _mm512_cvttps_epi32(a);
    const __m512i one = _mm512_set1_epi32(1);
    const __mmask16 down =
        _mm512_mask_cmp_ps_mask(finite, f, lower(b), _CMP_LT_OQ);
    const __mmask16 up =
        _mm512_mask_cmp_ps_mask(finite, f, upper(b), _CMP_GE_OQ);
    *unsure = 0;
    if ((down | up) == 0) return b;
    b = _mm512_mask_sub_epi32(b, down, b, one);
    b = _mm512_mask_add_epi32(b, up, b, one);
    *unsure = _mm512_mask_cmp_ps_mask(finite, f, lower(b), _CMP_LT_OQ) |
              _mm512_mask_cmp_ps_mask(finite, f, upper(b), _CMP_GE_OQ);
    return b;
  }
};

TM_AVX512 __mmask16 FiniteLanes(__m512 f) {
  return _mm512_cmplt_epi32_mask(
      _mm512_and_si512(_mm512_castps_si512(f), _mm512_set1_epi32(0x7fffffff)),
      _mm512_set1_epi32(0x7f800000));
}

// BinEdges::Add sixteen values a step, counted by pairs: the bins of two
// neighbours (a non-finite value's as bin 0, taken back at the end) make
// one index of 12 bits, so a piece of values costs one increment per two
// values into a table of 64 x 64 counts (two copies, by position, so that
// equal pairs next to each other do not wait on each other), folded into
// the histogram once per call. An increment per value bounded the pass
// (F32's second pass: 6.5 ms of 16 M values). `pairs`: kPairTable * 2
// counts, scratch.
TM_AVX512 void AddAvx512(const BinEdges& edges, const Vector16& vec,
                         const float* v, int64_t n, int bins, int64_t* hist,
                         uint32_t* pairs) {
  std::memset(pairs, 0, 2 * kPairTable * sizeof(uint32_t));
  uint32_t* t0 = pairs;
  uint32_t* t1 = pairs + kPairTable;
  constexpr int64_t kPiece = 1024;
  alignas(64) uint16_t idx[kPiece / 2];
  alignas(64) int32_t fix[16];
  int64_t non_finite = 0;
  int64_t i = 0;
  while (i + 16 <= n) {
    const int64_t len = std::min(kPiece, (n - i) & ~int64_t{15});
    for (int64_t j = 0; j < len; j += 16) {
      // Values read in place from a file's mapping wait on memory without
      // it (as stats.cc's fold notes); a prefetch never faults.
      _mm_prefetch(reinterpret_cast<const char*>(v + i + j) + 2048,
                   _MM_HINT_T0);
      const __m512 f = _mm512_loadu_ps(v + i + j);
      const __mmask16 finite = FiniteLanes(f);
      non_finite += 16 - std::popcount(static_cast<unsigned>(finite));
      __mmask16 unsure;
      __m512i bin =
          _mm512_maskz_mov_epi32(finite, vec.Bins(f, finite, &unsure));
      if (unsure != 0) {
        _mm512_store_si512(fix, bin);
        for (unsigned u = unsure; u != 0; u &= u - 1) {
          const int k = std::countr_zero(u);
          fix[k] = edges.Bin(v[i + j + k]);
        }
        bin = _mm512_load_si512(fix);
      }
      // Lanes 2k and 2k + 1 as one 64-bit lane lo + hi * 2^32: its low 16
      // bits after x | x >> 26 are lo + hi * 64 (both below 64).
      const __m512i pair = _mm512_or_si512(bin, _mm512_srli_epi64(bin, 26));
      _mm_store_si128(reinterpret_cast<__m128i*>(idx + j / 2),
                      _mm512_cvtepi64_epi16(pair));
    }
    for (int64_t j = 0; j < len / 2; j += 2) {
      ++t0[idx[j]];
      ++t1[idx[j + 1]];
    }
    i += len;
  }
  // Only the first `bins` rows and columns can be counted (a bin is below
  // `bins`); hist has no more entries.
  for (int a = 0; a < bins; ++a) {
    for (int b = 0; b < bins; ++b) {
      const int64_t c = int64_t{t0[a + 64 * b]} + t1[a + 64 * b];
      hist[a] += c;
      hist[b] += c;
    }
  }
  hist[0] -= non_finite;
  for (; i < n; ++i) {
    if (std::isfinite(v[i])) ++hist[edges.Bin(v[i])];
  }
}

TM_AVX512 void Bin16Avx512(const BinEdges& edges, const Vector16& vec,
                           const float* v, int32_t* out) {
  const __m512 f = _mm512_loadu_ps(v);
  __mmask16 unsure;
  _mm512_storeu_si512(out, vec.Bins(f, FiniteLanes(f), &unsure));
  for (unsigned u = unsure; u != 0; u &= u - 1) {
    const int k = std::countr_zero(u);
    out[k] = edges.Bin(v[k]);
  }
}

#undef TM_AVX512
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // __x86_64__

constexpr int64_t kPairMinValues = 8192;
constexpr int64_t kPairMaxValues = int64_t{1} << 30;

}  // namespace

BinEdges::BinEdges(const Binner& binner, DecodeSimd simd, int64_t values)
    : binner_(binner) {
  bins_ = std::max(1, binner.bins());
  // Building costs about 32 calls of Bin a bin.
  if (!binner.Exact() || bins_ > kMaxBins || values / 64 < bins_) return;
  const double inv = 1.0 / binner.width();
  min_ = static_cast<float>(binner.min());
  inv_width_ = static_cast<float>(inv);
  const size_t size = std::max(bins_, kVectorBins);
  lower_.assign(size, std::numeric_limits<float>::infinity());
  upper_.assign(size, std::numeric_limits<float>::infinity());
  lower_[0] = -std::numeric_limits<float>::infinity();
  // lower_[j], j >= 1: the least float of bin j or more, by bisection from
  // lower_[j - 1] (Bin is monotonic); +inf where no float reaches bin j.
  const uint32_t top_key = OrderKey(FLT_MAX);
  uint32_t from = OrderKey(-FLT_MAX);
  for (int j = 1; j < bins_; ++j) {
    if (binner.Bin(FLT_MAX) < j) break;  // lower_[j..] stay +inf
    uint32_t lo = from, hi = top_key;
    if (binner.Bin(FromOrderKey(lo)) >= j) {
      hi = lo;
    } else {
      // Bin(lo) < j <= Bin(hi).
      while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        (binner.Bin(FromOrderKey(mid)) >= j ? hi : lo) = mid;
      }
    }
    lower_[j] = FromOrderKey(hi);
    from = hi;
  }
  for (int j = 0; j + 1 < bins_; ++j) upper_[j] = lower_[j + 1];
  edges_ = true;
  vectors_ = simd >= DecodeSimd::kAvx512 && bins_ <= kVectorBins;
}

int BinEdges::Estimate(float v) const {
  const float a = (v - min_) * inv_width_;
  // NaN (an overflow's inf times zero) to bin 0: the walk corrects it.
  if (!(a >= 0)) return 0;
  return a < static_cast<float>(bins_ - 1) ? static_cast<int>(a) : bins_ - 1;
}

int BinEdges::Bin(float v) const {
  return edges_ ? EdgeBin(v) : binner_.Bin(v);
}

int BinEdges::EdgeBin(float v) const {
  int b = Estimate(v);
  while (b > 0 && v < lower_[b]) --b;
  while (b + 1 < bins_ && v >= lower_[b + 1]) ++b;
  return b;
}

void BinEdges::Add(const float* v, int64_t n, int64_t* hist) const {
  if (!edges_) return binner_.Add(v, n, hist);
#if defined(__x86_64__)
  // The pair table (32 KiB to clear and fold) pays from a few thousand
  // values on; fewer (one group's, a run at a time) go one by one.
  if (vectors_ && n >= kPairMinValues) {
    if (pairs_.empty()) pairs_.resize(2 * kPairTable);
    const Vector16 vec(lower_.data(), upper_.data(), min_, inv_width_, bins_);
    // Counts of 32 bits: a call's values in pieces below 2^31.
    for (int64_t i = 0; i < n; i += kPairMaxValues) {
      AddAvx512(*this, vec, v + i, std::min(kPairMaxValues, n - i), bins_, hist,
                pairs_.data());
    }
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(v[i])) ++hist[EdgeBin(v[i])];
  }
}

void BinEdges::Bin16(const float* v, int32_t* out) const {
#if defined(__x86_64__)
  if (vectors_) {
    const Vector16 vec(lower_.data(), upper_.data(), min_, inv_width_, bins_);
    Bin16Avx512(*this, vec, v, out);
    return;
  }
#endif
  for (int k = 0; k < 16; ++k) out[k] = std::isfinite(v[k]) ? Bin(v[k]) : 0;
}

}  // namespace tensormorph
