// HQQ (mobiusml/hqq, as transformers saves HQQLinear layers): codes packed
// along dim 0 of the grouped matrix, a scale and a zero-point per group,
//   w = (W_q - zero) * scale
// computed in the layer's compute dtype (float16 by default, bfloat16 or
// float32): Quantizer.dequantize (hqq/core/quantize.py) unpacks the codes
// into that dtype, the scale and zero were moved to it (to_inplace), and the
// subtraction and the product each round once to it. Here each is computed
// exactly in double and rounded once to the compute dtype (round to nearest
// even), then held as float32, which is exact (core/quant/hqq_kernels.h
// has that arithmetic and its fast paths). The grouped matrix is the
// flat tensor reshaped to [numel/G, G] (axis 1: a group is G consecutive
// elements) or [G, numel/G] (axis 0: a group is a column, elements
// numel/G apart); packings (hqq/core/bitpack.py) split its rows into
// 8/bits equal slices, slice j in the bits below 8 - j*bits (u8; 3-bit:
// ten slices of 3 bits in an int32 below bit 30, rows padded to ten).
#ifndef TENSORMORPH_CORE_QUANT_HQQ_ENCODING_H_
#define TENSORMORPH_CORE_QUANT_HQQ_ENCODING_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/quant/encoding.h"

namespace tensormorph {

struct HqqParams {
  std::vector<int64_t> shape;  // logical; its product is the element count
  int bits = 4;                // 1, 2, 3, 4, or up to 8 (stored a byte each)
  int64_t group_size = 64;     // G
  int axis = 1;                // 1: groups of consecutive elements; 0: columns
  const StoredTensor* w_q = nullptr;    // U8 (I32 for 3-bit) [packed rows, C]
  const StoredTensor* scale = nullptr;  // one float per group
  const StoredTensor* zero = nullptr;   // one float per group
  DType compute = DType::kF16;          // kF16, kBF16 or kF32
  EncodingInfo info;
  std::vector<const StoredTensor*> parts;
};

// The packed rows W_q must have for `rows` rows of the grouped matrix.
int64_t HqqPackedRows(int bits, int64_t rows);

// The encoding of `p` after checking that it is decodable: the element
// count a multiple of G; W_q of the packing's dtype and shape; scale and
// zero plain numbers, one per group; compute dtype F16, BF16 or F32.
// REQUIRES: the stored tensors outlive the encoding.
// Errors: DATA_LOSS naming the tensor and the rule it breaks.
absl::StatusOr<std::shared_ptr<const Encoding>> MakeHqqEncoding(HqqParams p);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_HQQ_ENCODING_H_
