#include "core/quant/affine_kernels.h"

#include <algorithm>
#include <vector>

#include "core/quant/decode_simd.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace tensormorph {
namespace {

// Where group g, which starts at code i, ends.
inline int64_t RunEnd(int64_t n, Runs runs, int64_t g, int64_t i) {
  return std::min(n, i + (g == 0 ? runs.run - runs.skip : runs.run));
}

}  // namespace

void DecodeAffineRunsScalar(const uint8_t* codes, int64_t n, Runs runs,
                            uint8_t flip, const int32_t* bias,
                            const float* scale, float* out) {
  for (int64_t g = 0, i = 0; i < n; ++g) {
    for (const int64_t end = RunEnd(n, runs, g, i); i < end; ++i) {
      out[i] = scale[g] * static_cast<float>(
                              static_cast<int32_t>(codes[i] ^ flip) - bias[g]);
    }
  }
}

void DecodeTableRunsScalar(const uint8_t* codes, int64_t n, Runs runs,
                           const float* table, const float* scale, float* out) {
  for (int64_t g = 0, i = 0; i < n; ++g) {
    for (const int64_t end = RunEnd(n, runs, g, i); i < end; ++i) {
      out[i] = scale[g] * table[codes[i]];
    }
  }
}

#if defined(__x86_64__)
namespace {

bool HaveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}

// CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports has no "f16c").
bool HaveF16c() {
  static const bool have = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return have;
}

__attribute__((target("avx2"))) inline __m256i Load8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Each kernel runs its vector loop over whole groups of eight and leaves a
// group's tail (and short groups) to the scalar reference.
__attribute__((target("avx2"))) void DecodeAffineRunsAvx2(
    const uint8_t* codes, int64_t n, Runs runs, uint8_t flip,
    const int32_t* bias, const float* scale, float* out) {
  const __m256i vflip = _mm256_set1_epi32(flip);
  // (A lambda would not inherit the target attribute: loops spelled out.)
  for (int64_t g = 0, i = 0; i < n; ++g) {
    const int64_t end = RunEnd(n, runs, g, i);
    const __m256i vbias = _mm256_set1_epi32(bias[g]);
    const __m256 vscale = _mm256_set1_ps(scale[g]);
    for (; i + 8 <= end; i += 8) {
      const __m256i q =
          _mm256_sub_epi32(_mm256_xor_si256(Load8(codes + i), vflip), vbias);
      _mm256_storeu_ps(out + i, _mm256_mul_ps(vscale, _mm256_cvtepi32_ps(q)));
    }
    for (; i < end; ++i) {
      out[i] = scale[g] * static_cast<float>(
                              static_cast<int32_t>(codes[i] ^ flip) - bias[g]);
    }
  }
}

// Sixteen levels fit two registers: a permute of each, chosen by bit 3.
__attribute__((target("avx2"))) void DecodeTable16RunsAvx2(const uint8_t* codes,
                                                           int64_t n, Runs runs,
                                                           const float* table,
                                                           const float* scale,
                                                           float* out) {
  const __m256 lo = _mm256_loadu_ps(table), hi = _mm256_loadu_ps(table + 8);
  const __m256i seven = _mm256_set1_epi32(7);
  for (int64_t g = 0, i = 0; i < n; ++g) {
    const int64_t end = RunEnd(n, runs, g, i);
    const __m256 vscale = _mm256_set1_ps(scale[g]);
    for (; i + 8 <= end; i += 8) {
      const __m256i idx = Load8(codes + i);
      const __m256 level = _mm256_blendv_ps(
          _mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx),
          _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, seven)));
      _mm256_storeu_ps(out + i, _mm256_mul_ps(vscale, level));
    }
    for (; i < end; ++i) out[i] = scale[g] * table[codes[i]];
  }
}

