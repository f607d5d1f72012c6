#include "core/quant/hqq_kernels.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "core/quant/decode_simd.h"
#include "core/quant/hqq_fp16_kernels.h"

namespace tensormorph {
namespace {

// Where group g, which starts at element i, ends.
inline int64_t RunEnd(int64_t n, Runs runs, int64_t g, int64_t i) {
  return std::min(n, i + (g == 0 ? runs.run - runs.skip : runs.run));
}

}  // namespace

double RoundToDType(double x, DType dtype) {
  int precision = 24, min_exp = -126;
  double max = FLT_MAX;
  if (dtype == DType::kF16) {
    precision = 11, min_exp = -14, max = 65504.0;
  } else if (dtype == DType::kBF16) {
    precision = 8, min_exp = -126, max = 0x1.fep127;
  }
  uint64_t bits;
  std::memcpy(&bits, &x, 8);
  const int biased = static_cast<int>((bits >> 52) & 0x7FF);
  if (x == 0 || biased == 0x7FF) return x;
  // |x| in [2^e, 2^(e+1)) (a subnormal double is far below every target's
  // least value: its e only needs to be below min_exp).
  const int e = biased == 0 ? -1075 : biased - 1023;
  const int q = std::max(e, min_exp) - (precision - 1);  // the target's ulp
  // Adding 1.5 * 2^(q+52), whose ulp is 2^q, rounds x to a multiple of 2^q,
  // to nearest even, in one correctly rounded double addition (|x| is far
  // below 2^(q+51)); subtracting it back is exact.
  const uint64_t c_bits =
      (static_cast<uint64_t>(q + 52 + 1023) << 52) | (uint64_t{1} << 51);
  double c;
  std::memcpy(&c, &c_bits, 8);
  const double y = (x + c) - c;
  if (std::fabs(y) > max) return std::copysign(INFINITY, x);
  return std::copysign(y, x);  // a negative x rounded to zero is -0
}

void HqqGroupValuesScalar(double s, double z, int bits, DType dtype,
                          float* out) {
  for (uint32_t c = 0; c < (1u << bits); ++c) {
    const double level = RoundToDType(c - z, dtype);
    out[c] = static_cast<float>(RoundToDType(level * s, dtype));
  }
}

#if defined(__x86_64__)
namespace {

// RoundToDType on four doubles: the same addition of 1.5 * 2^(ulp + 52),
// its exponent taken per lane; infinities and NaNs pass through.
__attribute__((target("avx2"))) inline __m256d RoundAvx2(__m256d x,
                                                         int precision,
                                                         int min_exp,
                                                         double max) {
  const __m256i bits = _mm256_castpd_si256(x);
  const __m256i biased =
      _mm256_and_si256(_mm256_srli_epi64(bits, 52), _mm256_set1_epi64x(0x7FF));
  const __m256i e = _mm256_sub_epi64(biased, _mm256_set1_epi64x(1023));
  const __m256i lo = _mm256_set1_epi64x(min_exp);
  const __m256i emax = _mm256_blendv_epi8(lo, e, _mm256_cmpgt_epi64(e, lo));
  const __m256i q = _mm256_sub_epi64(emax, _mm256_set1_epi64x(precision - 1));
  const __m256i c_bits = _mm256_or_si256(
      _mm256_slli_epi64(_mm256_add_epi64(q, _mm256_set1_epi64x(52 + 1023)), 52),
      _mm256_set1_epi64x(int64_t{1} << 51));
  const __m256d c = _mm256_castsi256_pd(c_bits);
  __m256d y = _mm256_sub_pd(_mm256_add_pd(x, c), c);
  const __m256d sign = _mm256_set1_pd(-0.0);
  const __m256d mag = _mm256_andnot_pd(sign, y);
  y = _mm256_blendv_pd(mag, _mm256_set1_pd(INFINITY),
                       _mm256_cmp_pd(mag, _mm256_set1_pd(max), _CMP_GT_OQ));
  y = _mm256_or_pd(y, _mm256_and_pd(sign, x));  // x's sign, as copysign
  const __m256i special = _mm256_cmpeq_epi64(biased, _mm256_set1_epi64x(0x7FF));
  return _mm256_blendv_pd(y, x, _mm256_castsi256_pd(special));
}

__attribute__((target("avx2"))) void HqqGroupValuesAvx2(double s, double z,
                                                        int bits, DType dtype,
                                                        float* out) {
  int precision = 24, min_exp = -126;
  double max = FLT_MAX;
  if (dtype == DType::kF16) {
    precision = 11, min_exp = -14, max = 65504.0;
  } else if (dtype == DType::kBF16) {
    precision = 8, min_exp = -126, max = 0x1.fep127;
  }
  const __m256d vs = _mm256_set1_pd(s), vz = _mm256_set1_pd(z);
  const __m256d four = _mm256_set1_pd(4.0);
  __m256d c = _mm256_set_pd(3.0, 2.0, 1.0, 0.0);
  for (uint32_t i = 0; i < (1u << bits); i += 4) {
    const __m256d level =
        RoundAvx2(_mm256_sub_pd(c, vz), precision, min_exp, max);
    const __m256d v =
        RoundAvx2(_mm256_mul_pd(level, vs), precision, min_exp, max);
    _mm_storeu_ps(out + i, _mm256_cvtpd_ps(v));  // exact: v is a target value
    c = _mm256_add_pd(c, four);
  }
}

// float16 arithmetic through the F16C conversions, eight codes at a time:
// c - z is exact in float32 when z is 0 or 2^-6 <= |z| < 2^15 (the bits of
// c, below 2^8, and of z's 11-bit significand then span at most 24), and a
// product of two float16 values always is; each conversion to float16
// rounds once, to nearest even, overflowing to infinity.
__attribute__((target("avx2,f16c"))) void HqqGroupValuesF16c(float s, float z,
                                                             int bits,
                                                             float* out) {
  const __m256 vs = _mm256_set1_ps(s), vz = _mm256_set1_ps(z);
  __m256 c = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 eight = _mm256_set1_ps(8.0f);
  for (uint32_t i = 0; i < (1u << bits); i += 8) {
    const __m256 level = _mm256_cvtph_ps(_mm256_cvtps_ph(
        _mm256_sub_ps(c, vz), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256 v = _mm256_cvtph_ps(
        _mm256_cvtps_ph(_mm256_mul_ps(level, vs),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm256_storeu_ps(out + i, v);
    c = _mm256_add_ps(c, eight);
  }
}

bool HaveF16c() {
  static const bool have = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return have;
}

}  // namespace
#endif

void HqqGroupValues(double s, double z, int bits, DType dtype, float* out) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  const double az = std::fabs(z);
  if (avx2 && HaveF16c() && dtype == DType::kF16 && bits >= 3 &&
      (z == 0 || (az >= 0x1p-6 && az < 0x1p15))) {
    return HqqGroupValuesF16c(static_cast<float>(s), static_cast<float>(z),
                              bits, out);
  }
  if (avx2 && bits >= 2) return HqqGroupValuesAvx2(s, z, bits, dtype, out);
#endif
  HqqGroupValuesScalar(s, z, bits, dtype, out);
}

bool HqqFloatExact(float s, float z, DType t) {
  const float as = std::fabs(s), az = std::fabs(z);
  switch (t) {
    case DType::kF16:
      return z == 0 || !(az < 0x1p-6f);
    case DType::kBF16:
      return (z == 0 || (!(az < 0x1p-9f) && !(az >= 0x1p23f))) &&
             (s == 0 || !(as < 0x1p-126f));
    default:
      return z == 0 || !(az < 0x1p-22f);
  }
}

void HqqDecodeGroupsScalar(const HqqCodes& codes, int64_t n, Runs runs,
                           const float* s, const float* z, DType t,
                           float* out) {
  for (int64_t g = 0, i = 0; i < n; ++g) {
    for (const int64_t end = RunEnd(n, runs, g, i); i < end; ++i) {
      out[i] = HqqValue(HqqCodeAt(codes, i), s[g], z[g], t);
    }
  }
}

void HqqDecodeColumnsScalar(const HqqCodes& codes, int64_t n, HqqParamRow s,
                            HqqParamRow z, DType t, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] =
        HqqValue(HqqCodeAt(codes, i), HqqParamAt(s, i), HqqParamAt(z, i), t);
  }
}

namespace {

// Without vector units: a group's 2^bits values once, its codes looked up.
void DecodeGroupsByTable(const HqqCodes& codes, int64_t n, Runs runs,
                         const float* s, const float* z, DType t, float* out) {
  float table[256];
  for (int64_t g = 0, i = 0; i < n; ++g) {
    HqqGroupValuesScalar(s[g], z[g], codes.bits, t, table);
    for (const int64_t end = RunEnd(n, runs, g, i); i < end; ++i) {
      out[i] = table[HqqCodeAt(codes, i)];
    }
  }
}

#if defined(__x86_64__)

#define TM_AVX2 __attribute__((target("avx2,f16c")))

// `p` from element i on.
HqqParamRow Offset(HqqParamRow p, int64_t i) {
  return {.data = p.data + i * (p.dtype == DType::kF32 ? 4 : 2),
          .dtype = p.dtype};
}

// Upper halves: the vector loops leave a few elements (ragged tails, groups and
// lanes outside HqqFloatExact) to the scalar reference, compiled without
// VEX. GCC emits no vzeroupper before calls to this file's own functions,
// and legacy SSE code run with the vector registers' upper halves dirty
// stalls (measured: a fifth of axis 0's time for one lane in 1500); the
// loops clear them first.
#define TM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*(), which
// -W(maybe-)uninitialized reports inside the intrinsics' header (as
// decode_simd.cc notes).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// R on sixteen lanes: float16 through the hardware's conversions (round to
// nearest even, overflow to infinity); bfloat16 by adding half an ulp (and
// the even bit) and truncating, NaN lanes kept as they are.
template <DType kT>
TM_AVX512 inline __m512 Round512(__m512 x) {
  if constexpr (kT == DType::kF16) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(x, kNearest));
  } else if constexpr (kT == DType::kBF16) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb =
        _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i up =
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
    const __m512 r = _mm512_castsi512_ps(
        _mm512_and_si512(up, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, x);
  } else {
    return x;
  }
}

template <DType kT>
TM_AVX512 inline __m512 Value512(__m512 c, __m512 s, __m512 z) {
  return Round512<kT>(_mm512_mul_ps(Round512<kT>(_mm512_sub_ps(c, z)), s));
}

// HqqFloatExact on sixteen lanes.
template <DType kT>
TM_AVX512 inline __mmask16 Exact512(__m512 s, __m512 z) {
  const __m512 az = _mm512_abs_ps(z);
  const __mmask16 z0 = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_EQ_OQ);
  if constexpr (kT == DType::kF16) {
    return z0 | _mm512_cmp_ps_mask(az, _mm512_set1_ps(0x1p-6f), _CMP_NLT_UQ);
  } else if constexpr (kT == DType::kBF16) {
    const __mmask16 zok =
        z0 | (_mm512_cmp_ps_mask(az, _mm512_set1_ps(0x1p-9f), _CMP_NLT_UQ) &
              _mm512_cmp_ps_mask(az, _mm512_set1_ps(0x1p23f), _CMP_NGE_UQ));
    const __mmask16 sok =
        _mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_EQ_OQ) |
        _mm512_cmp_ps_mask(_mm512_abs_ps(s), _mm512_set1_ps(0x1p-126f),
                           _CMP_NLT_UQ);
    return zok & sok;
  } else {
    return z0 | _mm512_cmp_ps_mask(az, _mm512_set1_ps(0x1p-22f), _CMP_NLT_UQ);
  }
}

