// bitsandbytes LLM.int8 weights (`load_in_8bit` saves): `weight` I8
// [out, in] and `SCB` F32 [out], each row's absmax, with
//   w = q * SCB / 127
// as bitsandbytes computes it (read at bitsandbytes-foundation/bitsandbytes
// 95f9af3, 2026-08-19: bitsandbytes/_ops.py, the one int8_vectorwise_dequant
// kernel every backend uses, and what transformers' dequantize calls):
//   A * stats.view(-1, 1) * 7.874015718698502e-3
// in float32, left to right: the int8 code times the row's SCB rounded to
// float32, then times the Python constant, which PyTorch casts to float32
// (0x3C010204), rounded again. Not a division by 127, and no fused
// multiply-add (-ffp-contract=off).
#ifndef TENSORMORPH_CORE_QUANT_INT8_ROWWISE_ENCODING_H_
#define TENSORMORPH_CORE_QUANT_INT8_ROWWISE_ENCODING_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/format/stored_tensor.h"
#include "core/quant/encoding.h"

namespace tensormorph {

struct Int8RowwiseParams {
  const StoredTensor* weight = nullptr;  // I8 [rows, cols]
  const StoredTensor* scb = nullptr;     // F32 [rows]
  EncodingInfo info;
  std::vector<const StoredTensor*> parts;
};

// float32(7.874015718698502e-3): bitsandbytes' 1/127.
inline constexpr float kBnbInv127 = 7.874015718698502e-3f;

// The encoding of `params`, after checking weight I8 of rank 2 and SCB F32
// with one element per row, their bytes exactly their elements.
// REQUIRES: the stored tensors outlive the encoding.
// Errors: DATA_LOSS naming the tensor and the rule it breaks.
absl::StatusOr<std::shared_ptr<const Encoding>> MakeInt8RowwiseEncoding(
    Int8RowwiseParams params);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_INT8_ROWWISE_ENCODING_H_
