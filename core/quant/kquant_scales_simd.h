// ScaleMinK4 (kquant_scales.h) of a Q4_K or Q5_K block's eight sub-blocks at
// once, in a vector: for the passes that read those blocks themselves (the
// check's marks, the heatmap's mean) rather than through a decoder, where
// unpacking them one sub-block at a time was a large share of the work.
#ifndef TENSORMORPH_CORE_QUANT_KQUANT_SCALES_SIMD_H_
#define TENSORMORPH_CORE_QUANT_KQUANT_SCALES_SIMD_H_

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

namespace tensormorph {

// From the 12 packed bytes at `scales` (16 bytes are read: in a Q4_K or
// Q5_K block, more of the block follows them): ScaleMinK4(j)'s scale in
// byte j and its min in byte 8 + j, j = 0..7. Bytes 0-3 and 8-11 are a
// byte's low six bits; 4-7 a low nibble and 12-15 a high one, each under the
// top two bits of an earlier byte.
__attribute__((target("avx2"), always_inline)) inline __m128i ScalesAndMinsK4(
    const uint8_t* scales) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales));
  const __m128i a = _mm_shuffle_epi8(
      q, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i top = _mm_shuffle_epi8(
      q, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  const __m128i low =
      _mm_and_si128(a, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63,
                                     63, 0, 0, 0, 0));
  const __m128i high_nibble = _mm_and_si128(
      _mm_srli_epi16(a, 4),
      _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
  // (byte >> 6) << 4, masked first so that no bit crosses into a neighbour.
  const __m128i top_bits = _mm_srli_epi16(
      _mm_and_si128(top, _mm_set1_epi8(static_cast<char>(0xc0))), 2);
  return _mm_or_si128(_mm_or_si128(low, high_nibble), top_bits);
}

// d * sc and dmin * m of the eight sub-blocks (ScalesAndMinsK4's bytes), as
// the decoders compute them: the 6-bit integers exact in float, one
// rounding each.
__attribute__((target("avx2"), always_inline)) inline void SubBlockParamsK4(
    const uint8_t* scales, float d, float dmin, __m256* d1, __m256* m1) {
  const __m128i sm = ScalesAndMinsK4(scales);
  *d1 = _mm256_mul_ps(_mm256_set1_ps(d),
                      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm)));
  *m1 = _mm256_mul_ps(
      _mm256_set1_ps(dmin),
      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))));
}

}  // namespace tensormorph

#endif  // defined(__x86_64__)
#endif  // TENSORMORPH_CORE_QUANT_KQUANT_SCALES_SIMD_H_
