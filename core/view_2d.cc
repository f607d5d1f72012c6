#include "core/view_2d.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/util/error_reason.h"

namespace tensormorph {

absl::StatusOr<View2D> ViewOf(const LogicalTensor& t,
                              const std::vector<int64_t>& leading) {
  const size_t rank = t.shape.size();
  if (rank == 0)
    return absl::InvalidArgumentError("a rank-0 tensor has no 2-D view");
  // An index for a dimension the tensor does not have was ignored, and the
  // view drawn as if it were not there: a request for a view that does not
  // exist is refused, whatever the tensor holds.
  const size_t lead = rank >= 2 ? rank - 2 : 0;
  if (leading.size() > lead) {
    return RequestFieldError(
        "leading",
        absl::StrCat(leading.size(), " leading indices for a rank-", rank,
                     " tensor, which has ", lead, " leading dimension",
                     lead == 1 ? "" : "s", " (all but its last two)"));
  }
  View2D v;
  v.cols = t.shape.back();
  v.rows = rank >= 2 ? t.shape[rank - 2] : 1;
  if (t.num_elements == 0) return v;
  for (size_t d = 0; d + 2 < rank; ++d) {
    const int64_t asked = d < leading.size() ? leading[d] : 0;
    // shape[d] > 0 here (the tensor is not empty): no overflow either way.
    const int64_t i = asked < 0 ? asked + t.shape[d] : asked;
    if (i < 0 || i >= t.shape[d]) {
      return WithReason(
          absl::OutOfRangeError(absl::StrCat(
              "leading index ", asked, " is out of range for dimension ", d,
              " of size ", t.shape[d], " (valid: ", -t.shape[d], "..",
              t.shape[d] - 1, ", negative counting from the end)")),
          ErrorReason::kIndexOutOfRange,
          {{"dimension", absl::StrCat(d)}, {"size", absl::StrCat(t.shape[d])}});
    }
    v.base = v.base * t.shape[d] + i;
  }
  v.base *= v.rows * v.cols;  // < num_elements: every index checked above
  return v;
}

}  // namespace tensormorph
