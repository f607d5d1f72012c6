// Every element's error in steps of one 2-D view of a tensor against its
// reference, computed once so that the zooms and pans of an error heatmap
// reduce their cells from it (HeatmapOptions::errors) rather than decode
// both tensors again: what a server keeps per (tensor, reference).
#ifndef TENSORMORPH_CORE_ERROR_GRID_H_
#define TENSORMORPH_CORE_ERROR_GRID_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/diff/row_map.h"
#include "core/tensor.h"
#include "core/view_2d.h"

namespace tensormorph {

// Every element's error in steps as Heatmap::values defines it for error
// mode. Plain floats' errors (F16, BF16 against a float32 source) are small
// multiples of a fine ulp, so float32 holds nearly all of them exactly:
// half the bytes of doubles to write on a first look and to read on each
// zoom. Other encodings' steps are their scales, so their errors need
// doubles.
// Thread safety: immutable after ComputeErrorGrid; shared read-only.
struct ErrorGrid {
  View2D view;  // of the tensor, at the leading indices it was computed for
  // view.rows * view.cols, row-major; exactly one of the two is set.
  //  - f32: the error as float32 where that is it exactly, else NaN with
  //    the error (NaN too) in `others` by index in the view;
  //  - f64: every error.
  std::unique_ptr<float[]> f32;
  absl::flat_hash_map<int64_t, double> others;
  std::unique_ptr<double[]> f64;

  int64_t size() const { return view.rows * view.cols; }
  // Element i's error (i < size()).
  double At(int64_t i) const {
    if (f64 != nullptr) return f64[i];
    const float f = f32[i];
    if (f == f) return double{f};
    auto it = others.find(i);
    return it != others.end() ? it->second
                              : std::numeric_limits<double>::quiet_NaN();
  }
  int64_t bytes() const {
    return size() * (f64 != nullptr ? 8 : 4) +
           static_cast<int64_t>(others.size()) * 32;  // a map slot, roughly
  }
};

struct ErrorGridOptions {
  std::vector<int64_t> leading;  // as HeatmapOptions::leading
  RowMap ref_rows;               // as HeatmapOptions::ref_rows
  // Polled between batches of rows: true stops with CANCELLED.
  std::function<bool()> cancelled;
};

// The bytes a grid of `t`'s view takes (4 per element of one view for
// plain floats, and a few more for errors that are not a float32; else 8):
// what a cache checks against its budget before computing one.
int64_t ErrorGridBytes(const LogicalTensor& t);

// One decode of the view and of the reference's matching elements (plain
// floats' steps from Encoding::PlainFloatSteps, else DecodeDetailed).
// Errors: INVALID_ARGUMENT (those of ViewOf; an empty tensor; a reference of
// another shape or a row map that fails CheckRowMap); CANCELLED;
// UNIMPLEMENTED; FAILED_PRECONDITION (the file changed under its mapping).
absl::StatusOr<ErrorGrid> ComputeErrorGrid(const LogicalTensor& tensor,
                                           const LogicalTensor& ref,
                                           const ErrorGridOptions& options);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_ERROR_GRID_H_
