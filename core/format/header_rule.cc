#include "core/format/header_rule.h"

#include <string>
#include <utility>

namespace tensormorph {
namespace {

constexpr absl::string_view kGguf = "gguf";
constexpr absl::string_view kSafetensors = "safetensors";
constexpr absl::string_view kBoth = "gguf, safetensors";

// The one list (docs/errors.md is compared with it by a test).
constexpr HeaderRuleInfo kTable[] = {
    {HeaderRule::kTruncated, "truncated", kGguf,
     "a field (count, key, type, dimension, offset) runs past the end of the "
     "file"},
    {HeaderRule::kMagic, "magic", kGguf, "the file does not start with 'GGUF'"},
    {HeaderRule::kByteOrder, "byte-order", kGguf,
     "the version reads byte-swapped: a big-endian file, not supported"},
    {HeaderRule::kTensorCount, "tensor-count", kGguf,
     "the tensor count cannot fit in the bytes that remain"},
    {HeaderRule::kKvCount, "kv-count", kGguf,
     "the metadata key count cannot fit in the bytes that remain"},
    {HeaderRule::kStringLength, "string-length", kGguf,
     "a string's (key, value or tensor name) length exceeds the bytes that "
     "remain"},
    {HeaderRule::kKeyEmpty, "key-empty", kGguf, "a metadata key is empty"},
    {HeaderRule::kValueType, "value-type", kGguf,
     "a metadata value's type is not a GGUF type"},
    {HeaderRule::kArrayType, "array-type", kGguf,
     "an array's element type is not a GGUF type"},
    {HeaderRule::kArrayLength, "array-length", kGguf,
     "an array's length cannot fit in the bytes that remain"},
    {HeaderRule::kArrayDepth, "array-depth", kGguf,
     "arrays nested deeper than 8 levels"},
    {HeaderRule::kDuplicateKey, "duplicate-key", kBoth,
     "a key appears twice: a GGUF metadata key; in safetensors any JSON key "
     "(two tensors of one name, a repeated metadata key)"},
    {HeaderRule::kAlignment, "alignment", kGguf,
     "`general.alignment` is not a uint32 or not a non-zero power of two"},
    {HeaderRule::kDuplicateName, "duplicate-name", kGguf,
     "two tensors have one name"},
    {HeaderRule::kNameLength, "name-length", kBoth,
     "a tensor name is longer than the format allows (GGUF: 63 bytes, ggml's "
     "limit; safetensors: empty or over 4096 bytes)"},
    {HeaderRule::kRank, "rank", kBoth,
     "a tensor has more dimensions than the format allows (GGUF: 4; "
     "safetensors: 16)"},
    {HeaderRule::kShape, "shape", kBoth,
     "a dimension is negative (safetensors: also not an integer, over 2^48, "
     "or a shape that is not an array)"},
    {HeaderRule::kSizeOverflow, "size-overflow", kBoth,
     "a tensor's element count or byte size (or the data section's offset) "
     "overflows 64-bit arithmetic"},
    {HeaderRule::kBlockSize, "block-size", kBoth,
     "a tensor is not a whole number of its dtype's blocks (GGUF: ne[0]; "
     "safetensors: sub-byte elements that do not end on a byte)"},
    {HeaderRule::kUnknownTypeExtent, "unknown-type-extent", kGguf,
     "a tensor of a type id Tensormorph does not know cannot be bounded: it "
     "starts past the data section, or the next tensor's offset is "
     "misaligned or before it"},
    {HeaderRule::kOffset, "offset", kBoth,
     "a tensor does not start where the previous one ends (GGUF: padded to "
     "the alignment): a gap, an overlap or a misaligned offset"},
    {HeaderRule::kDataRange, "data-range", kGguf,
     "a tensor's data runs past the end of the file"},
    {HeaderRule::kHeaderLength, "header-length", kSafetensors,
     "the file is shorter than the 8-byte length field, or the header length "
     "runs past its end"},
    {HeaderRule::kHeaderLimit, "header-limit", kSafetensors,
     "the header length exceeds the limit of 100,000,000 bytes"},
    {HeaderRule::kHeaderObject, "header-object", kSafetensors,
     "the header is not a JSON object (its first non-space byte is not '{')"},
    {HeaderRule::kHeaderJson, "header-json", kSafetensors,
     "the header is not valid JSON"},
    {HeaderRule::kHeaderUtf8, "header-utf8", kSafetensors,
     "the header holds bytes that are not UTF-8"},
    {HeaderRule::kHeaderDepth, "header-depth", kSafetensors,
     "the header's JSON nests deeper than 64 levels"},
    {HeaderRule::kMetadata, "metadata", kSafetensors,
     "`__metadata__` is not an object of strings"},
    {HeaderRule::kEntry, "entry", kSafetensors,
     "a tensor's entry is not an object holding dtype, shape and "
     "data_offsets"},
    {HeaderRule::kDtype, "dtype", kSafetensors,
     "a dtype is not a string (an unknown dtype is UNSUPPORTED_DTYPE)"},
    {HeaderRule::kDataOffsets, "data-offsets", kSafetensors,
     "data_offsets is not two integers in [0, 2^48]"},
    {HeaderRule::kOffsetOrder, "offset-order", kSafetensors,
     "data_offsets end before they begin"},
    {HeaderRule::kDataSize, "data-size", kSafetensors,
     "data_offsets hold a different number of bytes than dtype and shape "
     "need"},
    {HeaderRule::kDataEnd, "data-end", kSafetensors,
     "the tensors' data does not end where the file does (trailing bytes, or "
     "a file cut short)"},
};

}  // namespace

absl::Span<const HeaderRuleInfo> HeaderRuleTable() { return kTable; }

absl::string_view HeaderRuleName(HeaderRule rule) {
  return kTable[static_cast<size_t>(rule)].name;
}

absl::Status HeaderRuleError(HeaderRule rule, absl::string_view message,
                             absl::string_view file, ErrorMetadata extra) {
  ErrorMetadata metadata = {{"file", std::string(file)},
                            {"rule", std::string(HeaderRuleName(rule))}};
  for (auto& kv : extra) metadata.push_back(std::move(kv));
  return WithReason(absl::DataLossError(message), ErrorReason::kHeaderInvalid,
                    std::move(metadata));
}

}  // namespace tensormorph
