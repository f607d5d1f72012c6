// Reads and validates a safetensors file's header.
#ifndef TENSORMORPH_CORE_FORMAT_SAFETENSORS_READER_H_
#define TENSORMORPH_CORE_FORMAT_SAFETENSORS_READER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/format/stored_tensor.h"

namespace tensormorph {

// The reference implementation's limit on the JSON header.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
// Shape entries and offsets above this are rejected (2^48 bytes = 256 TiB).
inline constexpr uint64_t kMaxSafetensorsExtent = uint64_t{1} << 48;
inline constexpr size_t kMaxTensorRank = 16;
inline constexpr size_t kMaxTensorNameBytes = 4096;

struct SafetensorsHeader {
  uint64_t header_bytes = 0;  // N, the JSON length
  uint64_t data_start = 0;    // 8 + N
  std::vector<std::pair<std::string, std::string>> metadata;  // __metadata__
  std::vector<StoredTensor> tensors;  // sorted by offset; file_index 0
};

// Parses the file whose full contents are `file`, named `file_label` in
// messages. Applies every rule of the safetensors reference implementation:
// header length <= 100,000,000 and inside the file; UTF-8 JSON object;
// `__metadata__` a string-to-string map; each tensor {dtype, shape,
// data_offsets} with offsets sorted from 0, contiguous, without gaps or
// overlaps; byte size = elements * bits / 8 with overflow-checked arithmetic
// and whole bytes; the data ending exactly at the end of the file. Beyond the
// reference: duplicate keys, shape entries and offsets <= 2^48, rank <= 16.
// Leading whitespace before the JSON object is accepted.
// Errors: DATA_LOSS naming the file, the tensor or key, the rule, expected vs
// actual; UNIMPLEMENTED for a dtype string Tensormorph does not know.
absl::StatusOr<SafetensorsHeader> ParseSafetensors(
    absl::Span<const uint8_t> file, absl::string_view file_label);

// True when `file` starts like a safetensors file (a plausible header length
// followed by optional whitespace and '{').
bool LooksLikeSafetensors(absl::Span<const uint8_t> file);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_FORMAT_SAFETENSORS_READER_H_
