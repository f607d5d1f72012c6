// The importance-weighted error of a quantized tensor: each element's
// squared error weighted by its input column's importance (llama.cpp's
// imatrix, core/imatrix/importance_matrix.h), the objective llama-quantize
// minimises. Reported beside the unweighted figures of the diff.
#ifndef TENSORMORPH_CORE_DIFF_WEIGHTED_ERROR_H_
#define TENSORMORPH_CORE_DIFF_WEIGHTED_ERROR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/imatrix/importance_matrix.h"

namespace tensormorph {

// Running totals, in double: sum_j w[col j] * (x_j - x̂_j)^2 and
// sum_j w[col j] * x_j^2. Like ErrorSums, a segment's start from zero and
// segments add in order, so a tensor diffed in parts gives the same bits.
struct WeightedSums {
  double sum_w_sq_err = 0;
  double sum_w_xx = 0;
};

// The weights of one tensor: `columns` per row (the last dimension), a set
// per expert, expert e for flat indices [e * expert_elements, (e + 1) *
// expert_elements) (a 3-D tensor [experts, rows, columns]; a 2-D one is
// one expert).
struct TensorWeights {
  const float* weights = nullptr;  // experts * columns, expert-major
  int64_t columns = 0;
  int64_t expert_elements = 0;
};

// How a tensor found its weights (TensorDiff::imatrix_use).
enum class ImatrixUse {
  kNone,      // no importance matrix given
  kWeighted,  // found, sized for it: the weighted figures are set
  kMissing,   // the matrix has no entry of the tensor's name
  kMismatch,  // an entry, but not columns * experts values, or not 2-D/3-D
};

struct ImatrixMatch {
  ImatrixUse use = ImatrixUse::kNone;
  TensorWeights weights;  // kWeighted only
  std::string note;       // why not, for kMissing and kMismatch
};

// llama-quantize's rule: the entry named `name` weighs a 2-D tensor [rows,
// K] or a 3-D one [E, rows, K] when it holds K * E values (expert e takes
// the e-th K). `imatrix` may be null (kNone). The match points into it.
ImatrixMatch MatchImatrix(const ImportanceMatrix* imatrix,
                          const std::string& name,
                          const std::vector<int64_t>& shape);

// Adds elements [first, first + m) — sources x[0, m), decoded values[0, m)
// — to `sums`, element by element in order, each product and sum in
// double. REQUIRES: w.weights covers every element's column and expert.
void AccumulateWeighted(const float* x, const float* values, int64_t first,
                        int64_t m, const TensorWeights& w, WeightedSums* sums);

// 10 log10(sum_w_xx / sum_w_sq_err); +inf when the weighted error is 0.
double WeightedSqnrDb(const WeightedSums& s);

// What a squared error the matrix does not weigh (a tensor it has no entry
// for, or one of another size) is multiplied by to stand beside weighted
// errors in one sum: the mean importance over every column the matrix holds
// (each entry's weights, experts included, summed in double in entry and
// column order). A weighted error is sum w (x - x̂)^2; an unweighted tensor
// counted as if each column had the mean weight is that mean times its
// squared error. Being the matrix's own mean, scaling every value of the
// matrix scales every term of a weighted sum alike, so no comparison or
// choice made on such sums depends on the matrix's overall scale (counting
// the plain error, weight 1, would). It depends on the matrix alone, not on
// which tensors or quantizations are compared, so it is one constant for
// all of them. 1 for a matrix with no columns or a mean of 0 (every weight
// 0: every weighted error is 0 too, and the plain errors then decide).
double UnweightedErrorFactor(const ImportanceMatrix& imatrix);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_WEIGHTED_ERROR_H_
