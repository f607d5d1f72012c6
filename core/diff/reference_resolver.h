// How a tensor of a quantized checkpoint finds its full-precision source in
// a reference checkpoint. One set of rules for every call that takes a
// reference: the diff pairs whole checkpoints with it, stats and heatmap
// resolve one tensor.
//  - Both GGUF, or neither: by name.
//  - A GGUF against a Hugging Face (safetensors) source: the llama.cpp name
//    is translated (GgufToHfName), and the GGUF name itself is tried second;
//    for llama-family architectures (llama, mistral) the rows of Q and K go
//    through the RoPE permutation that llama.cpp's converter applied (head
//    counts from the GGUF metadata), whenever the reference tensor is found
//    under another name than the GGUF one (it is then in Hugging Face row
//    order). Dimensions need no reversal: both sides are in numpy order.
#ifndef TENSORMORPH_CORE_DIFF_REFERENCE_RESOLVER_H_
#define TENSORMORPH_CORE_DIFF_REFERENCE_RESOLVER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/diff/row_map.h"
#include "core/format/checkpoint.h"

namespace tensormorph {

// The Hugging Face name of a llama-family GGUF tensor
// ("blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight"), or
// nullopt when the name has no counterpart.
std::optional<std::string> GgufToHfName(absl::string_view gguf_name);

// llama.cpp's converter permutes the rows of Q and K for RoPE: within each
// head of `head_dim` rows, HF row j * head_dim/2 + i becomes GGUF row
// 2i + j. Returns, for each GGUF row, its HF row.
// REQUIRES: rows divide into n_heads heads of even size.
RowMap LlamaRopeRowMap(int64_t rows, int64_t n_heads);

// A reference tensor and how its rows line up with the quantized tensor's.
struct ResolvedReference {
  const LogicalTensor* tensor = nullptr;
  RowMap row_map;  // empty = rows correspond one to one
};

class ReferenceResolver {
 public:
  // Reads the architecture and head counts of `quant` (from the metadata
  // copied at open, never from the mapping). Both checkpoints must outlive
  // the resolver.
  ReferenceResolver(const Checkpoint& quant, const Checkpoint& ref);

  // "by name", or "GGUF -> Hugging Face names (llama)".
  const std::string& method() const { return method_; }
  // True when names are translated (a GGUF against a non-GGUF reference).
  bool translates() const { return translate_; }
  // The GGUF's general.architecture when translating ("llama"; "?" when it
  // has none); empty otherwise.
  std::string architecture() const {
    return translate_ ? (arch_.empty() ? "?" : arch_) : "";
  }

  // The reference names tried for `quant_name`, in order (one or two).
  std::vector<std::string> Candidates(absl::string_view quant_name) const;

  // The first candidate the reference holds, or null. Shapes unchecked.
  const LogicalTensor* Find(const LogicalTensor& quant) const;

  // The row map that lines `ref` up with `quant` (empty = identity).
  // Errors: INVALID_ARGUMENT when a Q/K row count does not divide into the
  // heads of the metadata, naming the key.
  absl::StatusOr<RowMap> RowMapFor(const LogicalTensor& quant,
                                   const LogicalTensor& ref) const;

  // The reference of one tensor: `ref_name` when given, else by the rules;
  // its shape checked against `quant`'s, with its row map. `ref_label` names
  // the reference checkpoint in messages (as the caller spelled it).
  // Errors: NOT_FOUND naming every name tried (and how to name one);
  // INVALID_ARGUMENT naming both tensors and both shapes when they differ,
  // or from RowMapFor.
  absl::StatusOr<ResolvedReference> Resolve(const LogicalTensor& quant,
                                            absl::string_view ref_name,
                                            absl::string_view ref_label) const;

 private:
  const Checkpoint* ref_;
  bool translate_ = false;
  bool permute_ = false;  // a llama-family GGUF: Q and K rows permuted
  std::string arch_;
  std::string method_;
  int64_t heads_ = 0, kv_heads_ = 0;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_REFERENCE_RESOLVER_H_
