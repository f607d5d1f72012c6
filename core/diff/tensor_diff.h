// The quantization diff of one tensor: a quantized logical tensor against
// its full-precision source, with the error measured in units of the local
// quantization step. All sums are accumulated in double precision.
#ifndef TENSORMORPH_CORE_DIFF_TENSOR_DIFF_H_
#define TENSORMORPH_CORE_DIFF_TENSOR_DIFF_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/diff/error_pass.h"
#include "core/diff/row_map.h"
#include "core/diff/weighted_error.h"
#include "core/imatrix/importance_matrix.h"
#include "core/quant/scalar_info.h"
#include "core/tensor.h"

namespace tensormorph {

struct DiffOptions {
  int top_k = 10;        // worst elements reported
  int worst_groups = 5;  // worst groups reported
  // Exact p99/p99.9 keep the top 1% of errors; above this many elements the
  // percentiles come from a log histogram (relative resolution 2^-10).
  int64_t exact_percentile_limit = int64_t{1} << 22;
  // Per-group accumulators are kept up to this many groups.
  int64_t max_tracked_groups = int64_t{1} << 22;
  // Elements decoded at a time: small enough that a chunk's working set
  // (about 50 bytes an element) stays in the L2 cache.
  int64_t chunk_elements = int64_t{1} << 13;
  // Elements whose sums start from zero and are then added to the tensor's
  // in order (a segment): a tensor diffed in parts (DiffTensorPart) split
  // at multiples of it gives the very bits of one diffed whole. A multiple
  // of chunk_elements keeps the chunks of a segment whole. Without a row
  // map only (with one the tensor is one segment).
  int64_t segment_elements = int64_t{1} << 20;
  // When set, each tensor the matrix has an entry for, sized for it
  // (MatchImatrix), also gets its importance-weighted figures.
  std::shared_ptr<const ImportanceMatrix> imatrix;
};

struct WorstElement {
  std::vector<int64_t> index;
  int64_t flat_index = 0;
  double source = 0;
  float decoded = 0;
  double abs_err = 0;
  double err_steps = 0;
  ScalarInfo quant;  // raw code, scale, zero-point, group of the element
};

struct WorstGroup {
  int64_t group = 0;
  int64_t count = 0;
  double mean_err_steps = 0;
  double max_err_steps = 0;
};

struct TensorDiff {
  std::string name;
  std::string ref_name;
  std::vector<int64_t> shape;
  std::string scheme;
  std::string granularity;
  int64_t count = 0;
  double mse = 0, rmse = 0, mean_abs_err = 0;
  double max_abs_err = 0;
  std::vector<int64_t> max_abs_err_index;
  double sqnr_db = 0;  // +inf when the error is zero
  double cosine = 0;
  double rel_fro_err = 0;
  double max_err_steps = 0;
  double p99_err_steps = 0, p999_err_steps = 0;
  bool percentiles_exact = true;
  int64_t above_half_step = 0;  // elements with error > 0.5 step
  // The rounding bound (Encoding::Bound, core/quant/rounding_bound.h):
  // its family name, whether codes are meant to be nearest, and the
  // largest bound in steps over the tensor's groups (at their extreme
  // levels: 0.5 plus what a stored f16 scale adds).
  std::string bound_family;
  bool nearest_codes = true;
  bool zeroes_groups = false;  // RoundingBound::zeroes_groups
  double bound_steps = 0;
  // Clipping and excess (ErrorSums): clipped elements lie outside what
  // their group's range represents (by design, for formats that clip);
  // those further out than the format allows, and the not-nearest ones,
  // are beyond the bound; the rest are within it, or in zeroed groups.
  int64_t clipped = 0;               // outside the group's range
  int64_t clipped_beyond_bound = 0;  // of those, beyond what the format allows
  int64_t not_nearest = 0;           // inside it, yet beyond the bound
  // Groups whose steps are zero (a stored scale of 0) while their source
  // is not all zero, and the elements of zero-step groups: out of every
  // step metric (their error in steps reads 0), in the real-unit ones.
  int64_t zeroed_groups = 0;
  int64_t zeroed_elements = 0;
  int64_t first_zeroed_group = -1;  // the least zeroed group id; -1: none
  // How far beyond its bound the worst element lies, in steps: over
  // clipped elements, and over not-nearest ones where codes are meant to be
  // nearest (for chosen codes those are information). 0 when all within.
  double max_excess_steps = 0;
  double max_excess_not_nearest = 0;  // over not-nearest elements alone
  // The first element beyond the bound by max_excess_steps (the one a
  // finding points at; not in `worst` when designed clipping errs more).
  std::optional<WorstElement> max_excess_element;
  int64_t source_zeros = 0;   // pruned: x == 0
  int64_t decoded_zeros = 0;  // x̂ == 0
  int64_t induced_zeros = 0;  // x != 0 but x̂ == 0
  std::vector<WorstElement> worst;
  std::vector<WorstGroup> worst_groups;
  bool groups_tracked = true;
  int64_t source_bytes = 0;  // bytes of the reference read
  // With DiffOptions::imatrix: whether it weighed this tensor (and why not,
  // in imatrix_note), and the weighted sums and SQNR (kWeighted only).
  ImatrixUse imatrix_use = ImatrixUse::kNone;
  std::string imatrix_note;
  WeightedSums weighted;
  double weighted_sqnr_db = 0;
};

// Scratch that DiffTensor keeps between calls: its group table and buffers
// stay mapped, where fresh ones cost a page fault per 4 KiB (a tenth of a
// diff of millions of groups). One call at a time per workspace.
class DiffWorkspace {
 public:
  DiffWorkspace();
  ~DiffWorkspace();
  DiffWorkspace(const DiffWorkspace&) = delete;
  DiffWorkspace& operator=(const DiffWorkspace&) = delete;

