#include "core/quant/mlx_kernels.h"

#include <algorithm>
#include <cmath>

#include "core/quant/decode_simd.h"
#include "core/quant/float_formats.h"
#include "core/quant/mlx_round_simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tensormorph {
namespace {

// Where group g, which starts at code i, ends.
inline int64_t RunEnd(int64_t n, Runs runs, int64_t g, int64_t i) {
  return std::min(n, i + (g == 0 ? runs.run - runs.skip : runs.run));
}

}  // namespace

float RoundToBF16(float x) {
  if (std::isnan(x)) return BitsToF32(0x7FC00000u);
  uint32_t u = F32ToBits(x);
  u += ((u >> 16) & 1) + 0x7FFFu;
  return BitsToF32(u & 0xFFFF0000u);
}

float RoundToF16(float x) {
  if (std::isnan(x)) return BitsToF32(0x7FC00000u);
  const uint32_t all = F32ToBits(x);
  const uint16_t sign = static_cast<uint16_t>((all >> 16) & 0x8000u);
  const uint32_t u = all & 0x7FFFFFFFu;
  uint16_t h;
  if (u >= 0x477FF000u) {
    h = 0x7C00;  // 65520 and beyond round to infinity
  } else if (u < 0x38800000u) {
    // Below 2^-14: a multiple of 2^-24, rounded to nearest even (the
    // scaling by 2^24 is exact, nearbyint rounds ties to even).
    h = static_cast<uint16_t>(std::nearbyint(std::fabs(x) * 0x1p24f));
  } else {
    const uint32_t r = u + 0xFFFu + ((u >> 13) & 1);
    h = static_cast<uint16_t>((r - 0x38000000u) >> 13);
  }
  return F16ToF32(static_cast<uint16_t>(sign | h));
}

float RoundTo(DType t, float x) {
  switch (t) {
    case DType::kBF16:
      return RoundToBF16(x);
    case DType::kF16:
      return RoundToF16(x);
    default:
      return x;
  }
}

void MlxAffineDecodeScalar(const uint8_t* q, int64_t n, Runs runs,
                           const float* s, const float* b, DType t,
                           float* out) {
  for (int64_t g = 0, i = 0; i < n; ++g) {
    for (const int64_t end = RunEnd(n, runs, g, i); i < end; ++i) {
      out[i] = MlxAffineValue(q[i], s[g], b[g], t);
    }
  }
}

void MlxFloatDecodeScalar(const uint8_t* q, int64_t n, Runs runs,
                          const float* table, const float* s, float* out) {
  for (int64_t g = 0, i = 0; i < n; ++g) {
    for (const int64_t end = RunEnd(n, runs, g, i); i < end; ++i) {
      out[i] = MlxFloatValue(table[q[i]], s[g]);
    }
  }
}

