// Reads and validates a GGUF file's header (versions 2 and 3).
#ifndef TENSORMORPH_CORE_FORMAT_GGUF_READER_H_
#define TENSORMORPH_CORE_FORMAT_GGUF_READER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/format/gguf_metadata.h"
#include "core/format/stored_tensor.h"

namespace tensormorph {

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr uint32_t kGgufMaxDims = 4;        // GGML_MAX_DIMS
inline constexpr uint64_t kGgufMaxNameBytes = 63;  // GGML_MAX_NAME - 1
inline constexpr int kGgufMaxArrayDepth = 8;

struct GgufFile {
  uint32_t version = 0;
  uint32_t alignment = kGgufDefaultAlignment;
  uint64_t data_offset = 0;           // start of the tensor data section
  std::vector<GgufKv> metadata;       // in file order
  std::vector<StoredTensor> tensors;  // in file order; file_index 0

  const GgufKv* Find(absl::string_view key) const;
};

// Parses the GGUF file whose full contents are `file` (named `file_label` in
// messages). Makes every check of ggml's gguf parser, with overflow-checked
// arithmetic throughout: magic; version 2 or 3 (with a hint when the version
// looks byte-swapped); tensor and key counts bounded by the bytes remaining;
// string and array lengths bounded by the bytes remaining; known value types;
// no empty or duplicate keys; general.alignment a uint32 power of two; no
// duplicate tensor names; names under 64 bytes; n_dims <= 4; every dimension
// >= 0 (0: an empty tensor, as ggml allows) with an int64 element count;
// ne[0] a multiple of its type's block size; each offset equal to the
// running padded sum (hence aligned, not overlapping, not backwards); and the
// data inside the file.
// A type id not in Tensormorph's table (an unknown id, or one ggml removed:
// 4, 5, 31-33, 36-38) does not fail the file: that tensor is listed as
// DType::kGgmlUnknown with its id in StoredTensor::ggml_type_id, and is never
// decoded. Its size cannot be computed, so its extent is bounded by the
// layout: it runs from its offset (checked like any other) to the next
// tensor's offset, which must be aligned and not before it, or, for the last
// tensor, to the end of the file. nbytes is that extent (padding included),
// so it never reaches past the file or into another tensor.
// Dimensions are reversed into numpy order (ne = [256, 4] is shape [4, 256]).
// ggml takes any bytes as a name or key; here tensor names and keys are
// their EscapeUtf8 spellings (core/util/utf8.h: valid UTF-8 unchanged,
// other bytes as `\xHH`), so they can reach protobuf, and a client finds a
// tensor by the name it was listed under. The escaping is injective, so the
// duplicate checks over escaped names refuse exactly the duplicate raw ones;
// the length limit applies to the raw name, as in ggml. String values stay
// raw bytes (GgufKv::str). Messages name the escaped spellings.
// Errors: DATA_LOSS naming the file, the section/key/tensor, the rule and
// expected vs actual; UNIMPLEMENTED for GGUF version 1 or above 3.
absl::StatusOr<GgufFile> ParseGguf(absl::Span<const uint8_t> file,
                                   absl::string_view file_label);

// True when `file` starts with the GGUF magic.
bool LooksLikeGguf(absl::Span<const uint8_t> file);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_FORMAT_GGUF_READER_H_
