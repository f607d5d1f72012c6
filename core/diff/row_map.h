// Which reference row holds the weights of each row of a quantized tensor:
// llama.cpp's converter permutes the rows of Q and K for its RoPE layout, so
// a GGUF Q/K row is compared with another row of the Hugging Face source.
#ifndef TENSORMORPH_CORE_DIFF_ROW_MAP_H_
#define TENSORMORPH_CORE_DIFF_ROW_MAP_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace tensormorph {

// Rows are the tensor's last dimension's runs (flat index / cols): entry r
// is the reference row for row r of the quantized tensor. Empty = identity.
using RowMap = std::vector<int64_t>;

// OK when `map` is empty, or has one entry per row of `tensor` (rank >= 1)
// each naming a row of it. Errors: INVALID_ARGUMENT saying which rule broke.
absl::Status CheckRowMap(const RowMap& map, const LogicalTensor& tensor);

// What a view comparing `t` with `ref` (nullptr: none) through `map` needs:
// the same shape, and a map that fits. Errors: INVALID_ARGUMENT naming both
// tensors and both shapes, or the map's broken rule.
absl::Status CheckReference(const LogicalTensor& t, const LogicalTensor* ref,
                            const RowMap& map);

// The reference element that lines up with element `flat` of the quantized
// tensor: (row r, column c) -> (map[r], c), with `cols` the last dimension.
// REQUIRES: map is empty or CheckRowMap holds; 0 <= flat < the elements.
inline int64_t MappedFlatIndex(const RowMap& map, int64_t cols, int64_t flat) {
  if (map.empty()) return flat;
  return map[static_cast<size_t>(flat / cols)] * cols + flat % cols;
}

// Decodes `count` reference values that line up with the quantized tensor's
// elements [first, first + count): element (row r, column c) reads the
// reference at (map[r], c). Any span works (it need not hold whole rows).
// REQUIRES: CheckRowMap(map, ref) is OK; the span lies inside `ref`; called
// under the caller's fault guard (it reads mapped memory).
absl::Status DecodeMappedRows(const LogicalTensor& ref, const RowMap& map,
                              int64_t first, int64_t count, float* out);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_ROW_MAP_H_