// Sign-magnitude levels (FP4 E2M1): the magnitude by one permute of the
// low eight, bit 3 of the code moved into the float's sign.
__attribute__((target("avx2"))) void DecodeSignMagnitude16RunsAvx2(
    const uint8_t* codes, int64_t n, Runs runs, const float* table,
    const float* scale, float* out) {
  const __m256 lo = _mm256_loadu_ps(table);
  const __m256i sign = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));
  int64_t g = 0, i = 0;
  if (runs.run == 16 && runs.skip == 0) {
    // NVFP4's groups of 16 are two vectors: no inner loop per group.
    for (; i + 16 <= n; i += 16, ++g) {
      const __m256 vscale = _mm256_broadcast_ss(scale + g);
      const __m256i a = Load8(codes + i), b = Load8(codes + i + 8);
      const __m256 la = _mm256_xor_ps(_mm256_permutevar8x32_ps(lo, a),
                                      _mm256_castsi256_ps(_mm256_and_si256(
                                          _mm256_slli_epi32(a, 28), sign)));
      const __m256 lb = _mm256_xor_ps(_mm256_permutevar8x32_ps(lo, b),
                                      _mm256_castsi256_ps(_mm256_and_si256(
                                          _mm256_slli_epi32(b, 28), sign)));
      _mm256_storeu_ps(out + i, _mm256_mul_ps(vscale, la));
      _mm256_storeu_ps(out + i + 8, _mm256_mul_ps(vscale, lb));
    }
  }
  for (; i < n; ++g) {
    const int64_t end = RunEnd(n, runs, g, i);
    const __m256 vscale = _mm256_set1_ps(scale[g]);
    for (; i + 8 <= end; i += 8) {
      const __m256i idx = Load8(codes + i);
      const __m256 level =
          _mm256_xor_ps(_mm256_permutevar8x32_ps(lo, idx),
                        _mm256_castsi256_ps(_mm256_and_si256(
                            _mm256_slli_epi32(idx, 28), sign)));
      _mm256_storeu_ps(out + i, _mm256_mul_ps(vscale, level));
    }
    for (; i < end; ++i) out[i] = scale[g] * table[codes[i]];
  }
}

__attribute__((target("avx2"))) void DecodeTableGatherRunsAvx2(
    const uint8_t* codes, int64_t n, Runs runs, const float* table,
    const float* scale, float* out) {
  for (int64_t g = 0, i = 0; i < n; ++g) {
    const int64_t end = RunEnd(n, runs, g, i);
    const __m256 vscale = _mm256_set1_ps(scale[g]);
    for (; i + 8 <= end; i += 8) {
      const __m256 level = _mm256_i32gather_ps(table, Load8(codes + i), 4);
      _mm256_storeu_ps(out + i, _mm256_mul_ps(vscale, level));
    }
    for (; i < end; ++i) out[i] = scale[g] * table[codes[i]];
  }
}

// FP8 E4M3 levels without a lookup: moved into binary16's fields, the
// exponent bias 15 instead of 7, the hardware's exact half-to-float
// conversion gives level * 2^-8 (subnormals included), and * 256 is exact.
// The NaN codes (0x7F, 0xFF) have no binary16 twin: eight codes holding one
// take the table.
__attribute__((target("avx2,f16c"))) void DecodeE4M3RunsAvx2(
    const uint8_t* codes, int64_t n, Runs runs, const float* table,
    const float* scale, float* out) {
  const __m128i sign = _mm_set1_epi16(0x80), magnitude = _mm_set1_epi16(0x7F);
  const __m256 k256 = _mm256_set1_ps(256.0f);
  for (int64_t g = 0, i = 0; i < n; ++g) {
    const int64_t end = RunEnd(n, runs, g, i);
    const __m256 vscale = _mm256_set1_ps(scale[g]);
    for (; i + 8 <= end; i += 8) {
      const __m128i b = _mm_cvtepu8_epi16(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
      const __m128i mag = _mm_and_si128(b, magnitude);
      if (_mm_movemask_epi8(_mm_cmpeq_epi16(mag, magnitude)) != 0) {
        for (int k = 0; k < 8; ++k) out[i + k] = scale[g] * table[codes[i + k]];
        continue;
      }
      const __m128i half = _mm_or_si128(
          _mm_slli_epi16(_mm_and_si128(b, sign), 8), _mm_slli_epi16(mag, 7));
      const __m256 level = _mm256_mul_ps(_mm256_cvtph_ps(half), k256);
      _mm256_storeu_ps(out + i, _mm256_mul_ps(vscale, level));
    }
    for (; i < end; ++i) out[i] = scale[g] * table[codes[i]];
  }
}

// The AVX-512 table kernels (F, BW, VL): sixteen codes a step, the tail of
// a group masked rather than left to a scalar loop.
#define TM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))

// GCC 12's AVX-512 conversions and permutes pass _mm512_undefined_*(), which
// -W(maybe-)uninitialized reports inside the intrinsics' header (as
// decode_simd.cc notes).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

TM_AVX512 inline __mmask16 Lanes(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF)
                    : static_cast<__mmask16>((1u << left) - 1);
}

