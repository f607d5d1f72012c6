// The usual safetensors header, read in one SAX pass that builds no JSON
// document: tensors' names, dtypes, shapes and offsets straight into entries.
// A header of 10,000 tensors was 60% of an open through the document.
#ifndef TENSORMORPH_CORE_FORMAT_SAFETENSORS_FAST_HEADER_H_
#define TENSORMORPH_CORE_FORMAT_SAFETENSORS_FAST_HEADER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/format/stored_tensor.h"

namespace tensormorph {

// One tensor as the header states it, before offsets are checked.
struct SafetensorsEntry {
  StoredTensor tensor;  // name, dtype, shape
  uint64_t begin = 0, end = 0;
};

struct SafetensorsHeaderEntries {
  std::vector<std::pair<std::string, std::string>> metadata;  // sorted by key
  std::vector<SafetensorsEntry> entries;  // in the header's order
};

// Reads `json` when it is a well-formed header that breaks none of the
// per-tensor rules (a JSON object of unique keys; `__metadata__` an object of
// unique string values; each tensor an object of exactly the unique keys
// dtype, shape and data_offsets, with a known dtype string, at most
// `max_rank` integer dims and two integer offsets, all in [0, max_extent]; a
// name of 1 to `max_name_bytes` bytes). Anything else gives nullopt, and
// the caller reads the header through the JSON document instead, which
// names what is wrong (or accepts what this pass is too narrow for).
std::optional<SafetensorsHeaderEntries> ReadSafetensorsHeaderFast(
    absl::string_view json, size_t max_rank, uint64_t max_extent,
    size_t max_name_bytes);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_FORMAT_SAFETENSORS_FAST_HEADER_H_
