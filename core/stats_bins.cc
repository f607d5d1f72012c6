#include "core/stats_bins.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/util/prefetch.h"

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

// The vector paths' bins: a bin in 6 bits, the AVX-512 path's table in
// four registers of sixteen floats.
constexpr int kBinBits = 6;
constexpr int kVectorBins = 1 << kBinBits;
// Their counts of pairs of bins (AddPairs), two copies.
constexpr size_t kPairTable = size_t{kVectorBins} * kVectorBins;
// A pair's index fits the 16 bits AddAvx512 narrows it to.
static_assert(2 * kBinBits <= 16);

#if defined(__x86_64__)

// The pair table's calls: from a few thousand values on (32 KiB to clear
// and fold), in pieces whose 32-bit counts cannot pass 2^31.
constexpr int64_t kPairMinValues = 8192;
constexpr int64_t kPairMaxValues = int64_t{1} << 30;

// Counts bins b[0, len) (len even, each below kVectorBins) by pairs: the
// bins of two neighbours as one index of 2 * kBinBits bits, one increment
// per two values, in two copies by position so that equal pairs next to
// each other do not wait on each other.
inline void CountPairs(const uint8_t* b, int64_t len, uint32_t* t0,
                       uint32_t* t1) {
  int64_t j = 0;
  for (; j + 4 <= len; j += 4) {
    ++t0[b[j] | b[j + 1] << kBinBits];
    ++t1[b[j + 2] | b[j + 3] << kBinBits];
  }
  for (; j + 2 <= len; j += 2) ++t0[b[j] | b[j + 1] << kBinBits];
}

// The pair counts into hist[0, bins) (only the first `bins` rows and
// columns can be counted: a bin is below `bins`, and hist has no more).
inline void FoldPairs(const uint32_t* t0, const uint32_t* t1, int bins,
                      int64_t* hist) {
  for (int a = 0; a < bins; ++a) {
    for (int b = 0; b < bins; ++b) {
      const size_t k = static_cast<size_t>(a) | size_t(b) << kBinBits;
      const int64_t c = int64_t{t0[k]} + t1[k];
      hist[a] += c;
      hist[b] += c;
    }
  }
}
#endif

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

// BinEdges::Add sixteen values a step: the bins of neighbours paired in the
// vector (a non-finite value's as bin 0, taken back at the end), a piece
// of 1,024 values at a time, then counted as CountPairs counts and folded
// once per call. An increment per value bounded the pass (F32's second
// pass: 6.5 ms of 16 M values); counting each lane straight from the
// vector waited on its store. `pairs`: 2 * kPairTable counts, scratch.
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
      PrefetchAhead<2048>(v + i + j);
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
      // bits after x | x >> (32 - kBinBits) are CountPairs' index, lo + hi
      // * 2^kBinBits (both below 2^kBinBits; the bits above are zero).
      const __m512i pair =
          _mm512_or_si512(bin, _mm512_srli_epi64(bin, 32 - kBinBits));
      _mm_store_si128(reinterpret_cast<__m128i*>(idx + j / 2),
                      _mm512_cvtepi64_epi16(pair));
    }
    for (int64_t j = 0; j < len / 2; j += 2) {
      ++t0[idx[j]];
      ++t1[idx[j + 1]];
    }
    i += len;
  }
  FoldPairs(t0, t1, bins, hist);
  hist[0] -= non_finite;
  for (; i < n; ++i) {
    if (std::isfinite(v[i])) ++hist[edges.Bin(v[i])];
  }
}

TM_AVX512 void Bin16Avx512(const BinEdges& edges, const Vector16& vec,
                           const float* v, int32_t* out, int bins) {
  const __m512 f = _mm512_loadu_ps(v);
  const __mmask16 finite = FiniteLanes(f);
  __mmask16 unsure;
  const __m512i b = vec.Bins(f, finite, &unsure);
  _mm512_storeu_si512(
      out, _mm512_mask_blend_epi32(finite, _mm512_set1_epi32(bins), b));
  for (unsigned u = unsure; u != 0; u &= u - 1) {
    const int k = std::countr_zero(u);
    out[k] = edges.Bin(v[k]);
  }
}

#undef TM_AVX512
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#define TM_AVX2 __attribute__((target("avx2,popcnt")))

