// Diff gates: "METRIC OP NUMBER" conditions over a tensor's quantization
// diff ("max_err_steps>0.51", "sqnr_db < 25"). One parser and evaluator for
// every client: the CLI's --fail-on sends them as QuantDiffRequest.fail_on,
// the service parses them up front and marks the tensors that trip them, so
// a CLI, a Python script or a web page gate identically.
#ifndef TENSORMORPH_CORE_DIFF_GATE_H_
#define TENSORMORPH_CORE_DIFF_GATE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/diff/tensor_diff.h"

namespace tensormorph {

struct DiffGate {
  enum class Op {
    kGreater,
    kGreaterEqual,
    kLess,
    kLessEqual,
    kEqual,
    kNotEqual
  };
  std::string text;    // as written, for the reasons a tensor trips it
  std::string metric;  // one of DiffGateMetrics()
  Op op = Op::kGreater;
  double threshold = 0;  // finite or ±inf, never NaN
};

// The metrics a gate may name, comma separated, in the order documented
// (the numeric fields of TensorDiffReport).
const std::string& DiffGateMetrics();

// Parses "METRIC OP NUMBER"; OP is one of > >= < <= == !=, NUMBER a decimal
// or "inf"/"-inf"; blanks around the parts are allowed.
// Errors: INVALID_ARGUMENT quoting `text` and saying what is wrong (not the
// form, an unknown metric, a threshold that is NaN), then the metrics.
absl::StatusOr<DiffGate> ParseDiffGate(absl::string_view text);

// `d`'s value of `metric` (nullopt for a name not in DiffGateMetrics()).
std::optional<double> DiffMetric(const TensorDiff& d, absl::string_view metric);

// induced_zeros over the source's nonzero elements (0 when all are zero).
double InducedZeroFraction(const TensorDiff& d);

// True when `d` trips `gate`. A NaN metric trips only "!=".
bool Trips(const DiffGate& gate, const TensorDiff& d);

// The reasons `d` trips `gates`, one per tripped gate in their order:
// "max_err_steps = 0.513316 (max_err_steps>0.513)". Empty: not flagged.
std::vector<std::string> TrippedReasons(absl::Span<const DiffGate> gates,
                                        const TensorDiff& d);

// A metric's value by name (as DiffMetric), for a diff held in another form
// than TensorDiff: a TensorDiffReport read back from a part file, gated
// again by `tensormorph diff-merge --fail-on`. nullopt: no such metric.
using DiffMetricLookup =
    absl::FunctionRef<std::optional<double>(absl::string_view metric)>;

// As above over `metric`: the same rules and the same reason text, so a
// report gated again trips exactly as the service gated its TensorDiff
// (a metric the lookup lacks counts as 0, as Trips does).
bool Trips(const DiffGate& gate, DiffMetricLookup metric);
std::vector<std::string> TrippedReasons(absl::Span<const DiffGate> gates,
                                        DiffMetricLookup metric);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_GATE_H_