// The codes of elements [i, i + 16) where `m` is set (0 elsewhere; words
// past the mask are not read).
template <int kWord>
TM_AVX512 inline __m512i Codes512(const HqqCodes& c, int64_t i, __mmask16 m,
                                  __m128i shift, __m512i mask) {
  __m512i w;
  if constexpr (kWord == 4) {
    w = _mm512_maskz_loadu_epi32(m, c.data + 4 * i);
  } else {
    w = _mm512_maskz_cvtepu8_epi32(m, _mm_maskz_loadu_epi8(m, c.data + i));
  }
  return _mm512_and_si512(_mm512_srl_epi32(w, shift), mask);
}

// All sixteen, unmasked, and before any mask: the permute reads only an
// index's low four bits, so 4-bit codes need no mask.
template <int kWord>
TM_AVX512 inline __m512i Words512(const HqqCodes& c, int64_t i, __m128i shift) {
  __m512i w;
  if constexpr (kWord == 4) {
    w = _mm512_loadu_si512(c.data + 4 * i);
  } else {
    w = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(c.data + i)));
  }
  return _mm512_srl_epi32(w, shift);
}

TM_AVX512 inline __mmask16 Lanes(int64_t left) {
  return left >= 16 ? __mmask16{0xFFFF}
                    : static_cast<__mmask16>((1u << left) - 1);
}