#if defined(__x86_64__)
namespace {

bool UseAvx2() { return ActiveDecodeSimd() >= DecodeSimd::kAvx2; }

// RoundTo(kT, .) on eight lanes, NaN made 0x7FC00000 as the scalar does.
// kNan: x may be NaN (a group whose scale or bias is not finite; with both
// finite, q * s and q * s + b never are).
template <DType kT, bool kNan>
__attribute__((target("avx2,f16c"))) inline __m256 RoundVec(__m256 x) {
  __m256 r = x;
  if constexpr (kT == DType::kBF16) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb =
        _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i up =
        _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
    r = _mm256_castsi256_ps(
        _mm256_and_si256(up, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  } else if constexpr (kT == DType::kF16) {
    r = _mm256_cvtph_ps(
        _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
    return x;
  }
  if constexpr (!kNan) return r;
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  return _mm256_blendv_ps(r, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)),
                          nan);
}

__attribute__((target("avx2"))) inline __m256i LoadCodes(const uint8_t* q) {
  return _mm256_cvtepu8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
}

bool UseAvx512() { return ActiveDecodeSimd() >= DecodeSimd::kAvx512; }

#define TM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))

// GCC 12's AVX-512 conversions, permutes and inserts pass
// _mm512_undefined_*(), a self-initialised variable that
// -W(maybe-)uninitialized reports inside the intrinsics' header (as
// decode_simd.cc notes).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// The AVX-512 paths: a group at a time, as the AVX2 ones below but on
// sixteen lanes; a group's sixteen values (4-bit codes or fewer) are one
// register, so one permute looks sixteen codes up.
TM_AVX512 inline __m512i LoadCodes16(const uint8_t* q) {
  return _mm512_cvtepu8_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
}

template <DType kT, bool kNan>
TM_AVX512 void AffineGroup512(const uint8_t* q, int64_t i, int64_t end, float s,
                              float b, int bits, float* out) {
  const __m512 vs = _mm512_set1_ps(s), vb = _mm512_set1_ps(b);
  if (bits <= 4 && end - i >= 16) {
    const __m512 iota =
        _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 lut = mlx_simd::Round<kT, kNan>(
        _mm512_add_ps(mlx_simd::Round<kT, kNan>(_mm512_mul_ps(iota, vs)), vb));
    for (; i + 16 <= end; i += 16) {
      _mm512_storeu_ps(out + i, _mm512_permutexvar_ps(LoadCodes16(q + i), lut));
    }
  } else {
    for (; i + 16 <= end; i += 16) {
      const __m512 c = _mm512_cvtepi32_ps(LoadCodes16(q + i));
      const __m512 p = mlx_simd::Round<kT, kNan>(_mm512_mul_ps(c, vs));
      _mm512_storeu_ps(out + i,
                       mlx_simd::Round<kT, kNan>(_mm512_add_ps(p, vb)));
    }
  }
  for (; i < end; ++i) out[i] = MlxAffineValue(q[i], s, b, kT);
}

template <DType kT>
TM_AVX512 void AffineAvx512(const uint8_t* q, int64_t n, Runs runs,
                            const float* s, const float* b, int bits,
                            float* out) {
  for (int64_t g = 0, i = 0; i < n; ++g) {
    const int64_t end = RunEnd(n, runs, g, i);
    if (std::isfinite(s[g]) && std::isfinite(b[g])) {
      AffineGroup512<kT, false>(q, i, end, s[g], b[g], bits, out);
    } else {
      AffineGroup512<kT, true>(q, i, end, s[g], b[g], bits, out);
    }
    i = end;
  }
}

TM_AVX512 void FloatAvx512(const uint8_t* q, int64_t n, Runs runs,
                           const float* table, int bits, const float* s,
                           float* out) {
  for (int64_t g = 0, i = 0; i < n; ++g) {
    const int64_t end = RunEnd(n, runs, g, i);
    const __m512 vs = _mm512_set1_ps(s[g]);
    if (bits == 4) {
      // E2M1 levels are finite: a NaN needs a scale that is not.
      const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(table), vs);
      const __m512 lut = std::isfinite(s[g])
                             ? mlx_simd::Round<DType::kBF16, false>(x)
                             : mlx_simd::Round<DType::kBF16, true>(x);
      for (; i + 16 <= end; i += 16) {
        _mm512_storeu_ps(out + i,
                         _mm512_permutexvar_ps(LoadCodes16(q + i), lut));
      }
    } else {
      for (; i + 16 <= end; i += 16) {
        const __m512 level = _mm512_i32gather_ps(LoadCodes16(q + i), table, 4);
        _mm512_storeu_ps(out + i, mlx_simd::Round<DType::kBF16, true>(
                                      _mm512_mul_ps(level, vs)));
      }
    }
    for (; i < end; ++i) out[i] = MlxFloatValue(table[q[i]], s[g]);
    i = end;
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Multiply, then add: two roundings, as the scalar (no FMA).
template <DType kT, bool kNan>
__attribute__((target("avx2,f16c"))) inline __m256 Affine8(__m256 q, __m256 s,
                                                           __m256 b) {
  return RoundVec<kT, kNan>(
      _mm256_add_ps(RoundVec<kT, kNan>(_mm256_mul_ps(q, s)), b));
}

// Sixteen table entries by code: two 8-entry permutes, chosen by bit 3.
__attribute__((target("avx2"))) inline __m256 Lookup16(__m256 lo, __m256 hi,
                                                       __m256i c) {
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, c),
                          _mm256_permutevar8x32_ps(hi, c),
                          _mm256_castsi256_ps(_mm256_slli_epi32(c, 28)));
}

// One group [i, end): codes of 4 bits or fewer through the group's sixteen
// values (computed as the direct path computes them), wider ones directly.
template <DType kT, bool kNan>
__attribute__((target("avx2,f16c"))) void AffineGroup(const uint8_t* q,
                                                      int64_t i, int64_t end,
                                                      float s, float b,
                                                      int bits, float* out) {
  const __m256 vs = _mm256_set1_ps(s), vb = _mm256_set1_ps(b);
  if (bits <= 4 && end - i >= 16) {
    const __m256 iota = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 lo = Affine8<kT, kNan>(iota, vs, vb);
    const __m256 hi =
        Affine8<kT, kNan>(_mm256_add_ps(iota, _mm256_set1_ps(8)), vs, vb);
    for (; i + 8 <= end; i += 8) {
      _mm256_storeu_ps(out + i, Lookup16(lo, hi, LoadCodes(q + i)));
    }
  } else {
    for (; i + 8 <= end; i += 8) {
      _mm256_storeu_ps(
          out + i,
          Affine8<kT, kNan>(_mm256_cvtepi32_ps(LoadCodes(q + i)), vs, vb));
    }
  }
  for (; i < end; ++i) out[i] = MlxAffineValue(q[i], s, b, kT);
}

