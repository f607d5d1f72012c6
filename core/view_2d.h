// The 2-D view of a tensor that heatmaps draw: its last two dimensions, at
// fixed indices of the leading ones (rank 1: one row).
#ifndef TENSORMORPH_CORE_VIEW_2D_H_
#define TENSORMORPH_CORE_VIEW_2D_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace tensormorph {

struct View2D {
  int64_t rows = 0, cols = 0;
  int64_t base = 0;  // flat index (row-major) of the view's element (0, 0)
};

// The view of `t` at `leading` (an index per leading dimension; missing ones
// are 0; a negative one counts from the end, as InspectScalars' coordinates
// do). An empty tensor's view has base 0 and its rows and cols as shaped.
// Errors: INVALID_ARGUMENT (rank 0; more indices than leading dimensions,
// REQUEST_INVALID naming the field leading, empty tensors too);
// OUT_OF_RANGE INDEX_OUT_OF_RANGE {dimension, size} for a leading index
// outside -size..size-1, naming it and the range.
absl::StatusOr<View2D> ViewOf(const LogicalTensor& t,
                              const std::vector<int64_t>& leading);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_VIEW_2D_H_
