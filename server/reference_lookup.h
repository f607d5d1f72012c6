// The reference of one tensor for the calls that take one (ComputeStats,
// GetHeatmap, InspectScalars): the reference checkpoint opened through the
// registry, and its tensor found by ReferenceResolver, the rules QuantDiff
// pairs by, so that a GGUF finds its Hugging Face source (and its Q/K rows
// their source rows) in every view as in the diff.
#ifndef TENSORMORPH_SERVER_REFERENCE_LOOKUP_H_
#define TENSORMORPH_SERVER_REFERENCE_LOOKUP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/diff/row_map.h"
#include "core/format/checkpoint.h"
#include "server/checkpoint_registry.h"

namespace tensormorph {

struct TensorReference {
  std::shared_ptr<const Checkpoint> ckpt;  // null when none was asked for
  const LogicalTensor* tensor = nullptr;   // null when none was asked for
  RowMap rows;  // quantized row -> reference row; empty = one to one
};

// The reference of `tensor` (of `quant`) in the checkpoint `reference`:
// `reference_tensor` when given, else the diff's counterpart. An empty
// `reference` asks for none (an empty TensorReference).
// Errors: INVALID_ARGUMENT for a reference_tensor without a reference; those
// of CheckpointRegistry::Acquire (NOT_FOUND for no such checkpoint); those
// of ReferenceResolver::Resolve: NOT_FOUND naming every name tried,
// INVALID_ARGUMENT naming both shapes when they differ or a Q/K row count
// that does not divide into the metadata's heads.
absl::StatusOr<TensorReference> LookUpReference(
    CheckpointRegistry& registry, const Checkpoint& quant,
    const LogicalTensor& tensor, const std::string& reference,
    const std::string& reference_tensor);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_REFERENCE_LOOKUP_H_
