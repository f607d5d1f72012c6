#include "core/diff/weighted_error.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensormorph {

ImatrixMatch MatchImatrix(const ImportanceMatrix* imatrix,
                          const std::string& name,
                          const std::vector<int64_t>& shape) {
  ImatrixMatch m;
  if (imatrix == nullptr) return m;
  const ImatrixEntry* e = imatrix->Find(name);
  if (e == nullptr) {
    m.use = ImatrixUse::kMissing;
    m.note = "no entry of this name in the importance matrix";
    return m;
  }
  m.use = ImatrixUse::kMismatch;
  if (shape.size() != 2 && shape.size() != 3) {
    m.note = absl::StrCat("a tensor of shape [", absl::StrJoin(shape, ", "),
                          "] is not a matrix or a stack of experts");
    return m;
  }
  const int64_t k = shape.back();
  const int64_t experts = shape.size() == 3 ? shape[0] : 1;
  const auto values = static_cast<int64_t>(e->weights.size());
  if (k < 1 || experts < 1 || values % experts != 0 || values / experts != k) {
    m.note =
        absl::StrCat("the entry holds ", values, " values (", e->experts, " x ",
                     e->columns, "), the tensor needs ", experts, " x ", k);
    return m;
  }
  m.use = ImatrixUse::kWeighted;
  m.weights.weights = e->weights.data();
  m.weights.columns = k;
  m.weights.expert_elements = shape.size() == 3 ? shape[1] * k : shape[0] * k;
  return m;
}

void AccumulateWeighted(const float* x, const float* values, int64_t first,
                        int64_t m, const TensorWeights& w, WeightedSums* sums) {
  double se = sums->sum_w_sq_err, xx = sums->sum_w_xx;
  int64_t expert = w.expert_elements > 0 ? first / w.expert_elements : 0;
  int64_t in_expert = w.expert_elements > 0 ? first % w.expert_elements : 0;
  int64_t col = first % w.columns;
  const float* row_w = w.weights + expert * w.columns;
  for (int64_t i = 0; i < m; ++i) {
    const double wi = row_w[col];
    const double xs = x[i];
    const double err = xs - static_cast<double>(values[i]);
    se += wi * (err * err);
    xx += wi * (xs * xs);
    if (++col == w.columns) col = 0;
    if (++in_expert == w.expert_elements) {
      in_expert = 0;
      row_w += w.columns;
    }
  }
  sums->sum_w_sq_err = se;
  sums->sum_w_xx = xx;
}

double WeightedSqnrDb(const WeightedSums& s) {
  if (s.sum_w_sq_err == 0) return std::numeric_limits<double>::infinity();
  return 10 * std::log10(s.sum_w_xx / s.sum_w_sq_err);
}

double UnweightedErrorFactor(const ImportanceMatrix& imatrix) {
  double sum = 0;
  int64_t columns = 0;
  for (const ImatrixEntry& e : imatrix.entries()) {
    for (float w : e.weights) sum += w;
    columns += static_cast<int64_t>(e.weights.size());
  }
  if (columns == 0 || !(sum > 0)) return 1;
  return sum / static_cast<double>(columns);
}

}  // namespace tensormorph
