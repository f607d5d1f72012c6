#include "core/quant/hqq_fp16_kernels.h"

#include "core/quant/decode_simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tensormorph {

#if defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 12
namespace {

#define TM_AVX512FP16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512fp16")))

// GCC 12's AVX-512 conversions pass _mm512_undefined_*(), which
// -W(maybe-)uninitialized reports inside the intrinsics' header (as
// decode_simd.cc notes).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

bool HaveFp16() {
  static const bool have = __builtin_cpu_supports("avx512fp16");
  return have;
}

// Elements [i, i + 32) where `m` is set: the codes (bytes, shifted and
// masked) converted to float16 exactly, minus the zeros, times the scales,
// each op rounded once to float16, then widened to float32 (exact).
template <bool kFull>
TM_AVX512FP16 inline void Columns32(const uint8_t* w, const uint8_t* s,
                                    const uint8_t* z, int64_t i, __mmask32 m,
                                    __m128i shift, __m512i mask, float* out) {
  const __m256i bytes =
      kFull ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i))
            : _mm256_maskz_loadu_epi8(m, w + i);
  const __m512i c = _mm512_and_si512(
      _mm512_srl_epi16(_mm512_cvtepu8_epi16(bytes), shift), mask);
  const __m512i sh = kFull ? _mm512_loadu_si512(s + 2 * i)
                           : _mm512_maskz_loadu_epi16(m, s + 2 * i);
  const __m512i zh = kFull ? _mm512_loadu_si512(z + 2 * i)
                           : _mm512_maskz_loadu_epi16(m, z + 2 * i);
  const __m512h v = _mm512_mul_ph(
      _mm512_sub_ph(_mm512_cvtepi16_ph(c), _mm512_castsi512_ph(zh)),
      _mm512_castsi512_ph(sh));
  const __m512i vi = _mm512_castph_si512(v);
  const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(vi));
  const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(vi, 1));
  if constexpr (kFull) {
    _mm512_storeu_ps(out + i, lo);
    _mm512_storeu_ps(out + i + 16, hi);
  } else {
    _mm512_mask_storeu_ps(out + i, static_cast<__mmask16>(m), lo);
    _mm512_mask_storeu_ps(out + i + 16, static_cast<__mmask16>(m >> 16), hi);
  }
}

TM_AVX512FP16 void ColumnsFp16(const HqqCodes& codes, int64_t n,
                               const uint8_t* s, const uint8_t* z, float* out) {
  const __m128i shift = _mm_cvtsi32_si128(codes.shift);
  const __m512i mask =
      _mm512_set1_epi16(static_cast<int16_t>((1 << codes.bits) - 1));
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    Columns32<true>(codes.data, s, z, i, 0xFFFFFFFFu, shift, mask, out);
  }
  if (i < n) {
    const __mmask32 m = static_cast<__mmask32>((uint64_t{1} << (n - i)) - 1);
    Columns32<false>(codes.data, s, z, i, m, shift, mask, out);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace

bool HqqDecodeColumnsFp16(const HqqCodes& codes, int64_t n, const uint8_t* s,
                          const uint8_t* z, float* out) {
  if (ActiveDecodeSimd() < DecodeSimd::kAvx512 || !HaveFp16() ||
      codes.word_bytes != 1) {
    return false;
  }
  ColumnsFp16(codes, n, s, z, out);
  return true;
}

#else

bool HqqDecodeColumnsFp16(const HqqCodes&, int64_t, const uint8_t*,
                          const uint8_t*, float*) {
  return false;
}

#endif

}  // namespace tensormorph
