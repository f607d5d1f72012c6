#include "proto/diff_summary.h"

#include <algorithm>
#include <cmath>

namespace tensormorph {

void SetRankedLists(std::vector<DiffSummaryEntry> entries,
                    v1::DiffSummary* summary) {
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
  summary->clear_worst_tensors();
  for (size_t i = 0; i < n; ++i) summary->add_worst_tensors(entries[i].name);
  std::vector<std::string> flagged;
  for (DiffSummaryEntry& e : entries) {
    if (e.flagged) flagged.push_back(std::move(e.name));
  }
  std::sort(flagged.begin(), flagged.end());
  summary->clear_flagged();
  for (std::string& name : flagged) summary->add_flagged(std::move(name));
}

}  // namespace tensormorph
