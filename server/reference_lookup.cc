#include "server/reference_lookup.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/diff/reference_resolver.h"

namespace tensormorph {

absl::StatusOr<TensorReference> LookUpReference(
    CheckpointRegistry& registry, const Checkpoint& quant,
    const LogicalTensor& tensor, const std::string& reference,
    const std::string& reference_tensor) {
  if (reference.empty() && !reference_tensor.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reference_tensor '", reference_tensor,
                     "' given without a reference checkpoint (CLI: --ref)"));
  }
  TensorReference r;
  if (reference.empty()) return r;
  auto ref = registry.Acquire(reference);
  if (!ref.ok()) return ref.status();
  r.ckpt = *std::move(ref);
  auto found = ReferenceResolver(quant, *r.ckpt)
                   .Resolve(tensor, reference_tensor, reference);
  if (!found.ok()) return found.status();
  r.tensor = found->tensor;
  r.rows = std::move(found->row_map);
  return r;
}

}  // namespace tensormorph
