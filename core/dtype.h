// The stored data types Tensormorph knows: safetensors dtypes and ggml types.
#ifndef TENSORMORPH_CORE_DTYPE_H_
#define TENSORMORPH_CORE_DTYPE_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace tensormorph {

enum class DType : uint8_t {
  // Plain floats and integers (one element per block).
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,      // e4m3fn: no infinities, 0x7F/0xFF are NaN, max 448.
  kF8E5M2,      // IEEE-like: infinities and NaNs.
  kF8E8M0,      // Unsigned power of two 2^(e-127); 0xFF is NaN.
  kF8E4M3Fnuz,  // Bias 8, no negative zero: 0x80 is the only NaN.
  kF8E5M2Fnuz,  // Bias 16, no negative zero: 0x80 is the only NaN.
  kF6E2M3,      // Four per 3 bytes, LSB-first bit stream.
  kF6E3M2,
  kF4,  // FP4 E2M1, two per byte, first element in the low nibble.
  kI64,
  kI32,
  kI16,
  kI8,
  kU64,
  kU32,
  kU16,
  kU8,
  kBool,
  // ggml block types.
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ8_0,
  kQ8_1,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_K,
  kIQ2_XXS,
  kIQ2_XS,
  kIQ3_XXS,
  kIQ1_S,
  kIQ4_NL,
  kIQ3_S,
  kIQ2_S,
  kIQ4_XS,
  kIQ1_M,
  kTQ1_0,
  kTQ2_0,
  kMXFP4,
  kNVFP4,
  kQ1_0,  // ggml 41: 128 sign bits and one fp16 scale, value +-d.
  kQ2_0,  // ggml 42: 64 2-bit codes and one fp16 scale, value (q - 1) * d.
  // A GGUF tensor whose ggml type id is not in the table (unknown, or
  // removed from ggml): listed, never decoded. Its block size is unknown, so
  // its extent comes from the file's layout (core/format/gguf_reader.h) and
  // StoredTensor::ggml_type_id keeps the id.
  kGgmlUnknown,
};
inline constexpr int kNumDTypes = static_cast<int>(DType::kGgmlUnknown) + 1;

// Static facts about a dtype's storage.
struct DTypeInfo {
  absl::string_view name;  // "Q4_K", "BF16", "F8_E4M3", ...
  int32_t block_elems;     // elements per storage block (1 for plain types)
  int32_t block_bytes;     // bytes per storage block
  int32_t code_bits;       // bits of one element's raw code (e.g. 4 for Q4_0)
  bool is_float_code;      // the raw code is a float bit pattern
  bool decodable;          // Tensormorph can decode it
  // Elements sharing every parameter (the sub-block), and whether their
  // levels are evenly spaced, so one inspected element speaks for all.
  int32_t sub_block_elems = 1;
  bool uniform_levels = false;
};

const DTypeInfo& GetDTypeInfo(DType dtype);
inline absl::string_view DTypeName(DType dtype) {
  return GetDTypeInfo(dtype).name;
}

// safetensors dtype strings ("F32", "F8_E4M3", ...).
std::optional<DType> DTypeFromSafetensorsName(absl::string_view name);

// ggml_type ids as written in GGUF tensor infos. Ids that ggml removed
// (4, 5, 31-33, 36-38) and unknown ids return nullopt (the GGUF reader then
// lists the tensor as kGgmlUnknown).
std::optional<DType> DTypeFromGgmlTypeId(uint32_t id);
// The ggml id of a dtype, or nullopt for safetensors-only dtypes.
std::optional<uint32_t> GgmlTypeIdOf(DType dtype);
// A human name for a removed or unknown ggml id ("Q4_2 (removed)").
absl::string_view DescribeGgmlTypeId(uint32_t id);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DTYPE_H_