// The AVX2 path has no table lookups (a 64-entry lookup is eight permutes
// there, and gathers are microcoded): a bin is taken from the estimate
// only where the estimate's error bound (Near) cannot reach an edge, and
// the other values walk (BinEdges::Bin). The bound: each float operation
// errs by at most 2^-24 of its result, min and 1/width by 2^-24 of
// themselves when rounded to float, and Binner's double arithmetic by far
// less; so the estimate errs by under 2^-21 (|v| + |min|) / width, and the
// margin is 2^-18 of that plus 2^-20 of a bin (for underflow). Equal
// floors of the estimate less and plus the margin mean Binner's floor is
// that one. A NaN anywhere (an overflow to infinity) compares unequal.
struct Near {
  __m256 min, inv_width, abs_min, top;
  TM_AVX2 Near(float m, float inv, int bins)
      : min(_mm256_set1_ps(m)),
        inv_width(_mm256_set1_ps(inv)),
        abs_min(_mm256_set1_ps(std::fabs(m))),
        top(_mm256_set1_ps(static_cast<float>(bins - 1))) {}
  // Eight values' bins where sure (*sure: bit k), 0 in the other lanes.
  TM_AVX2 __m256i Bins(__m256 f, unsigned* sure) const {
    const __m256 a = _mm256_mul_ps(_mm256_sub_ps(f, min), inv_width);
    const __m256 abs_f = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), f);
    const __m256 margin = _mm256_add_ps(
        _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(abs_f, abs_min), inv_width),
                      _mm256_set1_ps(0x1p-18f)),
        _mm256_set1_ps(0x1p-20f));
    const __m256 lo = _mm256_floor_ps(_mm256_sub_ps(a, margin));
    const __m256 hi = _mm256_floor_ps(_mm256_add_ps(a, margin));
    const __m256 ok = _mm256_cmp_ps(lo, hi, _CMP_EQ_OQ);
    *sure = static_cast<unsigned>(_mm256_movemask_ps(ok));
    // max(NaN, 0) is 0; Binner's clamp otherwise.
    const __m256 c = _mm256_min_ps(_mm256_max_ps(lo, _mm256_setzero_ps()), top);
    return _mm256_and_si256(_mm256_cvttps_epi32(c), _mm256_castps_si256(ok));
  }
};

TM_AVX2 unsigned FiniteLanes8(__m256 f) {
  const __m256i mag =
      _mm256_and_si256(_mm256_castps_si256(f), _mm256_set1_epi32(0x7fffffff));
  return static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(
      _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7f800000), mag))));
}

// AddAvx512's twin, eight values a step through Near.
TM_AVX2 void AddAvx2(const BinEdges& edges, const Near& near, const float* v,
                     int64_t n, int bins, int64_t* hist, uint32_t* pairs) {
  std::memset(pairs, 0, 2 * kPairTable * sizeof(uint32_t));
  constexpr int64_t kPiece = 1024;
  alignas(32) uint8_t b[kPiece];
  int64_t non_finite = 0;
  int64_t i = 0;
  while (i + 8 <= n) {
    const int64_t len = std::min(kPiece, (n - i) & ~int64_t{7});
    for (int64_t j = 0; j < len; j += 8) {
      PrefetchAhead<2048>(v + i + j);
      const __m256 f = _mm256_loadu_ps(v + i + j);
      const unsigned finite = FiniteLanes8(f);
      non_finite += 8 - std::popcount(finite);
      unsigned sure;
      const __m256i bin = near.Bins(f, &sure);
      // Eight 32-bit bins (below 64) to eight bytes.
      const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(bin),
                                        _mm256_extracti128_si256(bin, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(b + j),
                       _mm_packus_epi16(w, w));
      for (unsigned u = finite & ~sure; u != 0; u &= u - 1) {
        const int k = std::countr_zero(u);
        b[j + k] = static_cast<uint8_t>(edges.Bin(v[i + j + k]));
      }
      for (unsigned u = ~finite & 0xffu; u != 0; u &= u - 1) {
        b[j + std::countr_zero(u)] = 0;
      }
    }
    CountPairs(b, len, pairs, pairs + kPairTable);
    i += len;
  }
  FoldPairs(pairs, pairs + kPairTable, bins, hist);
  hist[0] -= non_finite;
  for (; i < n; ++i) {
    if (std::isfinite(v[i])) ++hist[edges.Bin(v[i])];
  }
}

TM_AVX2 void Bin16Avx2(const BinEdges& edges, const Near& near, const float* v,
                       int32_t* out, int bins) {
  for (int h = 0; h < 16; h += 8) {
    const __m256 f = _mm256_loadu_ps(v + h);
    unsigned sure;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + h),
                        near.Bins(f, &sure));
    const unsigned finite = FiniteLanes8(f);
    for (unsigned u = finite & ~sure; u != 0; u &= u - 1) {
      const int k = std::countr_zero(u);
      out[h + k] = edges.Bin(v[h + k]);
    }
    for (unsigned u = ~finite & 0xffu; u != 0; u &= u - 1) {
      out[h + std::countr_zero(u)] = bins;
    }
  }
}

