// The value rules of `tensormorph check` over one logical tensor, in one
// streaming pass at decode speed: NaN/Inf and fp16 overflow among the
// decoded values, and per quantization group all-zero, constant and
// saturated groups (many values at the group's end levels), ggml block
// scales that are NaN, Inf or zero, and the levels of an integer grid the
// codes never use (dead-levels). Groups no
// value rule can fire on are only counted: marked from their decoded values
// (run_counts.h), or for ggml Q8_0 and Q4_K from their blocks' bytes without
// decoding (block_marks.h); every other group is counted value by value. A
// plain F16 or BF16 tensor is read from its codes, and a piece is decoded
// only when one of them is special (run_counts.h).
#ifndef TENSORMORPH_CORE_CHECK_VALUE_SCAN_H_
#define TENSORMORPH_CORE_CHECK_VALUE_SCAN_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "core/check/finding.h"
#include "core/format/checkpoint.h"
#include "core/quant/rounding_bound.h"
#include "core/tensor.h"

namespace tensormorph {

struct ValueScanOptions {
  // Elements decoded at a time (1 MiB of floats), rounded to whole rows
  // where a row is shorter; a row up to max_piece_elements long is one
  // piece (see the .cc: whole rows are what lets a group be judged and
  // dropped once a piece passes it, so memory stays bounded).
  int64_t piece_elements = int64_t{1} << 18;
  int64_t max_piece_elements = int64_t{1} << 22;
  // Judge saturated-group. Off for a tensor that a diff against its source
  // judges (check --source): the diff sees the clipping itself, and the
  // groups' end levels would only say it again, less surely.
  bool saturated_groups = true;
};

// Whether saturated-group judges tensors of this encoding: every quantized
// one but those whose format cannot clip by construction, that is a bound
// without designed clipping (Clip::kNone) on a range derived from the
// group's own min and max (an offset or zero-point: !info.symmetric) by a
// round-to-nearest quantizer: ggml Q4_1 and Q5_1, and asymmetric
// compressed-tensors int groups (min/max observers); not GPTQ, whose error
// feedback moves later columns past the range it set. A symmetric Clip::kNone
// format (Q8_0, symmetric int8) is judged: its correct quantizer puts only the
// absmax element on an end level, so both ends piled up mean a scale too small.
// Formats that clip by design (Q4_0/Q5_0's short end, K-quants', IQ4's and
// AWQ's searched scales, MXFP4) are judged too: there the rule says the scale
// may clip, which only the source can tell apart from design.
bool SaturatedGroupJudged(const RoundingBound& bound, const EncodingInfo& info);

// Appends to `out` at most one finding per rule for `t` (count, the worst
// group, expected vs actual). `on_elements(n)` after each piece of n
// elements; `cancelled` polled between pieces.
// REQUIRES: `t` is one of `ckpt`'s tensors.
// Memory: one piece of values and the groups that piece touches.
// Errors: UNIMPLEMENTED (an encoding that cannot decode); CANCELLED; those
// of GuardedRead (a file that shrank under the read).
absl::Status ScanTensorValues(const Checkpoint& ckpt, const LogicalTensor& t,
                              const ValueScanOptions& options,
                              const std::atomic<bool>* cancelled,
                              const std::function<void(int64_t)>& on_elements,
                              std::vector<Finding>* out);

// The file of `t`'s first stored part (its codes), for findings.
std::string FileOfTensor(const Checkpoint& ckpt, const LogicalTensor& t);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_CHECK_VALUE_SCAN_H_
