#include "core/compare/gguf_layout.h"

#include <algorithm>
#include <limits>

namespace tensormorph {

std::optional<GgufLayout> GgufLayoutOf(const Checkpoint& c) {
  if (c.format() != CheckpointFormat::kGguf || c.files().size() != 1 ||
      c.stored_tensors().empty()) {
    return std::nullopt;
  }
  GgufLayout out;
  uint64_t first = std::numeric_limits<uint64_t>::max();
  for (const StoredTensor& t : c.stored_tensors()) {
    first = std::min(first, t.offset);
    out.tensors.emplace_back(t.name, static_cast<int64_t>(t.nbytes));
  }
  out.data_offset = static_cast<int64_t>(first);
  for (const GgufKv& kv : c.gguf_metadata()) {
    const std::optional<uint64_t> v = kv.AsUnsigned();
    if (!v.has_value()) continue;
    if (kv.key == "general.alignment") out.alignment = static_cast<int64_t>(*v);
    if (kv.key == "general.file_type" && *v <= INT32_MAX) {
      out.file_type = static_cast<int32_t>(*v);
    }
  }
  return out;
}

}  // namespace tensormorph
