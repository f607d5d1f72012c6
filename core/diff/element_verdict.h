// One element of a quantized tensor judged against its source element as
// a diff judges it (InspectScalars with a reference): against its own run's
// rounding bound, by the same arithmetic (AccumulateErrorsScalar on a run of
// one), so that an element the Scalar Inspector calls within its bound is
// one QuantDiff counts nowhere, whatever the page has at hand.
#ifndef TENSORMORPH_CORE_DIFF_ELEMENT_VERDICT_H_
#define TENSORMORPH_CORE_DIFF_ELEMENT_VERDICT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/quant/encoding.h"

namespace tensormorph {

struct ElementVerdict {
  enum class Kind {
    kNotANumber,          // the element or its source is NaN: no verdict
    kWithin,              // within the bound (QuantDiff counts it nowhere)
    kNotNearest,          // inside the range, beyond the bound
    kClipped,             // beyond the range, as far as the format allows
    kClippedBeyondBound,  // beyond the range, further than it allows
    kZeroedGroup,         // its group's stored scale is 0 (no steps)
  };
  Kind kind = Kind::kNotANumber;
  // The bound at the element's level, in steps (LevelBoundSteps of its run
  // with the format's bound applied, and widened for a bf16 or f16 source
  // of a float format, as QuantDiff widens it).
  double bound_steps = 0;
  // How far beyond the bound, in steps; 0 unless kNotNearest or
  // kClippedBeyondBound.
  double excess_steps = 0;
  // The format's quantizer chooses codes on purpose (GPTQ's error
  // feedback): kNotNearest is information, as QuantDiff reports it.
  bool chosen_codes = false;
};

// The verdict on element `flat` of a tensor of encoding `quant` whose
// source element (through
// any row map) is `source`, a value of a tensor of encoding `source_info`.
// Reads the element's run (Encoding::DecodeRuns) into `runs`: the caller
// runs it under the fault guard, as it reads any mapped bytes, and reserves
// room for one run first so that nothing is allocated there.
// REQUIRES: 0 <= flat < the tensor's elements; runs->capacity() >= 1.
// Errors: those of DecodeRuns.
absl::StatusOr<ElementVerdict> JudgeElement(const Encoding& quant,
                                            const EncodingInfo& source_info,
                                            int64_t flat, float source,
                                            std::vector<QuantRun>* runs);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_ELEMENT_VERDICT_H_
