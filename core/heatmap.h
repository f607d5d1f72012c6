// A 2-D view of a tensor reduced to W x H cells, with the quantization group
// of each cell for shading and group boundaries.
#ifndef TENSORMORPH_CORE_HEATMAP_H_
#define TENSORMORPH_CORE_HEATMAP_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/diff/row_map.h"
#include "core/diff/weighted_error.h"
#include "core/error_grid.h"
#include "core/tensor.h"

namespace tensormorph {

// kZeros: the fraction of a cell's elements that decode to exactly 0 (either
// sign); with a reference, the fraction quantization made zero (source not
// 0, decoded 0), and Heatmap::pruned the fraction of pruned zeros (source 0
// and decoded 0: ComputeStats' pruned_zeros, cell by cell).
// kSqError: the sum of the cell's squared errors against a reference, each
// weighted by its column's importance with HeatmapOptions::weights (see
// Heatmap::values): a cell's share of the diff's sum_sq_err, or of
// llama-quantize's objective (TensorDiff's weighted_sq_err).
enum class HeatmapMode {
  kMean,
  kAbsmax,
  kErrorSteps,
  kGroup,
  kZeros,
  kSqError
};

struct HeatmapOptions {
  int width = 256, height = 256;  // at most; fewer when the view is smaller
  // For rank > 2: indices of the leading dimensions (missing ones are 0);
  // a negative index counts from the end (-1 is the last), as
  // InspectScalars' coordinates do.
  std::vector<int64_t> leading;
  HeatmapMode mode = HeatmapMode::kMean;
  // With a reference: the reference row of each row of the tensor (a GGUF's
  // RoPE-permuted Q/K against its Hugging Face source; see
  // ReferenceResolver). Empty = the same rows.
  RowMap ref_rows;
  // The region drawn: view rows [row_begin, row_end) and columns
  // [col_begin, col_end); an end of 0 means the view's last row (column).
  // Cells divide the region, and only the region is decoded.
  int64_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
  // Error and absmax modes only: also find, for each cell, the element that
  // gives it its value (Heatmap::cell_element). Costs a pass element by
  // element rather than the modes' vector reductions, so a page asks for it
  // for the cell it clicks (a region of that cell at width = height = 1).
  bool locate = false;
  // Polled between batches of rows (at most a MiB of elements apart): when
  // it returns true the computation stops with CANCELLED, so that a caller
  // that went away frees its worker. Empty = never cancelled.
  std::function<bool()> cancelled;
  // Error mode only: every element's error in this view, computed before
  // (ComputeErrorGrid of the same tensor, reference, leading indices and
  // ref_rows). The cells reduce from it and nothing is decoded: the same
  // bits as without it, cell_element included. A server keeps grids so
  // that zooms and pans of one error heatmap do not decode it again.
  const ErrorGrid* errors = nullptr;
  // Squared-error mode only: each element's term weighted by its column's
  // importance (MatchImatrix's weights of this tensor: `columns` its last
  // dimension, one set per expert of a 3-D [E, rows, K] tensor, the view at
  // leading index e taking expert e's). Null: unweighted (every weight 1).
  // Not owned; outlives the call.
  const TensorWeights* weights = nullptr;
};

struct Heatmap {
  int64_t rows = 0, cols = 0;  // of the 2-D view (rank 1: one row)
  int width = 0, height = 0;
  // Cell (i, j) covers view rows [row_edges[i], row_edges[i+1]) and columns
  // [col_edges[j], col_edges[j+1]): absolute view coordinates, so
  // row_edges.front() is the region's first row.
  std::vector<int64_t> row_edges, col_edges;
  // height * width, row-major. Non-finite elements propagate as IEEE
  // arithmetic does, never dropped:
  //  - mean: the sum of the cell's elements in double, over their count
  //    (the count in double too). The order of that sum is a contract, the
  //    same bits on every machine, SIMD level and batch of rows: the
  //    element at column offset k inside its cell (view column minus the
  //    cell's first column) is added to partial sum k % 16 of the cell,
  //    each partial sum's additions in row-major order (the cell's rows
  //    top to bottom, each left to right) starting from +0.0, every
  //    addition rounded on its own (no product fused into it). The 16 are then
  //    combined in the fixed tree of core/stats.h: p[k] + p[k + 8] for
  //    k < 8, those eight as q[k] + q[k + 4], then r[k] + r[k + 2], then
  //    the two. Why: one sum in element order per cell is a chain of
  //    dependent additions that kept the mean at about twice a decode;
  //    sixteen lanes by column fill vectors across a row with no chain
  //    inside it, and a cell's lanes stay in registers down its rows.
  //    A cell holding a NaN, or both +inf and -inf, is NaN; else one
  //    holding +inf (-inf) is +inf (-inf). Finite float32 elements never
  //    overflow the double sum.
  //  - absmax: a cell holding a NaN is NaN; else one holding +inf or -inf is
  //    +inf; else the largest |element|.
  //  - error: an element's error in steps is NaN when its source or decoded
  //    value is NaN, 0 when they are equal (same-signed infinities too),
  //    else |source - decoded| / the step on the source's side, +inf when
  //    that step is not above 0 or the difference is infinite. The cell is
  //    NaN when any element's is, else the largest.
  //  - sq-error: sum over the cell's elements of w * (x - x̂)^2, x the
  //    reference's element and x̂ the decoded one, each converted to double,
  //    the difference, its square and the product with w (the element's
  //    column's importance as double, or exactly 1 unweighted) each rounded
  //    on its own in double. The terms are summed in the mean's order, a
  //    contract too: the term at column offset k inside its cell into
  //    partial sum k % 16, each partial sum's additions in row-major order
  //    from +0.0, every addition rounded on its own, then the same fixed
  //    tree. Why: one sum in element order per cell, a dependent addition
  //    per element, kept this mode at a third of a decode of the tensor and
  //    of its reference; the lanes fill vectors across a row. Each term is
  //    AccumulateWeighted's (core/diff/weighted_error.h), so at full
  //    resolution (a cell per element: its term, exactly) the cells of a
  //    whole view sum to the diff's weighted_sq_err, up to the order of the
  //    additions. NaN when an element's source or decoded value is NaN, or
  //    both are infinite of one sign (inf - inf); +inf when a difference is
  //    infinite or a square overflows.
  //  - zeros: a fraction (NaN and inf are not zero); group: the group id;
  //    both always finite.
  // Every NaN cell is the canonical quiet NaN
  // (std::numeric_limits<double>::quiet_NaN(), positive), whatever the
  // elements' NaN payloads and signs.
  std::vector<double> values;
  std::vector<int64_t> groups;  // group of each cell's first element, -1 none
  // The smallest and largest FINITE value of `values` (NaN and +/-inf cells
  // left out, so the colour scale stays usable); 0 and 0 when no cell is
  // finite.
  double min = 0, max = 0;
  std::vector<double> pruned;  // kZeros with a reference; else empty
  // With HeatmapOptions::locate, height * width row-major: the flat index in
  // the tensor (row-major, leading dimensions included) of the element
  // giving each cell its value: the first in row-major order among those
  // at the cell's maximum (error in steps, or |value|); for a NaN cell its
  // first NaN element; for an absmax cell of +inf its first infinity. Else
  // empty.
  std::vector<int64_t> cell_element;
};

// Per cell: bit 0 set when the group changes to the right neighbour, bit 1
// when it changes to the neighbour below. Renderers draw these as lines.
std::vector<uint8_t> GroupBoundaries(const Heatmap& h);

// An empty tensor (a zero dimension, any leading index) gives a heatmap of
// no cells: width = height = 0, no values, min = max = 0.
// Cost: one decode of the region's elements (error mode: with their steps,
// from Encoding::PlainFloatSteps for F16 and BF16, else DecodeDetailed; or
// none, from HeatmapOptions::errors; F16's absmax, and F16's and BF16's
// mean where cells are 16, 32 or 64 columns wide, read Encoding::StoredF16's
// (StoredBF16's) codes rather than decode them, on CPUs with AVX2 and
// AVX-512 respectively; so
// do Q4_K's mean (where such cells start on a chunk of 64 columns) and
// absmax (where the region starts on one) with AVX-512: its blocks' codes
// and sub-block parameters, each element's level looked up, no float32
// buffer; core/heatmap_q4k.h; and Q8_0's, where cells of those widths are
// in whole chunks of 64 columns and the region starts on a block: each code
// times its block's d; core/heatmap_q8.h),
// plus one Encoding::GroupIds id per cell for its group; group mode decodes
// nothing. Squared-error mode decodes the region once (Encoding::Decode)
// and reads a float32 reference where it is stored (Encoding::StoredF32,
// without ref_rows; else it decodes the reference rows), adding a row at a
// time into its lanes in AVX2 or AVX-512 vectors
// (core/heatmap_sq_error.h): 0.6-0.9x a decode pass of the tensor plus
// one of its reference, Q4_K, Q8_0, F16 and BF16 of 4096 x 4096 at 256 x
// 256 cells (tests/bench/stats_bench's BM_HeatmapSqError; 0.35-0.50x in
// element order). It takes no ErrorGrid (HeatmapOptions::errors serves
// error mode only), so each zoom decodes its region again.
// Errors: OUT_OF_RANGE INDEX_OUT_OF_RANGE (a leading index outside
// -size..size-1, naming it, its dimension and the range);
// RESOURCE_EXHAUSTED LIMIT_EXCEEDED {limit: heatmap_region_columns} for a
// region wider than 4M columns (a pass holds a row of it; the group mode
// and a given ErrorGrid hold none); INVALID_ARGUMENT (rank 0; more leading
// indices than the tensor has leading dimensions; error or squared-error mode
// without a reference; weights in another mode than squared error, or not
// sized for the tensor (columns its last dimension, experts its first of
// three); a reference of another shape, naming both; a row map
// that fails CheckRowMap; a region negative, empty or outside the view,
// naming it and the view's rows and columns, or any region on an empty
// tensor; locate in a mode other than error or absmax; errors in another
// mode, or of another view than this request's); CANCELLED when
// HeatmapOptions::cancelled said so, naming the band reached;
// UNIMPLEMENTED.
absl::StatusOr<Heatmap> ComputeHeatmap(const LogicalTensor& tensor,
                                       const LogicalTensor* ref,
                                       const HeatmapOptions& options);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_HEATMAP_H_
