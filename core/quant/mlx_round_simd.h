// MLX's per-operation rounding to the scales' dtype (RoundTo in
// mlx_kernels.h) on sixteen lanes, shared by the MLX kernels
// (mlx_kernels.cc, mlx_packed_kernels.cc). x86-64 only; callers check
// ActiveDecodeSimd() >= kAvx512 first.
#ifndef TENSORMORPH_CORE_QUANT_MLX_ROUND_SIMD_H_
#define TENSORMORPH_CORE_QUANT_MLX_ROUND_SIMD_H_

#if defined(__x86_64__)
#include <immintrin.h>

#include "core/quant/mlx_kernels.h"

namespace tensormorph::mlx_simd {

// _mm512_undefined_*() inside the intrinsics' header is a self-initialised
// variable that -W(maybe-)uninitialized reports (as decode_simd.cc notes).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// RoundTo(kT, .) on sixteen lanes (RoundToBF16 / RoundToF16's bits), a NaN
// made 0x7FC00000 when kNan (the scalar's); kF32 leaves x as it is.
template <DType kT, bool kNan>
__attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) inline __m512 Round(
    __m512 x) {
  __m512 r = x;
  if constexpr (kT == DType::kBF16) {
    // u + 0x7FFF + bit 16 of u, the bit tested into a mask that adds the
    // one: four operations where shifting it down takes five.
    const __m512i u = _mm512_castps_si512(x);
    const __mmask16 odd = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x10000));
    __m512i up = _mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF));
    up = _mm512_mask_add_epi32(up, odd, up, _mm512_set1_epi32(1));
    r = _mm512_castsi512_ps(
        _mm512_and_si512(up, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  } else if constexpr (kT == DType::kF16) {
    r = _mm512_cvtph_ps(
        _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
    return x;
  }
  if constexpr (!kNan) return r;
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_blend_ps(
      nan, r, _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace tensormorph::mlx_simd

#endif  // __x86_64__
#endif  // TENSORMORPH_CORE_QUANT_MLX_ROUND_SIMD_H_
