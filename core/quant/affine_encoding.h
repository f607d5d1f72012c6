// The encoding every safetensors quantization convention reduces to: codes
// from a packed or direct matrix, a group per element, and
//   value = scale(group) * level,  level = code - zero(group)   (integers)
//                                  level = table[code]          (codebooks)
// computed in float32, which reproduces each convention's reference.
#ifndef TENSORMORPH_CORE_QUANT_AFFINE_ENCODING_H_
#define TENSORMORPH_CORE_QUANT_AFFINE_ENCODING_H_

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/quant/encoding.h"
#include "core/quant/matrix_view.h"

namespace tensormorph {

struct AffineParams {
  std::vector<int64_t> shape;  // logical; rows = product of all but the last
  int64_t rows = 0, cols = 0;

  IntMatrix codes;
  bool signed_codes = false;  // two's complement of codes.bits
  int64_t code_offset = 0;    // subtracted from every code (stored + 2^(b-1))
  std::vector<float> table;   // codebook: level = table[code] when non-empty
  bool float_codes = false;   // the codes are float bit patterns (FP8, FP4)

  enum class Groups { kTensor, kChannel, kGroup, kBlock, kFlatBlock };
  Groups groups = Groups::kTensor;
  int64_t group_size = 0;                  // kGroup (along cols), kFlatBlock
  int64_t block_rows = 0, block_cols = 0;  // kBlock
  std::vector<int32_t> g_idx;  // kGroup with act-order: group of each col

  // Scale of a group, indexed [row group, col group].
  enum class Scales { kFloat, kE8M0, kNestedAbsmax };
  Scales scale_kind = Scales::kFloat;
  FloatMatrix scale;
  IntMatrix scale_codes;    // kE8M0, kNestedAbsmax (u8 codes)
  float scale_divisor = 0;  // non-zero: scale = scale / divisor
  // scale = scale * multiplier when set, one float32 rounding (ModelOpt's
  // NVFP4 weight_scale * weight_scale_2), after any divisor. A stored
  // value: 0, NaN or Inf decode as such.
  bool multiply_scale = false;
  float scale_multiplier = 1;
  // bitsandbytes double quantization: absmax = table2[code] * nested[g/bs] +
  // offset
  std::vector<float> nested_table;
  FloatMatrix nested_absmax;
  int64_t nested_blocksize = 0;
  float nested_offset = 0;

  // Zero-points, indexed like scales; absent for symmetric schemes.
  bool has_zero = false;
  IntMatrix zeros;
  bool signed_zeros = false;
  int64_t zero_offset = 0;  // subtracted (packed zeros are stored shifted)
  int64_t zero_add = 0;     // GPTQ v1 stores zero - 1
  uint32_t zero_mask = 0;   // applied after zero_add when non-zero

  // AWQ's pre_quant_scale, when `column_scale.tensor` is set ([1, cols]):
  // value = (scale * level) * column_scale[c], one more float32 rounding.
  // The stored weight is the source's divided by it per input column, and
  // the layer multiplies its activations by it, so this product is the
  // weight the layer computes with.
  FloatMatrix column_scale;
  // A per-tensor scale the Inspector shows as "weight_scale_2" and the value
  // does not apply (W4A8_AWQ's FP8 GEMM divides it out and multiplies it
  // back); NaN = none.
  float shown_weight_scale_2 = NAN;

  EncodingInfo info;
  std::vector<const StoredTensor*> parts;
};

// The encoding of `params`, after checking that the combination is
// decodable: shape = [rows, cols]; every codes, scales and zero-point matrix
// covers the group grid its `groups` implies and maps inside its stored
// tensor's bytes (dtype width, packing, stored row length); group and block
// sizes positive; codes of 1 to 32 bits, a codebook covering every code;
// g_idx (act-order) one entry per column, each inside the scales' groups;
// nested absmax with 8-bit codes, 256 levels and a positive block size;
// column scales, when given, one per column.
// Nothing is decoded here: a resolver's shape checks name the convention's
// rule, and this is the backstop that makes a wrong combination a refusal
// instead of an out-of-bounds read.
// REQUIRES: the stored tensors outlive the encoding.
// Errors: DATA_LOSS naming the matrix, its tensor and the rule it breaks.
absl::StatusOr<std::shared_ptr<const Encoding>> MakeAffineEncoding(
    AffineParams params);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_AFFINE_ENCODING_H_
