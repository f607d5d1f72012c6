// The rules that turn per-tensor diff reports into a DiffSummary's ranked
// lists, in one place: the service applies them to a run (or part), and
// `tensormorph diff-merge` to the merged parts, so the two cannot drift.
#ifndef TENSORMORPH_PROTO_DIFF_SUMMARY_H_
#define TENSORMORPH_PROTO_DIFF_SUMMARY_H_

#include <string>
#include <vector>

#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// DiffSummary.worst_tensors holds at most this many names.
inline constexpr size_t kDiffWorstTensors = 5;

// What the ranked lists need of one TensorDiffReport.
struct DiffSummaryEntry {
  std::string name;
  double max_err_steps = 0;
  bool flagged = false;
};

inline DiffSummaryEntry EntryOf(const v1::TensorDiffReport& r) {
  return {r.name(), r.max_err_steps(), r.flagged()};
}

// Replaces `summary`'s worst_tensors and flagged from `entries` (in any
// order): worst_tensors the kDiffWorstTensors largest max_err_steps, worst
// first, ties by name (a NaN counts as the worst, as it is the least
// trustworthy); flagged every flagged name, sorted.
void SetRankedLists(std::vector<DiffSummaryEntry> entries,
                    v1::DiffSummary* summary);

}  // namespace tensormorph

#endif  // TENSORMORPH_PROTO_DIFF_SUMMARY_H_