template <DType kT>
__attribute__((target("avx2,f16c"))) void AffineAvx2(const uint8_t* q,
                                                     int64_t n, Runs runs,
                                                     const float* s,
                                                     const float* b, int bits,
                                                     float* out) {
  for (int64_t g = 0, i = 0; i < n; ++g) {
    const int64_t end = RunEnd(n, runs, g, i);
    if (std::isfinite(s[g]) && std::isfinite(b[g])) {
      AffineGroup<kT, false>(q, i, end, s[g], b[g], bits, out);
    } else {
      AffineGroup<kT, true>(q, i, end, s[g], b[g], bits, out);
    }
    i = end;
  }
}

__attribute__((target("avx2,f16c"))) void FloatAvx2(const uint8_t* q, int64_t n,
                                                    Runs runs,
                                                    const float* table,
                                                    int bits, const float* s,
                                                    float* out) {
  for (int64_t g = 0, i = 0; i < n; ++g) {
    const int64_t end = RunEnd(n, runs, g, i);
    const __m256 vs = _mm256_set1_ps(s[g]);
    if (bits == 4) {
      const __m256 lo = RoundVec<DType::kBF16, true>(
          _mm256_mul_ps(_mm256_loadu_ps(table), vs));
      const __m256 hi = RoundVec<DType::kBF16, true>(
          _mm256_mul_ps(_mm256_loadu_ps(table + 8), vs));
      for (; i + 8 <= end; i += 8) {
        _mm256_storeu_ps(out + i, Lookup16(lo, hi, LoadCodes(q + i)));
      }
    } else {
      for (; i + 8 <= end; i += 8) {
        const __m256 level = _mm256_i32gather_ps(table, LoadCodes(q + i), 4);
        _mm256_storeu_ps(
            out + i, RoundVec<DType::kBF16, true>(_mm256_mul_ps(level, vs)));
      }
    }
    for (; i < end; ++i) out[i] = MlxFloatValue(table[q[i]], s[g]);
  }
}

}  // namespace

void MlxAffineDecode(const uint8_t* q, int64_t n, Runs runs, const float* s,
                     const float* b, DType t, int bits, float* out) {
  if (UseAvx512()) {
    switch (t) {
      case DType::kBF16:
        return AffineAvx512<DType::kBF16>(q, n, runs, s, b, bits, out);
      case DType::kF16:
        return AffineAvx512<DType::kF16>(q, n, runs, s, b, bits, out);
      default:
        return AffineAvx512<DType::kF32>(q, n, runs, s, b, bits, out);
    }
  }
  if (!UseAvx2()) return MlxAffineDecodeScalar(q, n, runs, s, b, t, out);
  switch (t) {
    case DType::kBF16:
      return AffineAvx2<DType::kBF16>(q, n, runs, s, b, bits, out);
    case DType::kF16:
      return AffineAvx2<DType::kF16>(q, n, runs, s, b, bits, out);
    default:
      return AffineAvx2<DType::kF32>(q, n, runs, s, b, bits, out);
  }
}

void MlxFloatDecode(const uint8_t* q, int64_t n, Runs runs, const float* table,
                    int bits, const float* s, float* out) {
  if (UseAvx512()) return FloatAvx512(q, n, runs, table, bits, s, out);
  if (!UseAvx2()) return MlxFloatDecodeScalar(q, n, runs, table, s, out);
  FloatAvx2(q, n, runs, table, bits, s, out);
}

#else

void MlxAffineDecode(const uint8_t* q, int64_t n, Runs runs, const float* s,
                     const float* b, DType t, int bits, float* out) {
  (void)bits;
  MlxAffineDecodeScalar(q, n, runs, s, b, t, out);
}

void MlxFloatDecode(const uint8_t* q, int64_t n, Runs runs, const float* table,
                    int bits, const float* s, float* out) {
  (void)bits;
  MlxFloatDecodeScalar(q, n, runs, table, s, out);
}

#endif

}  // namespace tensormorph
