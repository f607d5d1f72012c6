// The inner loops of MLX decoding (core/quant/mlx_encoding.h): a row
// segment's codes (one byte each), in groups sharing a scale (and a bias),
// into float32 in the reference's arithmetic. Each has a scalar reference
// (the definition, and the fallback on CPUs without AVX2 and F16C or when
// ActiveDecodeSimd() is capped below kAvx2); the AVX2 paths give the same
// bits (tests hold them to it on random codes and parameters, NaN and
// overflow included).
#ifndef TENSORMORPH_CORE_QUANT_MLX_KERNELS_H_
#define TENSORMORPH_CORE_QUANT_MLX_KERNELS_H_

#include <cstdint>

#include "core/dtype.h"
#include "core/quant/affine_kernels.h"

namespace tensormorph {

// Rounds float32 to the nearest bfloat16 (ties to even) as MLX's
// _MLX_BFloat16(float) does, returned as float32; NaN becomes 0x7FC00000.
float RoundToBF16(float x);
// Rounds float32 to the nearest binary16 (ties to even, subnormals,
// overflow to infinity), returned as float32; NaN becomes 0x7FC00000.
float RoundToF16(float x);
// RoundToBF16 / RoundToF16 by `t` (kBF16, kF16); any other dtype: x.
float RoundTo(DType t, float x);

// The affine value of code q: R(R(float(q) * s) + b), R = RoundTo(t):
// mx.dequantize's multiply then add, each rounded to the scales' dtype.
inline float MlxAffineValue(uint32_t q, float s, float b, DType t) {
  return RoundTo(t, RoundTo(t, static_cast<float>(q) * s) + b);
}
// The float modes' value: the level times the group's scale, in bfloat16.
inline float MlxFloatValue(float level, float s) {
  return RoundToBF16(level * s);
}

// out[i] = MlxAffineValue(q[i], s[g], b[g], t) for code i of group g
// (groups as Runs: code i belongs to group (i + skip) / run).
// REQUIRES: bits <= 8 and every code < 2^bits.
void MlxAffineDecode(const uint8_t* q, int64_t n, Runs runs, const float* s,
                     const float* b, DType t, int bits, float* out);
void MlxAffineDecodeScalar(const uint8_t* q, int64_t n, Runs runs,
                           const float* s, const float* b, DType t, float* out);

// out[i] = MlxFloatValue(table[q[i]], s[g]).
// REQUIRES: `table` has 2^bits entries (bits 4 or 8) and every code indexes
// it.
void MlxFloatDecode(const uint8_t* q, int64_t n, Runs runs, const float* table,
                    int bits, const float* s, float* out);
void MlxFloatDecodeScalar(const uint8_t* q, int64_t n, Runs runs,
                          const float* table, const float* s, float* out);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_MLX_KERNELS_H_
