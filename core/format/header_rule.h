// The rules a checkpoint file's header can break, one name per distinct
// refusal of the GGUF and safetensors readers: the `rule` metadata of their
// DATA_LOSS HEADER_INVALID errors (core/util/error_reason.h), so a client or
// a test tells "the tensor count cannot fit" from "a dimension is negative"
// without reading the English of the message.
//
// The list is closed and its names are stable: a name is never renamed or
// reused (clients branch on it); new rules are appended. A rule both formats
// share (offset, shape, rank, ...) has one name. docs/errors.md holds the
// same table for people (a test keeps the two equal).
//
// Thread safety: pure functions over constant data.
#ifndef TENSORMORPH_CORE_FORMAT_HEADER_RULE_H_
#define TENSORMORPH_CORE_FORMAT_HEADER_RULE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/util/error_reason.h"

namespace tensormorph {

// In the table's order. Append only.
enum class HeaderRule {
  kTruncated,
  kMagic,
  kByteOrder,
  kTensorCount,
  kKvCount,
  kStringLength,
  kKeyEmpty,
  kValueType,
  kArrayType,
  kArrayLength,
  kArrayDepth,
  kDuplicateKey,
  kAlignment,
  kDuplicateName,
  kNameLength,
  kRank,
  kShape,
  kSizeOverflow,
  kBlockSize,
  kUnknownTypeExtent,
  kOffset,
  kDataRange,
  kHeaderLength,
  kHeaderLimit,
  kHeaderObject,
  kHeaderJson,
  kHeaderUtf8,
  kHeaderDepth,
  kMetadata,
  kEntry,
  kDtype,
  kDataOffsets,
  kOffsetOrder,
  kDataSize,
  kDataEnd,
};

struct HeaderRuleInfo {
  HeaderRule rule;
  absl::string_view name;     // "tensor-count": the `rule` metadata value
  absl::string_view formats;  // "gguf", "safetensors" or "gguf, safetensors"
  absl::string_view when;     // one line, for docs/errors.md
};

// Every rule, in HeaderRule order.
absl::Span<const HeaderRuleInfo> HeaderRuleTable();
absl::string_view HeaderRuleName(HeaderRule rule);

// DATA_LOSS HEADER_INVALID with metadata {file, rule, then `extra`}: `file`
// is the file's label as the message names it; `extra` holds what a client
// may want without parsing the message (`tensor`, `key`, `expected` and
// `actual`), in that order, when the refusal has them.
absl::Status HeaderRuleError(HeaderRule rule, absl::string_view message,
                             absl::string_view file, ErrorMetadata extra = {});

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_FORMAT_HEADER_RULE_H_