// A group's sixteen values (codes of 4 bits or fewer) sit in one register:
// one permute looks sixteen codes up. Wider codes are computed (groups
// where float32 is exact) or gathered from the group's table.
template <DType kT, int kWord>
TM_AVX512 void Groups512(const HqqCodes& codes, int64_t n, Runs runs,
                         const float* s, const float* z, float* out) {
  const __m128i shift = _mm_cvtsi32_si128(codes.shift);
  const __m512i mask = _mm512_set1_epi32((1 << codes.bits) - 1);
  const __m512 iota =
      _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  float table[256] = {};  // entries past 2^bits are loaded, never selected
  for (int64_t g = 0, i = 0; i < n; ++g) {
    const int64_t end = RunEnd(n, runs, g, i);
    const bool exact = HqqFloatExact(s[g], z[g], kT);
    const __m512 vs = _mm512_set1_ps(s[g]), vz = _mm512_set1_ps(z[g]);
    if (!exact) {
      _mm256_zeroupper();  // upper halves: see above
      HqqGroupValues(s[g], z[g], codes.bits, kT, table);
    }
    if (codes.bits <= 4) {
      const __m512 lut =
          exact ? Value512<kT>(iota, vs, vz) : _mm512_loadu_ps(table);
      if (codes.bits == 4) {
        for (; i + 16 <= end; i += 16) {
          _mm512_storeu_ps(out + i, _mm512_permutexvar_ps(
                                        Words512<kWord>(codes, i, shift), lut));
        }
      } else {
        for (; i + 16 <= end; i += 16) {
          const __m512i c =
              _mm512_and_si512(Words512<kWord>(codes, i, shift), mask);
          _mm512_storeu_ps(out + i, _mm512_permutexvar_ps(c, lut));
        }
      }
      if (i < end) {
        const __mmask16 m = Lanes(end - i);
        _mm512_mask_storeu_ps(
            out + i, m,
            _mm512_permutexvar_ps(Codes512<kWord>(codes, i, m, shift, mask),
                                  lut));
      }
    } else {
      for (; i < end; i += 16) {
        const __mmask16 m = Lanes(end - i);
        const __m512i c = Codes512<kWord>(codes, i, m, shift, mask);
        const __m512 v = exact ? Value512<kT>(_mm512_cvtepi32_ps(c), vs, vz)
                               : _mm512_i32gather_ps(c, table, 4);
        _mm512_mask_storeu_ps(out + i, m, v);
      }
    }
    i = end;
  }
}

