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
// for `metric` ("max_err_steps", "sqnr_db"), as `diff --fail-on` text
// ("max_err_steps>0.51", "sqnr_db<13.8"); nullopt when the metric is not
// judged for it:
//  - max_err_steps > 0.51 for integer grids quantized by rounding to
//    nearest (compressed-tensors int, ggml Q4_0 Q4_1 Q5_0 Q5_1 Q8_0, plain
//    integer conventions): rounding keeps the error at or below half a step,
//    0.51 leaves room for the fp16/fp32 rounding of the scale itself. Not
//    for quantizers that trade a weight's own error for the layer's output
//    (GPTQ, AWQ) or search the scales (ggml K-quants and IQ types): their
//    weights are more than half a step off by design.
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
// for max_err_steps, source-sqnr for sqnr_db, naming the tensor, its
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
