#include "core/diff_parts/ranked_lists.h"

#include <algorithm>
#include <cmath>

namespace tensormorph {

RankedLists RankDiffEntries(std::vector<DiffSummaryEntry> entries) {
  // A strict weak order even with NaNs: NaN first, then by value, then name.
  auto worse = [](const DiffSummaryEntry& a, const DiffSummaryEntry& b) {
    const bool an = std::isnan(a.max_err_steps);
    const bool bn = std::isnan(b.max_err_steps);
    if (an != bn) return an;
    if (!an && a.max_err_steps != b.max_err_steps)
      return a.max_err_steps > b.max_err_steps;
    return a.name < b.name;
  };
  const size_t n = std::min(kDiffWorstTensors, entries.size());
  std::partial_sort(entries.begin(), entries.begin() + n, entries.end(), worse);
  RankedLists out;
  for (size_t i = 0; i < n; ++i) out.worst_tensors.push_back(entries[i].name);
  for (DiffSummaryEntry& e : entries) {
    if (e.flagged) out.flagged.push_back(std::move(e.name));
  }
  std::sort(out.flagged.begin(), out.flagged.end());
  return out;
}

}  // namespace tensormorph