// Sixteen stored scales or zeros (of dtype kP) from element i on, where
// `m` is set (kFull: all sixteen, unmasked).
template <DType kP, bool kFull>
TM_AVX512 inline __m512 Params512(const uint8_t* p, int64_t i, __mmask16 m) {
  if constexpr (kP == DType::kF32) {
    return kFull ? _mm512_loadu_ps(p + 4 * i)
                 : _mm512_maskz_loadu_ps(m, p + 4 * i);
  } else {
    const __m256i h =
        kFull ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * i))
              : _mm256_maskz_loadu_epi16(m, p + 2 * i);
    if constexpr (kP == DType::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Elements [i, i + 16) where `m` is set; returns the lanes whose scale and
// zero fall outside HqqFloatExact, for the caller to redo.
template <DType kT, int kWord, DType kP, bool kFull>
TM_AVX512 inline unsigned Columns16(const HqqCodes& codes, int64_t i,
                                    __mmask16 m, __m128i shift, __m512i mask,
                                    const uint8_t* s, const uint8_t* z,
                                    float* out) {
  const __m512 vs = Params512<kP, kFull>(s, i, m);
  const __m512 vz = Params512<kP, kFull>(z, i, m);
  const __m512i q =
      kFull ? _mm512_and_si512(Words512<kWord>(codes, i, shift), mask)
            : Codes512<kWord>(codes, i, m, shift, mask);
  const __m512 v = Value512<kT>(_mm512_cvtepi32_ps(q), vs, vz);
  if constexpr (kFull) {
    _mm512_storeu_ps(out + i, v);
  } else {
    _mm512_mask_storeu_ps(out + i, m, v);
  }
  return m & ~Exact512<kT>(vs, vz);
}

// Blocks of kBlock elements: the vector loop notes the lanes outside
// HqqFloatExact, then the reference redoes them, so no call sits in the
// vector loop (a call would spill its constants: every vector register is
// the caller's to save).
template <DType kT, int kWord, DType kP>
TM_AVX512 void Columns512(const HqqCodes& codes, int64_t n, HqqParamRow s,
                          HqqParamRow z, float* out) {
  constexpr int64_t kBlock = 1024;
  const __m128i shift = _mm_cvtsi32_si128(codes.shift);
  const __m512i mask = _mm512_set1_epi32((1 << codes.bits) - 1);
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    uint16_t bad[kBlock / 16];
    unsigned any = 0;
    int64_t i = b;
    for (; i + 16 <= e; i += 16) {
      any |= bad[(i - b) / 16] =
          static_cast<uint16_t>(Columns16<kT, kWord, kP, true>(
              codes, i, 0xFFFF, shift, mask, s.data, z.data, out));
    }
    if (i < e) {
      any |= bad[(i - b) / 16] =
          static_cast<uint16_t>(Columns16<kT, kWord, kP, false>(
              codes, i, Lanes(e - i), shift, mask, s.data, z.data, out));
    }
    if (any == 0) continue;
    _mm256_zeroupper();  // upper halves: see above
    for (int64_t k = 0; k < (e - b + 15) / 16; ++k) {
      for (unsigned rest = bad[k]; rest != 0; rest &= rest - 1) {
        const int64_t x = b + 16 * k + __builtin_ctz(rest);
        out[x] = HqqValue(HqqCodeAt(codes, x), HqqParamAt(s, x),
                          HqqParamAt(z, x), kT);
      }
    }
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// The AVX2 paths: eight lanes, sixteen values in two registers, tails by
// the reference.
template <DType kT>
TM_AVX2 inline __m256 Round256(__m256 x) {
  if constexpr (kT == DType::kF16) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(x, kNearest));
  } else if constexpr (kT == DType::kBF16) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb =
        _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i up =
        _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
    const __m256 r = _mm256_castsi256_ps(
        _mm256_and_si256(up, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
    return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  } else {
    return x;
  }
}

template <DType kT>
TM_AVX2 inline __m256 Value256(__m256 c, __m256 s, __m256 z) {
  return Round256<kT>(_mm256_mul_ps(Round256<kT>(_mm256_sub_ps(c, z)), s));
}

// HqqFloatExact on eight lanes, as a bit mask.
template <DType kT>
TM_AVX2 inline unsigned Exact256(__m256 s, __m256 z) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 az = _mm256_andnot_ps(sign, z);
  const __m256 z0 = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_EQ_OQ);
  __m256 ok;
  if constexpr (kT == DType::kF16) {
    ok = _mm256_or_ps(z0,
                      _mm256_cmp_ps(az, _mm256_set1_ps(0x1p-6f), _CMP_NLT_UQ));
  } else if constexpr (kT == DType::kBF16) {
    const __m256 zok = _mm256_or_ps(
        z0,
        _mm256_and_ps(_mm256_cmp_ps(az, _mm256_set1_ps(0x1p-9f), _CMP_NLT_UQ),
                      _mm256_cmp_ps(az, _mm256_set1_ps(0x1p23f), _CMP_NGE_UQ)));
    const __m256 sok =
        _mm256_or_ps(_mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_EQ_OQ),
                     _mm256_cmp_ps(_mm256_andnot_ps(sign, s),
                                   _mm256_set1_ps(0x1p-126f), _CMP_NLT_UQ));
    ok = _mm256_and_ps(zok, sok);
  } else {
    ok = _mm256_or_ps(z0,
                      _mm256_cmp_ps(az, _mm256_set1_ps(0x1p-22f), _CMP_NLT_UQ));
  }
  return static_cast<unsigned>(_mm256_movemask_ps(ok));
}

