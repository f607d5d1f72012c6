// What a llama.cpp mix's file size is predicted from: a single-file GGUF's
// header length (its data section's start), alignment, ftype and the bytes
// of each stored tensor.
//
// Thread safety: a pure function over an open checkpoint.
#ifndef TENSORMORPH_CORE_COMPARE_GGUF_LAYOUT_H_
#define TENSORMORPH_CORE_COMPARE_GGUF_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/format/checkpoint.h"

namespace tensormorph {

struct GgufLayout {
  int64_t data_offset = 0;  // the least stored tensor offset
  int64_t alignment = 32;   // general.alignment, else GGUF's default
  int32_t file_type = -1;   // general.file_type (-1: absent)
  // (name, bytes) of every stored tensor, in stored_tensors() order.
  std::vector<std::pair<std::string, int64_t>> tensors;
};

// The layout of `c` when it is a GGUF of one file with at least one tensor;
// nullopt otherwise (a safetensors checkpoint, a split GGUF).
std::optional<GgufLayout> GgufLayoutOf(const Checkpoint& c);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_COMPARE_GGUF_LAYOUT_H_