// Sixteen levels are one register: one permute looks sixteen codes up.
TM_AVX512 inline __m512 Table16(__m128i codes, __m512 levels, __m512 vscale) {
  return _mm512_mul_ps(
      vscale, _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(codes), levels));
}

TM_AVX512 void DecodeTable16RunsAvx512(const uint8_t* codes, int64_t n,
                                       Runs runs, const float* table,
                                       const float* scale, float* out) {
  const __m512 levels = _mm512_loadu_ps(table);
  int64_t g = 0, i = 0;
  if (runs.run == 16 && runs.skip == 0) {
    // NVFP4's groups of 16 are one vector each: no loop per group.
    for (; i + 16 <= n; i += 16, ++g) {
      const __m128i c =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
      _mm512_storeu_ps(out + i, Table16(c, levels, _mm512_set1_ps(scale[g])));
    }
  }
  for (; i < n; ++g) {
    const int64_t end = RunEnd(n, runs, g, i);
    const __m512 vscale = _mm512_set1_ps(scale[g]);
    for (; i + 16 <= end; i += 16) {
      const __m128i c =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
      _mm512_storeu_ps(out + i, Table16(c, levels, vscale));
    }
    if (i < end) {
      const __mmask16 m = Lanes(end - i);
      _mm512_mask_storeu_ps(
          out + i, m,
          Table16(_mm_maskz_loadu_epi8(m, codes + i), levels, vscale));
    }
    i = end;
  }
}

// FP8 E4M3 levels computed as DecodeE4M3RunsAvx2 computes them (binary16's
// fields, the exact conversion, * 256); the NaN codes (0x7F, 0xFF) take the
// table's NaN, blended in before the scale multiplies, as the scalar's
// product of the scale and a NaN level is NaN.
TM_AVX512 inline __m512 E4M3Levels(__m128i codes, __m512 nan) {
  const __m256i b = _mm256_cvtepu8_epi16(codes);
  const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi16(0x7F));
  const __m256i half = _mm256_or_si256(
      _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8),
      _mm256_slli_epi16(mag, 7));
  return _mm512_mask_blend_ps(
      _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7F)),
      _mm512_mul_ps(_mm512_cvtph_ps(half), _mm512_set1_ps(256.0f)), nan);
}

TM_AVX512 void DecodeE4M3RunsAvx512(const uint8_t* codes, int64_t n, Runs runs,
                                    const float* table, const float* scale,
                                    float* out) {
  const __m512 nan = _mm512_set1_ps(table[0x7F]);
  int64_t g = 0, i = 0;
  if (runs.run == 32 && runs.skip == 0) {
    // MXFP8's groups of 32 are two vectors: no loop per group.
    for (; i + 32 <= n; i += 32, ++g) {
      const __m512 vscale = _mm512_set1_ps(scale[g]);
      const __m128i a =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
      const __m128i b =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i + 16));
      _mm512_storeu_ps(out + i, _mm512_mul_ps(vscale, E4M3Levels(a, nan)));
      _mm512_storeu_ps(out + i + 16, _mm512_mul_ps(vscale, E4M3Levels(b, nan)));
    }
  }
  for (; i < n; ++g) {
    const int64_t end = RunEnd(n, runs, g, i);
    const __m512 vscale = _mm512_set1_ps(scale[g]);
    for (; i + 16 <= end; i += 16) {
      const __m128i c =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
      _mm512_storeu_ps(out + i, _mm512_mul_ps(vscale, E4M3Levels(c, nan)));
    }
    if (i < end) {
      const __mmask16 m = Lanes(end - i);
      _mm512_mask_storeu_ps(
          out + i, m,
          _mm512_mul_ps(vscale,
                        E4M3Levels(_mm_maskz_loadu_epi8(m, codes + i), nan)));
    }
    i = end;
  }
}

// Sixteen nibble codes from 8 bytes: each byte doubled, widened to a dword
// and shifted right by 0 or 4 (4 or 0, high nibble first) leaves code j in
// the low 4 bits of lane j, all the permute reads.
TM_AVX512 inline __m512 Nibbles16(__m128i raw, __m512i shift, __m512 levels,
                                  __m512 vscale) {
  const __m512i idx = _mm512_srlv_epi32(
      _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(raw, raw)), shift);
  return _mm512_mul_ps(vscale, _mm512_permutexvar_ps(idx, levels));
}