template <int kWord>
TM_AVX2 inline __m256i Codes256(const HqqCodes& c, int64_t i, __m128i shift,
                                __m256i mask) {
  __m256i w;
  if constexpr (kWord == 4) {
    w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c.data + 4 * i));
  } else {
    w = _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c.data + i)));
  }
  return _mm256_and_si256(_mm256_srl_epi32(w, shift), mask);
}

template <DType kT, int kWord>
TM_AVX2 void Groups256(const HqqCodes& codes, int64_t n, Runs runs,
                       const float* s, const float* z, float* out) {
  const __m128i shift = _mm_cvtsi32_si128(codes.shift);
  const __m256i mask = _mm256_set1_epi32((1 << codes.bits) - 1);
  const __m256 iota = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 eight = _mm256_set1_ps(8.0f);
  float table[256] = {};  // entries past 2^bits are loaded, never selected
  for (int64_t g = 0, i = 0; i < n; ++g) {
    const int64_t end = RunEnd(n, runs, g, i);
    const bool exact = HqqFloatExact(s[g], z[g], kT);
    const __m256 vs = _mm256_set1_ps(s[g]), vz = _mm256_set1_ps(z[g]);
    if (!exact) {
      _mm256_zeroupper();  // upper halves: see above
      HqqGroupValues(s[g], z[g], codes.bits, kT, table);
    }
    if (codes.bits <= 4) {
      const __m256 lo =
          exact ? Value256<kT>(iota, vs, vz) : _mm256_loadu_ps(table);
      const __m256 hi = exact ? Value256<kT>(_mm256_add_ps(iota, eight), vs, vz)
                              : _mm256_loadu_ps(table + 8);
      for (; i + 8 <= end; i += 8) {
        const __m256i c = Codes256<kWord>(codes, i, shift, mask);
        _mm256_storeu_ps(
            out + i,
            _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, c),
                             _mm256_permutevar8x32_ps(hi, c),
                             _mm256_castsi256_ps(_mm256_slli_epi32(c, 28))));
      }
    } else {
      for (; i + 8 <= end; i += 8) {
        const __m256i c = Codes256<kWord>(codes, i, shift, mask);
        _mm256_storeu_ps(out + i,
                         exact ? Value256<kT>(_mm256_cvtepi32_ps(c), vs, vz)
                               : _mm256_i32gather_ps(table, c, 4));
      }
    }
    if (i < end) _mm256_zeroupper();  // upper halves: see above
    for (; i < end; ++i) {
      const uint32_t c = HqqCodeAt(codes, i);
      out[i] = exact ? HqqValue(c, s[g], z[g], kT) : table[c];
    }
  }
}

