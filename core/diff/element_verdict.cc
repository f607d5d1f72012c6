#include "core/diff/element_verdict.h"

#include <algorithm>
#include <cmath>

#include "core/diff/error_pass.h"
#include "core/quant/rounding_bound.h"
#include "core/util/status_macros.h"

namespace tensormorph {

absl::StatusOr<ElementVerdict> JudgeElement(const Encoding& quant,
                                            const EncodingInfo& source_info,
                                            int64_t flat, float source,
                                            std::vector<QuantRun>* runs) {
  const RoundingBound bound = quant.Bound();
  ElementVerdict out;
  out.chosen_codes = bound.codes != RoundingBound::Codes::kNearest;
  float value = 0;
  TM_RETURN_IF_ERROR(quant.DecodeRuns(flat, 1, &value, runs));
  if (runs->empty()) return out;
  // The run as QuantDiff bounds it (tensor_diff.cc's BoundRuns), cut to
  // this one element: its parameters are its group's whatever its count.
  QuantRun run = runs->front();
  run.count = 1;
  ApplyBound(bound, &run);
  WidenForSourceRounding(bound.float_codes ? SourceRoundingRel(source_info) : 0,
                         source_info.scheme == "F16", &run);
  out.bound_steps = LevelBoundSteps(run, value);
  if (std::isnan(value) || std::isnan(source)) return out;
  ErrorSums sums;
  double steps = 0;
  AccumulateErrorsScalar(&value, &run, 1, &source, flat, &steps, &sums);
  using Kind = ElementVerdict::Kind;
  if (sums.zeroed_elements > 0) {
    out.kind = Kind::kZeroedGroup;
  } else if (sums.clipped_beyond_bound > 0) {
    out.kind = Kind::kClippedBeyondBound;
    out.excess_steps = sums.max_excess_clipped;
  } else if (sums.clipped > 0) {
    out.kind = Kind::kClipped;
  } else if (sums.not_nearest > 0) {
    out.kind = Kind::kNotNearest;
    out.excess_steps = sums.max_excess_not_nearest;
  } else {
    out.kind = Kind::kWithin;
  }
  return out;
}

}  // namespace tensormorph
