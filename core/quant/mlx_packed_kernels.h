// MLX decoding straight from a row's stored bytes (core/quant/mlx_encoding.h
// describes the layout): the codes are unpacked in registers, sixteen at a
// time, instead of into a byte buffer that a second loop reads back, and
// the float modes' scales are read as their 8-bit codes. Each entry point
// starts at a group's first element and has a scalar reference giving
// mlx_kernels.h's values (MlxAffineValue, MlxFloatValue) code by code. The
// vector paths are AVX-512 (F, BW, VL); they give the reference's bits (tests
// hold them to it), and return false, having written nothing, below that
// level (ActiveDecodeSimd()), where the caller unpacks and calls
// mlx_kernels.h's AVX2 or scalar kernels.
#ifndef TENSORMORPH_CORE_QUANT_MLX_PACKED_KERNELS_H_
#define TENSORMORPH_CORE_QUANT_MLX_PACKED_KERNELS_H_

#include <cstdint>

#include "core/dtype.h"

namespace tensormorph {

enum class MlxFloatMode { kMxfp4, kMxfp8, kNvfp4 };

// The scale a group's 8-bit code stands for: mx modes power(2, e - 127) in
// float32 (e = 0: 2^-127, subnormal; e = 255: infinity), nvfp4 the FP8 E4M3
// value (NaN for 0x7F / 0xFF).
float MlxFloatScale(MlxFloatMode mode, uint8_t code);
// Group size and code width of a float mode: mxfp4 32 and 4, mxfp8 32 and 8,
// nvfp4 16 and 4.
int MlxFloatGroup(MlxFloatMode mode);
int MlxFloatBits(MlxFloatMode mode);

// out[i] = MlxFloatValue(level(code i), MlxFloatScale(scales[i / group]))
// for i in [0, n): `codes` at a group's first code (FP4: two a byte, the
// even element in the low nibble; FP8 E4M3: a byte each), `scales` that
// group's scale code and the following ones.
// REQUIRES: codes holds ceil(n * bits / 8) bytes, scales ceil(n / group).
bool MlxFloatDecodePacked(MlxFloatMode mode, const uint8_t* codes,
                          const uint8_t* scales, int64_t n, float* out);
void MlxFloatDecodePackedScalar(MlxFloatMode mode, const uint8_t* codes,
                                const uint8_t* scales, int64_t n, float* out);

// out[i] = MlxAffineValue(code i, s[i / group], b[i / group], t) for i in
// [0, n): `codes` at a group's first code of a row's LSB-first stream of
// `bits`-bit codes (bits 2..8, not 7).
// REQUIRES: group a positive multiple of 16 (MLX's are 32, 64, 128); codes
// holds ceil(n * bits / 8) bytes; s and b ceil(n / group) entries.
bool MlxAffineDecodePacked(const uint8_t* codes, int bits, int64_t group,
                           const float* s, const float* b, DType t, int64_t n,
                           float* out);
void MlxAffineDecodePackedScalar(const uint8_t* codes, int bits, int64_t group,
                                 const float* s, const float* b, DType t,
                                 int64_t n, float* out);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_MLX_PACKED_KERNELS_H_