#undef TM_AVX2
#endif  // __x86_64__

}  // namespace

BinEdges::BinEdges(const Binner& binner, DecodeSimd simd, int64_t values)
    : binner_(binner) {
  bins_ = std::max(1, binner.bins());
  // Building costs about 32 calls of Bin a bin.
  if (!binner.Exact() || bins_ > kMaxBins || values / 64 < bins_) return;
  const double inv = 1.0 / binner.width();
  min_ = static_cast<float>(binner.min());
  inv_width_ = static_cast<float>(inv);
  const size_t size = static_cast<size_t>(std::max(bins_, kVectorBins));
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
  if (!EstimatesNearEnough()) return;  // a range float cannot estimate
  edges_ = true;
#if defined(__x86_64__)
  if (bins_ <= kVectorBins && simd >= DecodeSimd::kAvx512) {
    path_ = Path::kAvx512;
  } else if (bins_ <= kVectorBins && simd >= DecodeSimd::kAvx2 &&
             std::fabs(min_) < 0x1p100f && std::isnormal(inv_width_) &&
             inv_width_ < 0x1p100f && inv_width_ > 0x1p-100f) {
    path_ = Path::kAvx2;  // Near's bound holds far from float's limits
  }
  // Allocated here, not in Add: Add may run under the fault guard, which
  // unwinds without destructors (core/io/fault_guard.h).
  if (path_ != Path::kScalar) pairs_.resize(2 * kPairTable);
#else
  (void)simd;
#endif
}

bool BinEdges::EstimatesNearEnough() const {
  if (!std::isfinite(min_) || !(inv_width_ > 0) || !std::isfinite(inv_width_))
    return false;
  // Estimate is monotonic, so a value of bin j (lower_[j] <= v <
  // lower_[j + 1]) has an estimate between those of lower_[j] and of the
  // float just below lower_[j + 1]: both within one bin of j means the
  // walk is a step at most.
  for (int j = 0; j < bins_; ++j) {
    const float next =
        j + 1 < bins_ ? lower_[j + 1] : std::numeric_limits<float>::infinity();
    if (!(lower_[j] < next)) continue;  // no float is in bin j
    const float last =
        std::nextafter(next, -std::numeric_limits<float>::infinity());
    if (Estimate(lower_[j]) < j - 1 || Estimate(last) > j + 1) return false;
  }
  return true;
}

int BinEdges::Estimate(float v) const {
  const float a = (v - min_) * inv_width_;
  // NaN (infinity less infinity) to bin 0: the walk corrects it.
  if (!(a >= 0)) return 0;
  return a < static_cast<float>(bins_ - 1) ? static_cast<int>(a) : bins_ - 1;
}

const char* BinEdges::PathForTesting() const {
  if (!edges_) return "binner";
  switch (path_) {
    case Path::kAvx512:
      return "avx512";
    case Path::kAvx2:
      return "avx2";
    case Path::kScalar:
      break;
  }
  return "scalar";
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
  if (path_ != Path::kScalar && n >= kPairMinValues) {
    for (int64_t i = 0; i < n; i += kPairMaxValues) {
      const int64_t m = std::min(kPairMaxValues, n - i);
      if (path_ == Path::kAvx512) {
        const Vector16 vec(lower_.data(), upper_.data(), min_, inv_width_,
                           bins_);
        AddAvx512(*this, vec, v + i, m, bins_, hist, pairs_.data());
      } else {
        const Near near(min_, inv_width_, bins_);
        AddAvx2(*this, near, v + i, m, bins_, hist, pairs_.data());
      }
    }
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(v[i])) ++hist[EdgeBin(v[i])];
  }
}

void BinEdges::Bin16(const float* v, int32_t* out, int runs) const {
#if defined(__x86_64__)
  if (path_ == Path::kAvx512) {
    const Vector16 vec(lower_.data(), upper_.data(), min_, inv_width_, bins_);
    for (int r = 0; r < runs; ++r) {
      Bin16Avx512(*this, vec, v + 16 * r, out + 16 * r, bins_);
    }
    return;
  }
  if (path_ == Path::kAvx2) {
    const Near near(min_, inv_width_, bins_);
    for (int r = 0; r < runs; ++r) {
      Bin16Avx2(*this, near, v + 16 * r, out + 16 * r, bins_);
    }
    return;
  }
#endif
  for (int i = 0; i < 16 * runs; ++i) {
    out[i] = std::isfinite(v[i]) ? Bin(v[i]) : bins_;
  }
}

}  // namespace tensormorph
