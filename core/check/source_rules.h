// The rules of `tensormorph check --source SRC`: every quantized tensor is
// diffed against its full-precision source (core/diff's PairTensors and
// DiffTensor, through their public API) and held to per-scheme defaults of
// the diff gates (`diff --fail-on`), each tripped gate one finding.
#ifndef TENSORMORPH_CORE_CHECK_SOURCE_RULES_H_
#define TENSORMORPH_CORE_CHECK_SOURCE_RULES_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/check/finding.h"
#include "core/format/checkpoint.h"
#include "core/tensor.h"

namespace tensormorph {

// The gate `tensormorph check --source` holds a tensor of this encoding to
// for `metric` ("max_excess_steps", "sqnr_db"), as `diff --fail-on` text
// ("max_excess_steps>0", "sqnr_db<13.8"); nullopt when the metric is not
// judged for it:
//  - max_excess_steps > 0 for every quantized encoding: an element beyond
//    the rounding bound its format states (Encoding::Bound) is clipped
//    beyond design or, where codes are meant to be nearest, not nearest.
//    Where the quantizer chooses codes on purpose (GPTQ, AWQ), elements
//    beyond the bound give an information finding instead.
//  - sqnr_db < 6.02 b + 1.76 - 12 for integer grids of b = 2..8 bits: the
//    textbook SQNR of a b-bit uniform quantizer over a full-scale signal
//    (6.02 b + 1.76 dB), less 12 dB for weights, which do not fill the
//    range: a gaussian whose group reaches k sigma loses
//    10 log10(k^2 / 3) + 1.76 dB against that figure, 11.4 dB at k = 5.3
//    (the largest of a million samples, a per-tensor scale); the margin
//    covers any group, row or tensor of gaussian weights, so falling below
//    it means a scale, zero-point or code that is wrong, not mere rounding.
std::optional<std::string> DefaultSourceGate(const EncodingInfo& info,
                                             absl::string_view metric);

// Pairs `ckpt`'s quantized tensors with `source`'s (PairTensors), diffs
// each and appends a finding per tripped default gate: source-err-steps
// for max_excess_steps, source-sqnr for sqnr_db, naming the tensor, its
// file, the gate as expected and the measured value (with the worst
// element) as actual. `on_elements(n)` as each piece is diffed.
// Errors: those of PairTensors and DiffTensor but UNIMPLEMENTED (a tensor
// that cannot decode is skipped: undecodable-tensor reports it);
// FAILED_PRECONDITION / INVALID_ARGUMENT from CheckPairing when no pair is
// left to compare (a source of other tensors, or arguments reversed).
absl::Status CheckAgainstSource(const Checkpoint& ckpt,
                                const Checkpoint& source,
                                const std::atomic<bool>* cancelled,
                                const std::function<void(int64_t)>& on_elements,
                                std::vector<Finding>* out);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_CHECK_SOURCE_RULES_H_
