// CompareQuantizations' summary from its rows: per quantization the totals
// over the tensors all of them hold, the dominated quantizations overall and
// per layer, and with a budget the mix (core/compare: the knapsack, the
// llama.cpp overrides and file size). With the request's imatrix, dominance
// and the mix are on the weighted error (where the imatrix does not weigh a
// tensor, its unweighted error times the matrix's mean importance,
// UnweightedErrorFactor), reported beside the unweighted.
#ifndef TENSORMORPH_SERVER_COMPARE_SUMMARY_H_
#define TENSORMORPH_SERVER_COMPARE_SUMMARY_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/format/checkpoint.h"
#include "core/imatrix/importance_matrix.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// `rows` in the order sent (each with one cell per quantization, in the
// request's order); `quantizations` the checkpoints opened for the request's
// quantizations, in its order; `imatrix` the request's importance matrix
// (null: none), which weighed the cells.
// REQUIRES: the request was validated (two or more quantizations, base in
// range, at most one budget, positive).
// A budget no mix fits is no error: the mix says so (budget_unmet, with
// the least bytes there is) and the rest of the summary stands.
// Errors: RESOURCE_EXHAUSTED LIMIT_EXCEEDED when the knapsack's frontier
// grows past its limit.
absl::StatusOr<v1::CompareSummary> SummarizeComparison(
    const v1::CompareQuantizationsRequest& request,
    const std::vector<v1::CompareRow>& rows,
    const std::vector<std::shared_ptr<const Checkpoint>>& quantizations,
    const ImportanceMatrix* imatrix);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_COMPARE_SUMMARY_H_
