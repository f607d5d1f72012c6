// Statistics of a logical tensor: moments, specials, sparsity, a histogram,
// and for quantized tensors the usage of the code levels.
#ifndef TENSORMORPH_CORE_STATS_H_
#define TENSORMORPH_CORE_STATS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/diff/row_map.h"
#include "core/tensor.h"

namespace tensormorph {

struct StatsOptions {
  int bins = 64;
  // Histogram range; unset = [min, max] of the finite values.
  std::optional<double> range_min, range_max;
  int64_t chunk_elements = int64_t{1} << 18;
  // With a reference: the reference row of each row of the tensor (a GGUF's
  // RoPE-permuted Q/K against its Hugging Face source; see
  // ReferenceResolver). Empty = the same rows.
  RowMap ref_rows;
  // Only the elements of this group (ScalarInfo::group ids): moments,
  // zeros, histogram and level usage of that group alone, and its levels.
  std::optional<int64_t> group;
  // Polled between chunks (chunk_elements apart): when it returns true the
  // computation stops with CANCELLED, so that a caller that went away (a
  // page left its distribution view) frees its worker. Empty = never.
  std::function<bool()> cancelled;
};

struct TensorStats {
  int64_t count = 0;
  double min = 0, max = 0, mean = 0, std = 0, absmax = 0;  // finite values
  int64_t nan_count = 0, inf_count = 0;
  int64_t zeros = 0;
  double sparsity = 0;  // zeros / count
  // With a reference: x == 0 (pruned) and x != 0 but x̂ == 0 (induced).
  bool has_reference = false;
  int64_t pruned_zeros = 0, induced_zeros = 0;
  double hist_min = 0, hist_max = 0;
  std::vector<int64_t> histogram;  // finite values; out-of-range values clamp
  // With a reference: the source values of the elements counted (through
  // ref_rows), binned by the same bins as `histogram` (the same Binner), so
  // the two read side by side; source values beyond the range count in the
  // end bins as decoded ones do. Empty without a reference.
  std::vector<int64_t> reference_histogram;
  // Level usage (quantized tensors with codes of at most 8 bits).
  bool has_levels = false;
  int32_t code_bits = 0;
  std::vector<int64_t> code_histogram;  // by raw code bits, 2^bits entries
  // The format reads its codes as two's complement (Q8_0, int8): entry k of
  // code_histogram is the code k - 2^bits for k >= 2^(bits - 1), as
  // ScalarInfo::code says. Known only when such a code occurs (else the two
  // readings agree on every code that occurs): false then.
  bool codes_signed = false;
  int64_t levels_used = 0;
  // Elements on their group's lowest (highest) representable level. Not
  // clipping: a group's own min and max land there by design. Clipping is
  // a source value beyond the range, which only a diff (a source) can count
  // (TensorDiff::clipped).
  int64_t at_lowest_level = 0, at_highest_level = 0;
  // Groups seen, and those with an element on one of their end levels.
  int64_t groups = 0, groups_at_end_level = 0;
  // The representable levels (GroupLevels) when every element counted shares
  // one group: options.group, or a tensor of a single group (per-tensor
  // scale). Ascending and distinct; empty otherwise.
  std::vector<double> levels;
};

// The checks ComputeStats makes before it reads a value: `ref` against `t`
// (CheckReference) and options.group (negative, on a tensor without groups,
// past the last group). OK when ComputeStats would go on to read.
// Errors: as ComputeStats' INVALID_ARGUMENT, and a fault reading `t`'s first
// or last element (GuardedRead).
absl::Status CheckStatsRequest(const LogicalTensor& t, const LogicalTensor* ref,
                               const StatsOptions& o);

// Two passes over the values: the first measures everything but the
// histogram, whose range it may find; the second fills the histogram. Cost:
// one decode (plain float32 stored as such is read in place, under the
// fault guard, rather than copied), plus the encoding's bulk codes
// (Encoding::RawCodes) and runs (DecodeRuns) for level usage. The second
// pass (a decode) bins each value by the floats where the bins change
// (BinEdges, core/stats_bins.h: Binner's bins without a division each).
// Plain F16 and BF16 (Encoding::PlainFloatSteps) are counted by their 16-bit
// code instead, at every size, 65,536 buckets of one value each (read where
// they are stored, or keyed back from their values): without a reference
// that count is all pass 1 does, the specials, zeros, bounds and moments
// read off it; each code is binned once and the second pass is skipped (it
// still runs for a reference's histogram). Conventions' codes of 4 bits or
// fewer in runs of 32 or more (groups along a row or flat: GPTQ, AWQ,
// compressed-tensors, bitsandbytes NF4/FP4, gpt-oss MXFP4, MLX int2-int4 and
// mxfp4, HQQ axis 1; Encoding::CodeLevelRuns) and ggml Q4_0, Q4_1, Q4_K,
// IQ4_NL, IQ4_XS, MXFP4, TQ2_0, Q2_K and Q3_K stored as such
// (core/stats_code_blocks.h), with no options.group: the first pass is the
// moments alone, and the second reads codes, not values: each run's (group's,
// sub-block's) codes counted by value, and each of its 16 levels (Decode's
// value of the code) binned, compared with the run's end levels and counted
// once with its count. Every result is the per-value pass's, bit for bit
// (tests/core/stats_reference_test.cc).
//
// The order of the sums (a contract: every result is the same bits on every
// machine, chunk size and SIMD level). The mean and std come from the sum
// and the sum of squares of the finite values in double, each kept as 16
// partial sums: the element of row-major index i (in the whole tensor, also
// with options.group) is added to partial sum i % 16, each partial sum's
// additions in index order starting from +0.0, every addition rounded on
// its own (no fused multiply-add). The 16 are then combined in a fixed
// tree: p[k] + p[k + 8] for k < 8, those eight as q[k] + q[k + 4], then
// r[k] + r[k + 2], then the two. mean = sum / finite, std =
// sqrt(max(0, sum_sq / finite - mean^2)). Why: one sum in element order is a
// single chain of dependent additions, which bounded the whole pass (about
// 0.8 G elements/s); sixteen independent chains fill AVX2 vectors (about
// 4 G elements/s), are no less accurate (each partial sum is shorter), and
// stay deterministic because the lane depends on the index alone. min and max
// are exact; a min or max of zero has the sign of the first zero in index
// order (+0 and -0 compare equal). Plain F16 and BF16 instead sum their
// codes' counts (the order is the codes', not the elements'): over the
// finite codes in ascending order (as unsigned 16-bit integers), sum +=
// double(count) * value and sum_sq += double(count) * (value * value),
// each product and addition rounded on its own, from +0.0. Why: the counts
// are what their histogram needs anyway, so the pass reads each element
// once, for one increment, and no element is ever converted or summed; the
// sum has 65,536 terms at most, whatever the tensor's size (and rounds less
// than the lanes do). A finite value more than the histogram's range away,
// however far, lands in the end bin on its side (the bin index is clamped
// in double before it becomes an integer).
//
// `ref`, when given, is compared element by element through
// options.ref_rows. An empty tensor (a zero dimension) has count 0 and
// every statistic 0, never NaN. With options.group, count is the group's
// element count and every statistic is of those elements (groups = 1).
// Errors: INVALID_ARGUMENT (a reference of another shape, naming both; a row
// map that fails CheckRowMap; options.group on a tensor without groups, or
// negative, or past the last group, naming the id and the groups there are);
// UNIMPLEMENTED (an undecodable encoding); CANCELLED.
absl::StatusOr<TensorStats> ComputeStats(const LogicalTensor& tensor,
                                         const LogicalTensor* ref,
                                         const StatsOptions& options);

// Which pass ComputeStats takes for `tensor` under `options`: element by
// element, from codes per run (Encoding::CodeLevelRuns), or from codes per
// ggml sub-block read where stored. For tests, that a format goes by codes
// where it should (nothing depends on it: every path gives the same bits).
enum class StatsPath { kValues, kCodeRuns, kStoredBlocks };
StatsPath StatsPathForTesting(const LogicalTensor& tensor,
                              const StatsOptions& options);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_STATS_H_
