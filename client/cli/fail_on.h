// --fail-on conditions of `tensormorph diff`: "metric op number".
#ifndef TENSORMORPH_CLIENT_CLI_FAIL_ON_H_
#define TENSORMORPH_CLIENT_CLI_FAIL_ON_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

struct FailOn {
  std::string text;    // as written
  std::string metric;  // a numeric field of TensorDiffReport
  std::string op;      // > >= < <= == !=
  double threshold = 0;
};

// Parses "max_err_steps>0.51", "sqnr_db < 25", ...
// Errors: INVALID_ARGUMENT naming the unknown metric or the malformed text,
// and listing the metrics.
absl::StatusOr<FailOn> ParseFailOn(const std::string& text);

// True when `report` trips the condition.
bool Trips(const FailOn& f, const v1::TensorDiffReport& report);

// The metric's value in a report (nullopt for an unknown metric).
std::optional<double> MetricOf(const v1::TensorDiffReport& report,
                               const std::string& metric);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_FAIL_ON_H_
