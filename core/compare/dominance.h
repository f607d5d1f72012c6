// Which quantizations of one source are dominated: another is no larger and
// no worse, and strictly smaller or better (Pareto dominance over (bytes,
// error)), overall and per layer (`blk.N`). What `tensormorph compare`
// marks, so that a user picks among the rest.
//
// Thread safety: pure functions.
#ifndef TENSORMORPH_CORE_COMPARE_DOMINANCE_H_
#define TENSORMORPH_CORE_COMPARE_DOMINANCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tensormorph {

// One quantization's size and error over the same tensors as the others'.
struct SizeError {
  int64_t bytes = 0;
  double error = 0;  // a sum of squared errors (NaN: unknown, never compared)
};

// For each point, the indices of the points that dominate it (ascending;
// empty: not dominated). Equal points dominate neither each other.
std::vector<std::vector<int>> DominatedBy(const std::vector<SizeError>& points);

// The layer a tensor name belongs to, "blk.N" (llama.cpp's names) or
// "layers.N" (Hugging Face's "model.layers.N."), else "" (embeddings,
// output, norms outside the blocks).
std::string LayerOf(absl::string_view tensor_name);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_COMPARE_DOMINANCE_H_
