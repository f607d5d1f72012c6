// The rules that turn per-tensor diff reports into a DiffSummary's ranked
// lists, in one place: the service applies them to a run (or part), and
// `tensormorph diff-merge` to the merged parts, so the two cannot drift.
#ifndef TENSORMORPH_CORE_DIFF_PARTS_RANKED_LISTS_H_
#define TENSORMORPH_CORE_DIFF_PARTS_RANKED_LISTS_H_

#include <cstddef>
#include <string>
#include <vector>

namespace tensormorph {

// DiffSummary.worst_tensors holds at most this many names.
inline constexpr size_t kDiffWorstTensors = 5;

// What the ranked lists need of one TensorDiffReport.
struct DiffSummaryEntry {
  std::string name;
  double max_err_steps = 0;
  bool flagged = false;
};

// DiffSummary's two ranked lists.
struct RankedLists {
  std::vector<std::string> worst_tensors;
  std::vector<std::string> flagged;
};

// From `entries` (in any order): worst_tensors the kDiffWorstTensors largest
// max_err_steps, worst first, ties by name (a NaN counts as the worst, as it
// is the least trustworthy); flagged every flagged name, sorted.
RankedLists RankDiffEntries(std::vector<DiffSummaryEntry> entries);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_PARTS_RANKED_LISTS_H_
