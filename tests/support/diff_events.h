// The events of one diff, from a QuantDiff call or from the lines that
// `tensormorph diff --json` and `diff-merge --json` print, and the one
// comparison the diff tests make of two of them: field for field, wall time
// aside. Compiled into the test binaries that use it (it asserts).
#ifndef TENSORMORPH_TESTS_SUPPORT_DIFF_EVENTS_H_
#define TENSORMORPH_TESTS_SUPPORT_DIFF_EVENTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph::testing {

struct DiffEvents {
  absl::Status status;                        // of the call; OK for lines
  std::vector<v1::TensorDiffReport> reports;  // as they came
  std::vector<v1::DiffProgress> progress;
  std::vector<v1::DiffSummary> summaries;  // one, for a whole diff
};

// Every line of `out` as a QuantDiffEvent (a line that does not parse fails
// the test), sorted into `events`.
DiffEvents ParseDiffJson(const std::string& out);

// The same events as JSON lines, reports then summaries: a part file.
std::string PrintDiffJson(const DiffEvents& events);

// Field for field: the status, every report by name, and the one summary
// but for its wall time (the one number a merge or a router cannot
// reproduce).
void ExpectSameDiff(const DiffEvents& got, const DiffEvents& want);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_DIFF_EVENTS_H_