TM_AVX2 inline __m256 Params256(const HqqParamRow& p, int64_t i) {
  const auto* q = reinterpret_cast<const __m128i*>(p.data + 2 * i);
  switch (p.dtype) {
    case DType::kF16:
      return _mm256_cvtph_ps(_mm_loadu_si128(q));
    case DType::kBF16:
      return _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(q)), 16));
    default:
      return _mm256_loadu_ps(reinterpret_cast<const float*>(p.data + 4 * i));
  }
}

template <DType kT, int kWord>
TM_AVX2 void Columns256(const HqqCodes& codes, int64_t n, HqqParamRow s,
                        HqqParamRow z, float* out) {
  const __m128i shift = _mm_cvtsi32_si128(codes.shift);
  const __m256i mask = _mm256_set1_epi32((1 << codes.bits) - 1);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 vs = Params256(s, i), vz = Params256(z, i);
    const __m256 c = _mm256_cvtepi32_ps(Codes256<kWord>(codes, i, shift, mask));
    _mm256_storeu_ps(out + i, Value256<kT>(c, vs, vz));
    unsigned rest = ~Exact256<kT>(vs, vz) & 0xFFu;
    if (rest != 0) _mm256_zeroupper();  // upper halves: see above
    for (; rest != 0; rest &= rest - 1) {
      const int64_t k = i + __builtin_ctz(rest);
      out[k] =
          HqqValue(HqqCodeAt(codes, k), HqqParamAt(s, k), HqqParamAt(z, k), kT);
    }
  }
  if (i < n) _mm256_zeroupper();  // upper halves: see above
  HqqDecodeColumnsScalar(HqqCodes{.data = codes.data + i * codes.word_bytes,
                                  .word_bytes = codes.word_bytes,
                                  .shift = codes.shift,
                                  .bits = codes.bits},
                         n - i, Offset(s, i), Offset(z, i), kT, out + i);
}

