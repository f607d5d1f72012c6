// Pairs the tensors of a quantized checkpoint with those of its source.
#ifndef TENSORMORPH_CORE_DIFF_PAIRING_H_
#define TENSORMORPH_CORE_DIFF_PAIRING_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"

namespace tensormorph {

struct TensorPair {
  const LogicalTensor* quant = nullptr;
  const LogicalTensor* ref = nullptr;
  RowMap row_map;  // empty = rows correspond one to one
};

struct Pairing {
  std::string method;  // "by name" or "GGUF -> Hugging Face (llama)"
  std::vector<TensorPair> pairs;
  std::vector<std::string> only_in_quant;
  std::vector<std::string> only_in_ref;
  std::vector<std::string> shape_mismatches;  // "name: [a,b] vs [c,d]"
  // Paired by name and shape but with no elements (a zero dimension):
  // skipped, not diffed.
  std::vector<std::string> empty;
};

// The Hugging Face name of a llama-family GGUF tensor
// ("blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight"), or
// nullopt when the name has no counterpart.
std::optional<std::string> GgufToHfName(absl::string_view gguf_name);

// llama.cpp's converter permutes the rows of Q and K for RoPE: within each
// head of `head_dim` rows, HF row j * head_dim/2 + i becomes GGUF row
// 2i + j. Returns, for each GGUF row, its HF row.
RowMap LlamaRopeRowMap(int64_t rows, int64_t n_heads);

// Pairs by name. When `quant` is GGUF and `ref` is not, names go through
// GgufToHfName and, for llama-family architectures, Q and K rows through
// the RoPE permutation (head counts from the GGUF metadata). Dimensions
// need no reversal: both sides are in numpy order. Only quantized tensors
// whose name matches `glob` (fnmatch; empty = all) are paired.
// Errors: INVALID_ARGUMENT when a Q/K row count does not divide into heads.
absl::StatusOr<Pairing> PairTensors(const Checkpoint& quant,
                                    const Checkpoint& ref,
                                    const std::string& glob = "");

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_PAIRING_H_
