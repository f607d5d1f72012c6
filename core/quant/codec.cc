#include "core/quant/codec.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/util/error_reason.h"

namespace tensormorph {
namespace {

constexpr int kMaxBlockElems = 256;

absl::Status NoDecoder(DType dtype) {
  return WithReason(absl::UnimplementedError(absl::StrCat(
                        "dtype ", DTypeName(dtype), " cannot be decoded")),
                    ErrorReason::kUnsupportedDtype,
                    {{"dtype", std::string(DTypeName(dtype))}});
}

}  // namespace

const Codec* GetCodec(DType dtype) {
  if (!GetDTypeInfo(dtype).decodable) return nullptr;
  if (const Codec* c = PlainCodec(dtype)) return c;
  if (const Codec* c = GgmlLegacyCodec(dtype)) return c;
  if (const Codec* c = GgmlKQuantCodec(dtype)) return c;
  if (const Codec* c = GgmlLowBitCodec(dtype)) return c;
  if (const Codec* c = GgmlIquantCodec(dtype)) return c;
  return GgmlNonlinearCodec(dtype);
}

absl::Status DecodeElements(DType dtype, absl::Span<const uint8_t> data,
                            int64_t first, int64_t count, float* out) {
  const Codec* codec = GetCodec(dtype);
  if (codec == nullptr) return NoDecoder(dtype);
  if (count <= 0) return absl::OkStatus();
  const DTypeInfo& info = GetDTypeInfo(dtype);
  const int64_t be = info.block_elems;
  const uint8_t* base = data.data();
  int64_t block = first / be;
  int64_t within = first % be;
  float scratch[kMaxBlockElems];
  // Head: a partial first block.
  if (within != 0) {
    codec->decode_blocks(base + block * info.block_bytes, 1, scratch);
    const int64_t n = std::min<int64_t>(count, be - within);
    std::memcpy(out, scratch + within, n * sizeof(float));
    out += n;
    count -= n;
    ++block;
  }
  // Body: whole blocks straight into the output.
  const int64_t whole = count / be;
  if (whole > 0) {
    codec->decode_blocks(base + block * info.block_bytes, whole, out);
    out += whole * be;
    count -= whole * be;
    block += whole;
  }
  // Tail: a partial last block.
  if (count > 0) {
    codec->decode_blocks(base + block * info.block_bytes, 1, scratch);
    std::memcpy(out, scratch, count * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status InspectElement(DType dtype, absl::Span<const uint8_t> data,
                            int64_t index, ScalarInfo* out) {
  const Codec* codec = GetCodec(dtype);
  if (codec == nullptr) return NoDecoder(dtype);
  const DTypeInfo& info = GetDTypeInfo(dtype);
  const int64_t block = index / info.block_elems;
  *out = codec->inspect(data.data() + block * info.block_bytes,
                        static_cast<int>(index % info.block_elems));
  const bool has_block_params = HasBlockParams(dtype);
  out->block = has_block_params ? block : -1;
  out->group = !has_block_params ? -1
               : out->sub_block >= 0
                   ? block * SubBlocksPerBlock(dtype) + out->sub_block
                   : block;
  return absl::OkStatus();
}

bool HasBlockParams(DType dtype) {
  // Packed plain formats (F4, F6) have multi-element blocks too, but share
  // no parameters across them; every multi-element ggml type does (TQ1_0's
  // trits take fewer bits than code_bits says, so counting bits would miss
  // its scale).
  return GetDTypeInfo(dtype).block_elems > 1 && GgmlTypeIdOf(dtype).has_value();
}

int32_t SubBlocksPerBlock(DType dtype) {
  switch (dtype) {
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ6_K:
    case DType::kIQ2_XS:
    case DType::kIQ2_S:
    case DType::kIQ1_M:
      return 16;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kIQ4_XS:
    case DType::kIQ2_XXS:
    case DType::kIQ3_XXS:
    case DType::kIQ3_S:
    case DType::kIQ1_S:
      return 8;
    case DType::kNVFP4:
      return 4;
    default:
      return 1;
  }
}

}  // namespace tensormorph
