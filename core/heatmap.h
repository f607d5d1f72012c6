// A 2-D view of a tensor reduced to W x H cells, with the quantization group
// of each cell for shading and group boundaries.
#ifndef TENSORMORPH_CORE_HEATMAP_H_
#define TENSORMORPH_CORE_HEATMAP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/diff/row_map.h"
#include "core/tensor.h"

namespace tensormorph {

enum class HeatmapMode { kMean, kAbsmax, kErrorSteps, kGroup };

struct HeatmapOptions {
  int width = 256, height = 256;  // at most; fewer when the view is smaller
  // For rank > 2: indices of the leading dimensions (missing ones are 0).
  std::vector<int64_t> leading;
  HeatmapMode mode = HeatmapMode::kMean;
  // With a reference: the reference row of each row of the tensor (a GGUF's
  // RoPE-permuted Q/K against its Hugging Face source; see
  // ReferenceResolver). Empty = the same rows.
  RowMap ref_rows;
};

struct Heatmap {
  int64_t rows = 0, cols = 0;  // of the 2-D view (rank 1: one row)
  int width = 0, height = 0;
  // Cell (i, j) covers view rows [row_edges[i], row_edges[i+1]) and columns
  // [col_edges[j], col_edges[j+1]).
  std::vector<int64_t> row_edges, col_edges;
  std::vector<double> values;   // height * width, row-major
  std::vector<int64_t> groups;  // group of each cell's first element, -1 none
  double min = 0, max = 0;      // of values
};

// Per cell: bit 0 set when the group changes to the right neighbour, bit 1
// when it changes to the neighbour below. Renderers draw these as lines.
std::vector<uint8_t> GroupBoundaries(const Heatmap& h);

// An empty tensor (a zero dimension, any leading index) gives a heatmap of
// no cells: width = height = 0, no values, min = max = 0.
// Errors: INVALID_ARGUMENT (rank 0; a leading index out of range; error mode
// without a reference; a reference of another shape, naming both; a row map
// that fails CheckRowMap); UNIMPLEMENTED.
absl::StatusOr<Heatmap> ComputeHeatmap(const LogicalTensor& tensor,
                                       const LogicalTensor* ref,
                                       const HeatmapOptions& options);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_HEATMAP_H_