// The kernel for (level, dtype, word): one switch, then no branch per
// element on any of them.
template <template <DType, int> class K, typename... A>
void Dispatch(DType t, int word_bytes, A... a) {
  switch (t) {
    case DType::kF16:
      return word_bytes == 4 ? K<DType::kF16, 4>::Run(a...)
                             : K<DType::kF16, 1>::Run(a...);
    case DType::kBF16:
      return word_bytes == 4 ? K<DType::kBF16, 4>::Run(a...)
                             : K<DType::kBF16, 1>::Run(a...);
    default:
      return word_bytes == 4 ? K<DType::kF32, 4>::Run(a...)
                             : K<DType::kF32, 1>::Run(a...);
  }
}

template <DType kT, int kWord>
struct G512 {
  static void Run(const HqqCodes* c, int64_t n, Runs r, const float* s,
                  const float* z, float* out) {
    Groups512<kT, kWord>(*c, n, r, s, z, out);
  }
};
template <DType kT, int kWord>
struct G256 {
  static void Run(const HqqCodes* c, int64_t n, Runs r, const float* s,
                  const float* z, float* out) {
    Groups256<kT, kWord>(*c, n, r, s, z, out);
  }
};
template <DType kT, int kWord>
struct C512 {
  static void Run(const HqqCodes* c, int64_t n, HqqParamRow s, HqqParamRow z,
                  float* out) {
    if (s.dtype != z.dtype) return HqqDecodeColumnsScalar(*c, n, s, z, kT, out);
    switch (s.dtype) {
      case DType::kF16:
        return Columns512<kT, kWord, DType::kF16>(*c, n, s, z, out);
      case DType::kBF16:
        return Columns512<kT, kWord, DType::kBF16>(*c, n, s, z, out);
      default:
        return Columns512<kT, kWord, DType::kF32>(*c, n, s, z, out);
    }
  }
};
template <DType kT, int kWord>
struct C256 {
  static void Run(const HqqCodes* c, int64_t n, HqqParamRow s, HqqParamRow z,
                  float* out) {
    Columns256<kT, kWord>(*c, n, s, z, out);
  }
};

#endif  // __x86_64__

}  // namespace

void HqqDecodeGroups(const HqqCodes& codes, int64_t n, Runs runs,
                     const float* s, const float* z, DType t, float* out) {
#if defined(__x86_64__)
  switch (ActiveDecodeSimd()) {
    case DecodeSimd::kAvx512:
      return Dispatch<G512>(t, codes.word_bytes, &codes, n, runs, s, z, out);
    case DecodeSimd::kAvx2:
      return Dispatch<G256>(t, codes.word_bytes, &codes, n, runs, s, z, out);
    default:
      break;
  }
#endif
  DecodeGroupsByTable(codes, n, runs, s, z, t, out);
}

void HqqDecodeColumns(const HqqCodes& codes, int64_t n, HqqParamRow s,
                      HqqParamRow z, DType t, float* out) {
#if defined(__x86_64__)
  switch (ActiveDecodeSimd()) {
    case DecodeSimd::kAvx512:
      if (t == DType::kF16 && s.dtype == DType::kF16 &&
          z.dtype == DType::kF16 &&
          HqqDecodeColumnsFp16(codes, n, s.data, z.data, out)) {
        return;
      }
      return Dispatch<C512>(t, codes.word_bytes, &codes, n, s, z, out);
    case DecodeSimd::kAvx2:
      return Dispatch<C256>(t, codes.word_bytes, &codes, n, s, z, out);
    default:
      break;
  }
#endif
  HqqDecodeColumnsScalar(codes, n, s, z, t, out);
}

}  // namespace tensormorph
