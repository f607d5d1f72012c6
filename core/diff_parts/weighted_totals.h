// A diff summary's importance-weighted totals, from its tensors' reports:
// computed alike by the server (one diff) and by `tensormorph diff-merge`
// (the parts of one), so the two give the same bits.
#ifndef TENSORMORPH_CORE_DIFF_PARTS_WEIGHTED_TOTALS_H_
#define TENSORMORPH_CORE_DIFF_PARTS_WEIGHTED_TOTALS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tensormorph {

// One compared tensor as its report states it (TensorDiffReport's
// imatrix_use: 1 weighted, 2 missing, 3 mismatch).
struct WeightedEntry {
  std::string name;
  int use = 0;
  std::string note;
  double sq_err = 0, energy = 0;
};

struct WeightedTotals {
  int64_t weighted = 0;
  double sq_err = 0, energy = 0;
  // +inf when sq_err is 0; 0 when no tensor was weighted (no figure, as
  // in a report whose imatrix_use is not weighted), never +inf for nothing.
  double sqnr_db = 0;
  std::vector<std::string> missing;     // sorted
  std::vector<std::string> mismatched;  // "name: note", sorted by name
};

// The weighted tensors' sums added in name order (the order workers and
// parts finish in must not matter), and the others listed.
WeightedTotals SumWeighted(std::vector<WeightedEntry> entries);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_PARTS_WEIGHTED_TOTALS_H_
