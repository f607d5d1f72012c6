// The scale rules of `tensormorph check` over the stored scale and
// zero-point tensors of a convention's quantized tensor (GPTQ/AWQ scales,
// compressed-tensors weight_scale / weight_zero_point / global scales, FP8
// weight_scale_inv, bitsandbytes absmax): NaN, Inf, zero, denormal and
// fp16-saturated values, read in bulk as plain tensors of their stored
// dtype. (ggml keeps its scales in the blocks: value_scan.h.)
#ifndef TENSORMORPH_CORE_CHECK_SCALE_SCAN_H_
#define TENSORMORPH_CORE_CHECK_SCALE_SCAN_H_

#include <atomic>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "core/check/finding.h"
#include "core/format/checkpoint.h"

namespace tensormorph {

// Whether the stored part `name` of a quantized tensor holds scales
// (kScale), zero-points (kZero) or neither, from its convention's name.
enum class ScaleRole { kNone, kScale, kZero };
ScaleRole RoleOfPart(absl::string_view name);

// Appends findings (one per rule and scale tensor) for the float scale and
// zero-point parts of `t` that `scanned` does not hold yet, and adds them
// to it. Nothing for plain or ggml tensors.
// Errors: CANCELLED; those of GuardedRead.
absl::Status ScanStoredScales(const Checkpoint& ckpt, const LogicalTensor& t,
                              const std::atomic<bool>* cancelled,
                              absl::flat_hash_set<const StoredTensor*>* scanned,
                              std::vector<Finding>* out);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_CHECK_SCALE_SCAN_H_
