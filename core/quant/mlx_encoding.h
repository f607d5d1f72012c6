// MLX's quantized weights (mlx.core.quantize, as mlx-lm saves them): a
// `weight` U32 [..., out, in*bits/32] whose words hold each row's codes as
// one LSB-first bit stream (3-, 5- and 6-bit codes straddle words), and per
// group of `group_size` consecutive elements of a row a scale (and, affine,
// a bias) in `scales` / `biases` [..., out, in/group_size].
//
// The reference is mx.dequantize as mlx/ops.cpp writes it (read at
// ml-explore/mlx 846d176, 2026-08-22: affine_dequantize and fp_dequantize,
// whose op graphs run as written on the CPU stream):
//  - affine: w = multiply(q, scales) then add(., biases), in the scales'
//    dtype T (uint32 x bfloat16 promotes to bfloat16, mlx/dtype.cpp), each op
//    computed in float32 and rounded once to T (mlx/types/bf16.h: the
//    operators convert to float; bf16 rounds to nearest even, a NaN
//    becomes the canonical 0x7FC0):
//      w = T(float(T(float(q) * s)) + b)
//    i.e. two roundings, never a fused multiply-add (-ffp-contract=off).
//    Metal's kernel (quantized.h affine_dequantize) writes `scale * d +
//    bias` in T (native bfloat), built with -fno-fast-math; whether the
//    GPU contracts that into one fused rounding is its compiler's, so the
//    reference here is the CPU stream's graph, two roundings.
//  - mxfp4 / mxfp8: level = FP4 E2M1 (lut[code]) or FP8 E4M3 of the code,
//    scale = power(2, e - 127) of the U8 E8M0 exponent, and
//    w = bfloat16(level * scale): the output dtype defaults to bfloat16.
//  - nvfp4: level = lut[code], scale = the U8 FP8 E4M3 scale, groups of 16,
//    w = bfloat16(level * scale) (MLX stores no global scale).
// Codes of FP4 modes are nibbles, element 2k in the low nibble of byte k of
// the row's little-endian words; FP8 codes are the row's bytes in order.
#ifndef TENSORMORPH_CORE_QUANT_MLX_ENCODING_H_
#define TENSORMORPH_CORE_QUANT_MLX_ENCODING_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/format/stored_tensor.h"
#include "core/quant/encoding.h"

namespace tensormorph {

struct MlxParams {
  enum class Mode { kAffine, kMxfp4, kMxfp8, kNvfp4 };
  Mode mode = Mode::kAffine;
  int bits = 4;  // affine: 2, 3, 4, 5, 6, 8; FP4 modes 4; mxfp8 8
  int64_t group_size = 64;
  std::vector<int64_t> shape;            // logical [..., out, in]
  int64_t rows = 0, cols = 0;            // rows = product of all but the last
  const StoredTensor* weight = nullptr;  // U32 [rows, cols * bits / 32]
  const StoredTensor* scales = nullptr;  // [rows, cols / group_size]
  const StoredTensor* biases = nullptr;  // affine only, scales' dtype
  EncodingInfo info;
  std::vector<const StoredTensor*> parts;
};

// The encoding of `params`, after checking the combination: a mode with its
// bits and group size (affine groups of any positive size dividing `in`),
// weight U32 holding exactly rows * cols * bits / 32 words, scales of
// rows * cols / group_size elements (F16, BF16 or F32 for affine; U8, or
// F8_E8M0 for mx modes and F8_E4M3 for nvfp4, otherwise), biases like
// scales (affine only).
// REQUIRES: the stored tensors outlive the encoding.
// Errors: DATA_LOSS naming the tensor and the rule it breaks.
absl::StatusOr<std::shared_ptr<const Encoding>> MakeMlxEncoding(
    MlxParams params);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_MLX_ENCODING_H_
