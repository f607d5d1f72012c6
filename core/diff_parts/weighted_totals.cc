#include "core/diff_parts/weighted_totals.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace tensormorph {

WeightedTotals SumWeighted(std::vector<WeightedEntry> entries) {
  std::sort(entries.begin(), entries.end(),
            [](const WeightedEntry& a, const WeightedEntry& b) {
              return a.name < b.name;
            });
  WeightedTotals t;
  for (const WeightedEntry& e : entries) {
    if (e.use == 1) {
      ++t.weighted;
      t.sq_err += e.sq_err;
      t.energy += e.energy;
    } else if (e.use == 2) {
      t.missing.push_back(e.name);
    } else if (e.use == 3) {
      t.mismatched.push_back(absl::StrCat(e.name, ": ", e.note));
    }
  }
  if (t.weighted == 0) return t;  // a matrix of another model: no figure
  t.sqnr_db = t.sq_err == 0 ? std::numeric_limits<double>::infinity()
                            : 10 * std::log10(t.energy / t.sq_err);
  return t;
}

}  // namespace tensormorph
