#include "core/dtype.h"

#include <array>

namespace tensormorph {
namespace {

constexpr int kQK = 32;
constexpr int kQKK = 256;

// Indexed by DType. Block sizes follow ggml-common.h; they are pinned again by
// static_asserts next to each decoder's block struct.
constexpr std::array<DTypeInfo, kNumDTypes> kInfos = {{
    {"F64", 1, 8, 64, true, true},
    {"F32", 1, 4, 32, true, true},
    {"F16", 1, 2, 16, true, true},
    {"BF16", 1, 2, 16, true, true},
    {"F8_E4M3", 1, 1, 8, true, true},
    {"F8_E5M2", 1, 1, 8, true, true},
    {"F8_E8M0", 1, 1, 8, true, true},
    {"F8_E4M3FNUZ", 1, 1, 8, true, true},
    {"F8_E5M2FNUZ", 1, 1, 8, true, true},
    {"F6_E2M3", 4, 3, 6, true, true},
    {"F6_E3M2", 4, 3, 6, true, true},
    {"F4", 2, 1, 4, true, true},
    {"I64", 1, 8, 64, false, true, 1, true},
    {"I32", 1, 4, 32, false, true, 1, true},
    {"I16", 1, 2, 16, false, true, 1, true},
    {"I8", 1, 1, 8, false, true, 1, true},
    {"U64", 1, 8, 64, false, true, 1, true},
    {"U32", 1, 4, 32, false, true, 1, true},
    {"U16", 1, 2, 16, false, true, 1, true},
    {"U8", 1, 1, 8, false, true, 1, true},
    {"BOOL", 1, 1, 8, false, true, 1, true},
    {"Q4_0", kQK, 18, 4, false, true, 32, true},
    {"Q4_1", kQK, 20, 4, false, true, 32, true},
    {"Q5_0", kQK, 22, 5, false, true, 32, true},
    {"Q5_1", kQK, 24, 5, false, true, 32, true},
    {"Q8_0", kQK, 34, 8, false, true, 32, true},
    {"Q8_1", kQK, 36, 8, false, true, 32, true},
    {"Q2_K", kQKK, 84, 2, false, true, 16, true},
    {"Q3_K", kQKK, 110, 3, false, true, 16, true},
    {"Q4_K", kQKK, 144, 4, false, true, 32, true},
    {"Q5_K", kQKK, 176, 5, false, true, 32, true},
    {"Q6_K", kQKK, 210, 6, false, true, 16, true},
    {"Q8_K", kQKK, 292, 8, false, true, 256, true},
    {"IQ2_XXS", kQKK, 66, 2, false, true, 32},
    {"IQ2_XS", kQKK, 74, 2, false, true, 16},
    {"IQ3_XXS", kQKK, 98, 3, false, true, 32},
    {"IQ1_S", kQKK, 50, 1, false, true, 32},
    {"IQ4_NL", kQK, 18, 4, false, true},
    {"IQ3_S", kQKK, 110, 3, false, true, 32},
    {"IQ2_S", kQKK, 82, 2, false, true, 16},
    {"IQ4_XS", kQKK, 136, 4, false, true},
    {"IQ1_M", kQKK, 56, 1, false, true, 8},  // delta per 8
    {"TQ1_0", kQKK, 54, 2, false, true, 256, true},
    {"TQ2_0", kQKK, 66, 2, false, true, 256, true},
    {"MXFP4", kQK, 17, 4, true, true},
    {"NVFP4", 64, 36, 4, true, true},
    {"Q1_0", 128, 18, 1, false, true, 128, true},
    {"Q2_0", 64, 18, 2, false, true, 64, true},
    // No block size: never sliced raw, never decoded (block_bytes 0).
    {"GGML_UNKNOWN", 1, 0, 0, false, false},
}};

struct GgmlId {
  uint32_t id;
  DType dtype;
};
// ggml.h enum ggml_type.
constexpr GgmlId kGgmlIds[] = {
    {0, DType::kF32},     {1, DType::kF16},      {2, DType::kQ4_0},
    {3, DType::kQ4_1},    {6, DType::kQ5_0},     {7, DType::kQ5_1},
    {8, DType::kQ8_0},    {9, DType::kQ8_1},     {10, DType::kQ2_K},
    {11, DType::kQ3_K},   {12, DType::kQ4_K},    {13, DType::kQ5_K},
    {14, DType::kQ6_K},   {15, DType::kQ8_K},    {16, DType::kIQ2_XXS},
    {17, DType::kIQ2_XS}, {18, DType::kIQ3_XXS}, {19, DType::kIQ1_S},
    {20, DType::kIQ4_NL}, {21, DType::kIQ3_S},   {22, DType::kIQ2_S},
    {23, DType::kIQ4_XS}, {24, DType::kI8},      {25, DType::kI16},
    {26, DType::kI32},    {27, DType::kI64},     {28, DType::kF64},
    {29, DType::kIQ1_M},  {30, DType::kBF16},    {34, DType::kTQ1_0},
    {35, DType::kTQ2_0},  {39, DType::kMXFP4},   {40, DType::kNVFP4},
    {41, DType::kQ1_0},   {42, DType::kQ2_0},
};

struct StName {
  absl::string_view name;
  DType dtype;
};
constexpr StName kSafetensorsNames[] = {
    {"F64", DType::kF64},
    {"F32", DType::kF32},
    {"F16", DType::kF16},
    {"BF16", DType::kBF16},
    {"F8_E4M3", DType::kF8E4M3},
    {"F8_E5M2", DType::kF8E5M2},
    {"F8_E8M0", DType::kF8E8M0},
    {"F8_E4M3FNUZ", DType::kF8E4M3Fnuz},
    {"F8_E5M2FNUZ", DType::kF8E5M2Fnuz},
    {"F6_E2M3", DType::kF6E2M3},
    {"F6_E3M2", DType::kF6E3M2},
    {"F4", DType::kF4},
    {"I64", DType::kI64},
    {"I32", DType::kI32},
    {"I16", DType::kI16},
    {"I8", DType::kI8},
    {"U64", DType::kU64},
    {"U32", DType::kU32},
    {"U16", DType::kU16},
    {"U8", DType::kU8},
    {"BOOL", DType::kBool},
};

}  // namespace

const DTypeInfo& GetDTypeInfo(DType dtype) {
  return kInfos[static_cast<int>(dtype)];
}

std::optional<DType> DTypeFromSafetensorsName(absl::string_view name) {
  for (const auto& e : kSafetensorsNames) {
    if (e.name == name) return e.dtype;
  }
  return std::nullopt;
}

std::optional<DType> DTypeFromGgmlTypeId(uint32_t id) {
  for (const auto& e : kGgmlIds) {
    if (e.id == id) return e.dtype;
  }
  return std::nullopt;
}

std::optional<uint32_t> GgmlTypeIdOf(DType dtype) {
  for (const auto& e : kGgmlIds) {
    if (e.dtype == dtype) return e.id;
  }
  return std::nullopt;
}

absl::string_view DescribeGgmlTypeId(uint32_t id) {
  switch (id) {
    case 4:
      return "Q4_2 (removed from ggml)";
    case 5:
      return "Q4_3 (removed from ggml)";
    case 31:
      return "Q4_0_4_4 (removed from ggml)";
    case 32:
      return "Q4_0_4_8 (removed from ggml)";
    case 33:
      return "Q4_0_8_8 (removed from ggml)";
    case 36:
      return "IQ4_NL_4_4 (removed from ggml)";
    case 37:
      return "IQ4_NL_4_8 (removed from ggml)";
    case 38:
      return "IQ4_NL_8_8 (removed from ggml)";
    default:
      break;
  }
  if (auto d = DTypeFromGgmlTypeId(id)) return DTypeName(*d);
  return "unknown";
}

}  // namespace tensormorph