  struct Buffers;  // defined by tensor_diff.cc
  Buffers& buffers() { return *buffers_; }

 private:
  std::unique_ptr<Buffers> buffers_;
};

// The diff of elements [begin, end) of a tensor, for MergeDiffParts: what
// the report needs of them, kept exactly (sums per segment, the values that
// can still be a percentile, the worst candidates). Its fields are the
// merge's business; callers move parts around and count their elements.
struct DiffPart {
  int64_t begin = 0, end = 0;
  std::vector<ErrorSums> segments;     // each from zero, in order
  std::vector<WeightedSums> weighted;  // likewise, with an imatrix match
  double bound_steps = 0;
  int64_t zeroed_ungrouped = 0;        // zero-step runs of no group
  std::vector<int64_t> zeroed_groups;  // ids, sorted, each once
  std::vector<double> kept;            // exact percentiles: the candidates
  std::vector<int64_t> hist;           // or the histogram
  bool percentiles_exact = true;
  std::vector<std::pair<double, int64_t>> worst;  // (err_steps, flat)
  int64_t max_excess_flat = -1;  // the first element beyond by max_excess
  double max_excess = 0, max_excess_err_steps = 0;
  bool groups_tracked = true;
  std::vector<GroupAcc> groups;
};

// Whether a diff of `quant` against `ref` splits into parts: a plain float
// quantized side (core/diff/float_runs.h: no groups, each element's run
// looked up by value) without a row map. Split parts then merge to the
// very bits of DiffTensor.
bool DiffSplits(const LogicalTensor& quant, const LogicalTensor& ref,
                const RowMap& row_map);

// Elements [begin, end) of the diff of `quant` against `ref`, as DiffTensor
// computes them. `on_progress(elements done of the part)` after each chunk.
// Parts of one tensor diffed at the same time may share `shared_floor`
// (starting at 0): the value below which no error can be a percentile of
// the whole, raised by each, so that each keeps fewer candidates; the merge
// is the same.
// REQUIRES: as DiffTensor; 0 <= begin <= end <= the element count; begin
// and end multiples of options.segment_elements or end the element count;
// a part other than the whole tensor only where DiffSplits.
// Errors: as DiffTensor.
absl::StatusOr<DiffPart> DiffTensorPart(
    const LogicalTensor& quant, const LogicalTensor& ref,
    const DiffOptions& options, int64_t begin, int64_t end,
    const RowMap& row_map = {}, const std::atomic<bool>* cancelled = nullptr,
    const std::function<void(int64_t)>& on_progress = {},
    DiffWorkspace* workspace = nullptr,
    std::atomic<double>* shared_floor = nullptr);

// The report of parts that cover the tensor in order (each from
// DiffTensorPart with the same options and row map): segments' sums added
// in order, percentiles and worst elements from every part's candidates,
// the worst elements then inspected.
// Errors: INVALID_ARGUMENT (parts that do not cover the tensor in order),
// or as Inspect.
absl::StatusOr<TensorDiff> MergeDiffParts(const LogicalTensor& quant,
                                          const LogicalTensor& ref,
                                          const DiffOptions& options,
                                          const RowMap& row_map,
                                          std::vector<DiffPart> parts);

// Diffs `quant` against `ref`.
// REQUIRES: equal element counts and shapes (checked by the caller's
// pairing); both checkpoints stay open during the call.
// `on_progress(elements_done)` is called after each chunk; `cancelled` is
// polled between chunks.
// `workspace` (may be null) lends its buffers for the call.
// An empty tensor (a zero dimension) gives count 0, zero errors and no
// worst elements (PairTensors skips empty tensors before this). Elements
// whose error in steps is NaN (a NaN source) are never among the worst.
// DiffTensorPart over the whole tensor, merged.
// Errors: UNIMPLEMENTED (an encoding that cannot decode); CANCELLED;
// INVALID_ARGUMENT (a row map that fails CheckRowMap).
absl::StatusOr<TensorDiff> DiffTensor(
    const LogicalTensor& quant, const LogicalTensor& ref,
    const DiffOptions& options, const RowMap& row_map = {},
    const std::atomic<bool>* cancelled = nullptr,
    const std::function<void(int64_t)>& on_progress = {},
    DiffWorkspace* workspace = nullptr);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_TENSOR_DIFF_H_