TM_AVX512 void DecodeNibbleTableRunsAvx512(const uint8_t* packed, int64_t n,
                                           int64_t run, bool high_first,
                                           const float* table,
                                           const float* scale, float* out) {
  const __m512 levels = _mm512_loadu_ps(table);
  const __m512i shift =
      high_first
          ? _mm512_setr_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0)
          : _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
  int64_t i = 0;
  for (int64_t g = 0; i + run <= n; ++g) {
    const __m512 vscale = _mm512_set1_ps(scale[g]);
    for (const int64_t end = i + run; i < end; i += 16) {
      const __m128i raw =
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + i / 2));
      _mm512_storeu_ps(out + i, Nibbles16(raw, shift, levels, vscale));
    }
  }
  for (; i < n; i += 16) {
    const int64_t left = n - i;
    const __mmask16 bytes = Lanes(left >= 16 ? 8 : (left + 1) / 2);
    const __m128i raw = _mm_maskz_loadu_epi8(bytes, packed + i / 2);
    _mm512_mask_storeu_ps(
        out + i, Lanes(left),
        Nibbles16(raw, shift, levels, _mm512_set1_ps(scale[i / run])));
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace
#endif

bool DecodeNibbleTableRuns(const uint8_t* packed, int64_t n, Runs runs,
                           bool high_first, const float* table,
                           const float* scale, float* out) {
#if defined(__x86_64__)
  if (ActiveDecodeSimd() >= DecodeSimd::kAvx512 && runs.skip == 0 &&
      runs.run > 0 && runs.run % 16 == 0) {
    DecodeNibbleTableRunsAvx512(packed, n, runs.run, high_first, table, scale,
                                out);
    return true;
  }
#endif
  (void)packed, (void)n, (void)runs, (void)high_first, (void)table;
  (void)scale, (void)out;
  return false;
}

void DecodeAffineRuns(const uint8_t* codes, int64_t n, Runs runs, uint8_t flip,
                      const int32_t* bias, const float* scale, float* out) {
#if defined(__x86_64__)
  // Under the level cap as every decoder is, so that tests reach the scalar
  // reference on any CPU.
  if (ActiveDecodeSimd() >= DecodeSimd::kAvx2 && HaveAvx2()) {
    return DecodeAffineRunsAvx2(codes, n, runs, flip, bias, scale, out);
  }
#endif
  DecodeAffineRunsScalar(codes, n, runs, flip, bias, scale, out);
}

void DecodeTableRuns(const uint8_t* codes, int64_t n, Runs runs,
                     const float* table, int table_size, Codebook book,
                     const float* scale, float* out) {
#if defined(__x86_64__)
  const DecodeSimd level = ActiveDecodeSimd();
  if (level >= DecodeSimd::kAvx512) {
    if (book == Codebook::kFp8E4M3) {
      return DecodeE4M3RunsAvx512(codes, n, runs, table, scale, out);
    }
    if (table_size == 16) {
      return DecodeTable16RunsAvx512(codes, n, runs, table, scale, out);
    }
  }
  if (level < DecodeSimd::kAvx2) {
    return DecodeTableRunsScalar(codes, n, runs, table, scale, out);
  }
  if (book == Codebook::kFp8E4M3 && HaveAvx2() && HaveF16c()) {
    return DecodeE4M3RunsAvx2(codes, n, runs, table, scale, out);
  }
  if (HaveAvx2()) {
    if (book == Codebook::kSignMagnitude16) {
      return DecodeSignMagnitude16RunsAvx2(codes, n, runs, table, scale, out);
    }
    if (table_size == 16) {
      return DecodeTable16RunsAvx2(codes, n, runs, table, scale, out);
    }
    return DecodeTableGatherRunsAvx2(codes, n, runs, table, scale, out);
  }
#endif
  (void)table_size;
  (void)book;
  DecodeTableRunsScalar(codes, n, runs, table, scale, out);
}

const uint8_t* SixteenCodesRepeated(int64_t n) {
  thread_local std::vector<uint8_t> codes;
  for (size_t k = codes.size(); k < static_cast<size_t>(n); ++k) {
    codes.push_back(static_cast<uint8_t>(k % 16));
  }
  return codes.data();
}

}  // namespace tensormorph
