// Per-dtype decoders: whole storage blocks to float32, and single-element
// inspection. One entry per decodable dtype; the entries are reference
// implementations that reproduce the formats' own decoders bit for bit.
#ifndef TENSORMORPH_CORE_QUANT_CODEC_H_
#define TENSORMORPH_CORE_QUANT_CODEC_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "core/quant/scalar_info.h"

namespace tensormorph {

struct Codec {
  // Decodes `nblocks` consecutive storage blocks at `src` into
  // nblocks * block_elems floats at `dst`.
  void (*decode_blocks)(const uint8_t* src, int64_t nblocks, float* dst);
  // Inspects element `i` (0 <= i < block_elems) of the block at `block`.
  // Fills everything but ScalarInfo::block (the caller knows it).
  ScalarInfo (*inspect)(const uint8_t* block, int i);
};

// The codec for `dtype`, or nullptr when the dtype cannot be decoded.
const Codec* GetCodec(DType dtype);

// Decodes elements [first, first + count) of a tensor whose storage is
// `data` (row-major, in storage blocks) into `out`.
// REQUIRES: the range lies inside the tensor and `data` holds all its blocks.
// Errors: UNIMPLEMENTED when the dtype has no decoder.
absl::Status DecodeElements(DType dtype, absl::Span<const uint8_t> data,
                            int64_t first, int64_t count, float* out);

// Inspects element `index` of such a tensor; sets ScalarInfo::block to the
// storage block for block types (-1 for one-element blocks) and
// ScalarInfo::group to the element's group id: block * SubBlocksPerBlock +
// sub_block for types with sub-blocks, the block for the others, -1 for
// plain types.
// Errors: UNIMPLEMENTED when the dtype has no decoder.
absl::Status InspectElement(DType dtype, absl::Span<const uint8_t> data,
                            int64_t index, ScalarInfo* out);

// Whether the storage blocks carry quantization parameters (every ggml
// block type; not packed plain formats such as F4 and F6).
bool HasBlockParams(DType dtype);

// Sub-blocks with their own scale per storage block (16 for Q2_K, Q3_K,
// Q6_K, IQ2_XS, IQ2_S and IQ1_M; 8 for Q4_K, Q5_K, IQ4_XS, IQ2_XXS, IQ3_XXS,
// IQ3_S and IQ1_S; 4 for NVFP4), or 1.
int32_t SubBlocksPerBlock(DType dtype);

// Per-family tables, registered by codec.cc.
const Codec* PlainCodec(DType dtype);
const Codec* GgmlLegacyCodec(DType dtype);
const Codec* GgmlKQuantCodec(DType dtype);
const Codec* GgmlNonlinearCodec(DType dtype);
const Codec* GgmlLowBitCodec(DType dtype);
const Codec* GgmlIquantCodec(DType dtype);
// The scalar reference decoders of the IQ types and Q2_0, beside the fast
// paths that GgmlIquantCodec / GgmlLowBitCodec (and so GetCodec) hand out;
// tests hold the two equal. nullptr for other dtypes.
const Codec* GgmlIquantReferenceCodec(DType dtype);
const Codec* GgmlLowBitReferenceCodec(DType dtype);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_CODEC_H_
