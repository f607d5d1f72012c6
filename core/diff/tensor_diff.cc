#include "core/diff/tensor_diff.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <queue>

#include "absl/base/casts.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/diff/error_pass.h"
#include "core/diff/float_runs.h"
#include "core/format/stored_tensor.h"
#include "core/io/fault_guard.h"
#include "core/quant/rounding_bound.h"
#include "core/util/status_macros.h"

namespace tensormorph {

struct DiffWorkspace::Buffers {
  std::vector<GroupAcc> groups;
  std::vector<double> top, es;
  std::vector<float> values, x;
  std::vector<QuantRun> runs;
};

DiffWorkspace::DiffWorkspace() : buffers_(std::make_unique<Buffers>()) {}
DiffWorkspace::~DiffWorkspace() = default;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Percentiles of err_steps: exact from the largest values when they fit,
// otherwise from a histogram of the values' leading bits.
class PercentileTracker {
 public:
  // `top` is storage for the kept values (its contents are replaced).
  PercentileTracker(int64_t n, int64_t exact_limit, std::vector<double>* top)
      : n_(n), top_(*top) {
    keep_ = std::max<int64_t>(1, n - static_cast<int64_t>(std::floor(
                                         0.99 * static_cast<double>(n - 1))));
    exact_ = keep_ <= exact_limit;
    if (!exact_) hist_.assign(kBins + 2, 0);
  }
  bool exact() const { return exact_; }

  // Exact mode: a floor shared with the trackers of the tensor's other
  // parts. Each raises it to its own and drops what is at or below it: a
  // part whose floor it is kept at least keep_ values at or above it, so
  // the values dropped elsewhere can be no percentile of the whole either.
  // Without it each part keeps its own keep_ largest (twice the work of a
  // tensor diffed whole, for two parts).
  void ShareFloor(std::atomic<double>* shared) { shared_ = shared; }

  // The state a part hands to the merge: the kept values (exact) or the
  // histogram, moved out (the tracker is spent).
  void ExportTo(DiffPart* part) {
    part->percentiles_exact = exact_;
    if (exact_) {
      top_.resize(static_cast<size_t>(count_));
      part->kept.swap(top_);
    } else {
      part->hist.swap(hist_);
    }
  }
  // Adds a part's state (one exported by a tracker of the same n): the
  // kept values as values (those at or below the floor are not needed);
  // histograms bin by bin.
  void Absorb(const DiffPart& part) {
    if (!exact_) {
      for (size_t b = 0; b < part.hist.size(); ++b) hist_[b] += part.hist[b];
      return;
    }
    Add(part.kept.data(), static_cast<int64_t>(part.kept.size()));
  }

  // Adds `m` values. Exact mode keeps those above the floor: values at or
  // below it cannot change the percentiles (zeros and NaN, which counts as
  // zero, are never kept: ranks past the kept values read as 0). The floor
  // rises to the smallest of the `keep_` largest whenever twice that many
  // are kept; keeping more than needed never changes a rank read.
  // Returns the largest of the values (NaN passed over, 0 at least).
  double Add(const double* v, int64_t m) {
    double max = 0;
    if (!exact_) {
      for (int64_t i = 0; i < m; ++i) {
        ++hist_[Bin(v[i])];
        max = std::max(max, v[i]);
      }
      return max;
    }
    if (shared_ != nullptr) {
      floor_ = std::max(floor_, shared_->load(std::memory_order_relaxed));
    }
    const size_t room = static_cast<size_t>(count_ + m + 8);
    if (top_.size() < room) top_.resize(std::max(room, 2 * top_.size()));
    count_ += KeepAbove(v, m, floor_, top_.data() + count_, &max);
    ranked_end_ = 0;
    if (count_ >= 2 * keep_ + 1024) Trim();
    return max;
  }

  // numpy.percentile(values, q) with linear interpolation.
  double Percentile(double q) {
    if (n_ == 0) return 0;
    if (exact_) Trim();
    const double pos = q * static_cast<double>(n_ - 1);
    const int64_t lo = static_cast<int64_t>(std::floor(pos));
    const double frac = pos - static_cast<double>(lo);
    const double a = Rank(lo), b = lo + 1 < n_ ? Rank(lo + 1) : a;
    if (std::isinf(a) || std::isinf(b)) return frac > 0 ? b : a;
    return a + (b - a) * frac;
  }

 private:
  // Bins are the top 10 mantissa bits of each binade from 2^-20 to 2^20
  // (relative width 2^-10); bin 0 holds smaller values, the last bin larger
  // ones and infinity. A bin reads as its midpoint.
  static constexpr int kShift = 42;  // 52 mantissa bits - 10
  static constexpr uint64_t kLowKey = uint64_t{1023 - 20} << 10;
  static constexpr uint64_t kHighKey = uint64_t{1023 + 20} << 10;
  static constexpr int kBins = static_cast<int>(kHighKey - kLowKey);
  static int Bin(double v) {
    if (!(v > 0)) return 0;
    const uint64_t key = absl::bit_cast<uint64_t>(v) >> kShift;
    if (key < kLowKey) return 0;
    if (key >= kHighKey) return kBins + 1;
    return 1 + static_cast<int>(key - kLowKey);
  }
  static double BinValue(int b) {
    if (b == 0) return 0;
    if (b == kBins + 1) return kInf;
    const uint64_t key = kLowKey + static_cast<uint64_t>(b - 1);
    return absl::bit_cast<double>((key << kShift) |
                                  (uint64_t{1} << (kShift - 1)));
  }
  // Keeps at least the `keep_` largest values and raises the floor below
  // them: first by a histogram of the kept values' bit patterns (positive
  // doubles order as their bits do, infinity included), which leaves a few
  // more than `keep_` in two linear passes; nth_element only when a crowded
  // bin leaves too many.
  void Trim() {
    if (count_ <= keep_) return;
    HistogramTrim();
    if (count_ > keep_ + keep_ / 2 + 1024) {
      std::nth_element(top_.begin(), top_.begin() + (keep_ - 1),
                       top_.begin() + count_, std::greater<double>());
      count_ = keep_;
      ranked_end_ = count_;
      floor_ = top_[keep_ - 1];
    }
    if (shared_ == nullptr) return;
    double seen = shared_->load(std::memory_order_relaxed);
    while (seen < floor_ && !shared_->compare_exchange_weak(
                                seen, floor_, std::memory_order_relaxed)) {
    }
  }
  void HistogramTrim() {
    constexpr int kBits = 12;
    uint64_t lo = ~uint64_t{0}, hi = 0;
    for (int64_t i = 0; i < count_; ++i) {
      const uint64_t b = absl::bit_cast<uint64_t>(top_[i]);
      lo = std::min(lo, b);
      hi = std::max(hi, b);
    }
    int shift = 0;
    while (((hi - lo) >> shift) >= (uint64_t{1} << kBits)) ++shift;
    trim_hist_.assign(size_t{1} << kBits, 0);
    for (int64_t i = 0; i < count_; ++i) {
      ++trim_hist_[(absl::bit_cast<uint64_t>(top_[i]) - lo) >> shift];
    }
    // The lowest bin b with at least keep_ values in bins b and above.
    int64_t b = static_cast<int64_t>(trim_hist_.size()), above = 0;
    while (b > 0 && above < keep_) above += trim_hist_[--b];
    if (b == 0) return;
    // Values in bins below b are at most `cut`; those above are greater.
    const double cut = absl::bit_cast<double>(lo + (uint64_t(b) << shift) - 1);
    floor_ = std::max(floor_, cut);
    double unused;
    count_ = KeepAbove(top_.data(), count_, floor_, top_.data(), &unused);
    ranked_end_ = 0;
  }
  // The value of rank r (0 = smallest) among all n. Ranks are read from
  // the largest down: after selecting position p, the values before it are
  // the p largest, so the next (smaller) position selects among those only.
  // The position just before the last selected one (a percentile's second
  // rank, for the interpolation) is the smallest of the values before it:
  // one scan, where a selection over them cost several (5% of a diff).
  double Rank(int64_t r) {
    if (exact_) {
      const int64_t from_top = n_ - 1 - r;
      if (from_top >= count_) return 0.0;
      if (from_top + 2 == ranked_end_) {
        const auto smallest =
            std::min_element(top_.begin(), top_.begin() + from_top + 1);
        std::iter_swap(smallest, top_.begin() + from_top);
        ranked_end_ = from_top + 1;
        return top_[from_top];
      }
      const int64_t end = from_top < ranked_end_ ? ranked_end_ : count_;
      std::nth_element(top_.begin(), top_.begin() + from_top,
                       top_.begin() + end, std::greater<double>());
      ranked_end_ = from_top + 1;
      return top_[from_top];
    }
    int64_t seen = 0;
    for (size_t b = 0; b < hist_.size(); ++b) {
      seen += hist_[b];
      if (seen > r) return BinValue(static_cast<int>(b));
    }
    return kInf;
  }

  int64_t n_;
  int64_t keep_;
  bool exact_;
  double floor_ = 0;  // exact mode: values at or below are not needed
  std::atomic<double>* shared_ = nullptr;  // ShareFloor's
  std::vector<double>& top_;
  int64_t count_ = 0;  // exact mode: top_[0, count_) are kept
  // top_[0, ranked_end_) hold the ranked_end_ largest kept values, and
  // top_[ranked_end_ - 1] is the smallest of them (each sets it by a
  // selection at that position).
  int64_t ranked_end_ = 0;
  std::vector<int64_t> hist_;
  std::vector<int64_t> trim_hist_;
};

struct Candidate {
  double err_steps;
  int64_t flat;
  // Worse first: larger error, then the earlier element.
  bool operator<(const Candidate& o) const {
    return err_steps != o.err_steps ? err_steps > o.err_steps : flat < o.flat;
  }
};

std::vector<int64_t> Unravel(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

// The excess the diff judges by (TensorDiff::max_excess_steps): over
// clipped elements, and over not-nearest ones where codes are meant to be.
double JudgedExcess(const ErrorSums& s, bool nearest_codes) {
  return std::max(s.max_excess_clipped,
                  nearest_codes ? s.max_excess_not_nearest : 0.0);
}

// The bound of a float grid's run (`values` its decoded values): at its own
// levels, whose steps it has, not at its range's end (rounding_bound.h).
double FloatGridBoundSteps(const QuantRun& run, const float* values) {
  double bound = 0;
  for (int64_t k = 0; k < run.count; ++k) {
    bound = std::max(bound, LevelBoundSteps(run, values[k]));
  }
  return bound;
}

// The offset of the first element of a chunk (its runs, decoded values,
// sources and errors in steps) whose judged excess is `excess`, as the error
// pass computed it; 0 if none is (it never happens: ExcessOf is that pass's
// arithmetic).
int64_t FindExcess(const float* values, const std::vector<QuantRun>& runs,
                   const float* x, const double* err_steps, double excess,
                   bool nearest_codes) {
  int64_t i = 0;
  for (const QuantRun& run : runs) {
    const RunLimits l = LimitsOf(run);
    for (int64_t end = i + run.count; i < end; ++i) {
      if (l.zeroed) continue;
      const ElementExcess e = ExcessOf(x[i], values[i], err_steps[i], run, l);
      if (e.excess == excess && (e.clipped || nearest_codes)) return i;
    }
  }
  return 0;
}

// Element `flat` of `quant` beside its source (through the row map), with
// its error in steps `err_steps` as the pass computed it.
absl::StatusOr<WorstElement> ElementAt(const LogicalTensor& quant,
                                       const LogicalTensor& ref,
                                       const std::vector<int64_t>& row_map,
                                       int64_t flat, double err_steps) {
  const int64_t cols = quant.shape.empty() ? 1 : quant.shape.back();
  WorstElement w;
  w.flat_index = flat;
  w.index = Unravel(flat, quant.shape);
  w.err_steps = err_steps;
  TM_RETURN_IF_ERROR(quant.encoding->Inspect(flat, &w.quant));
  float xs;
  const int64_t src =
      row_map.empty() ? flat : row_map[flat / cols] * cols + flat % cols;
  TM_RETURN_IF_ERROR(ref.encoding->Decode(src, 1, &xs));
  w.source = xs;
  w.decoded = w.quant.value;
  w.abs_err = std::fabs(w.source - static_cast<double>(w.decoded));
  return w;
}

// The limits of a part's chunks: with a row map, chunks hold whole rows (the
// reference is read a row at a time, in runs as long as the chunk allows)
// and the tensor is one segment.
struct Chunking {
  int64_t chunk, segment;
};
Chunking ChunkingOf(const LogicalTensor& quant, const DiffOptions& options,
                    const RowMap& row_map) {
  const int64_t cols = quant.shape.empty() ? 1 : quant.shape.back();
  int64_t chunk = std::max<int64_t>(1, options.chunk_elements);
  if (!row_map.empty() && cols > 0) {
    chunk = std::max<int64_t>(1, chunk / cols) * cols;
  }
  const int64_t segment = row_map.empty()
                              ? std::max<int64_t>(1, options.segment_elements)
                              : std::max<int64_t>(1, quant.num_elements);
  return {chunk, segment};
}

// One part's walk over its chunks: each chunk's values decoded (with its
// runs, or looked up by value for a plain float), its errors accumulated
// into the segment's sums, and the errors that can still matter kept.
class PartRunner {
 public:
  PartRunner(const LogicalTensor& quant, const LogicalTensor& ref,
             const DiffOptions& options, const RowMap& row_map,
             DiffWorkspace::Buffers& buf, DiffPart* part)
      : quant_(quant),
        ref_(ref),
        options_(options),
        row_map_(row_map),
        buf_(buf),
        part_(*part),
        bound_(quant.encoding->Bound()),
        nearest_codes_(bound_.codes == RoundingBound::Codes::kNearest),
        pct_(quant.num_elements, options.exact_percentile_limit, &buf.top),
        imatrix_(MatchImatrix(options.imatrix.get(), quant.name, quant.shape)) {
    const EncodingInfo& source_info = ref.encoding->info();
    source_rel_ = bound_.float_codes ? SourceRoundingRel(source_info) : 0;
    source_f16_ = source_info.scheme == "F16";
    if (row_map.empty()) {
      float_runs_ =
          FloatRuns::For(*quant.encoding, bound_, source_rel_, source_f16_);
    }
    // With top_k = 0 nothing enters.
    worst_floor_ = options.top_k > 0 ? -kInf : kInf;
  }

  absl::Status Run(const std::atomic<bool>* cancelled,
                   const std::function<void(int64_t)>& on_progress);
  void ShareFloor(std::atomic<double>* shared) {
    if (shared != nullptr) pct_.ShareFloor(shared);
  }

 private:
  absl::Status Chunk(int64_t first, int64_t m);
  absl::Status ReadChunk(int64_t first, int64_t m, const float* in_place);
  absl::Status BoundRuns(const float* xs);
  GroupAcc* GroupTable();
  absl::Status Errors(int64_t first, int64_t m, const float* xs,
                      const float* in_place);
  void OfferWorst(int64_t first, int64_t m, double chunk_max);
  void SizeGroups();

  const LogicalTensor& quant_;
  const LogicalTensor& ref_;
  const DiffOptions& options_;
  const RowMap& row_map_;
  DiffWorkspace::Buffers& buf_;
  DiffPart& part_;
  const RoundingBound bound_;
  const bool nearest_codes_;
  double source_rel_ = 0;
  bool source_f16_ = false;
  std::unique_ptr<FloatRuns> float_runs_;  // a plain float's runs, by key
  PercentileTracker pct_;
  ErrorSums sums_;  // the current segment's
  const ImatrixMatch imatrix_;
  WeightedSums weighted_;  // the current segment's, when imatrix_ weighs
  absl::flat_hash_set<int64_t> zeroed_;   // groups, once each across runs
  std::priority_queue<Candidate> worst_;  // top() is the least bad kept
  // Only an error above the least bad kept can enter: elements come in
  // index order, so an equal error never outranks a kept one; until k are
  // kept, any that is not NaN.
  double worst_floor_;
};

absl::Status PartRunner::Run(const std::atomic<bool>* cancelled,
                             const std::function<void(int64_t)>& on_progress) {
  const int64_t n = quant_.num_elements;
  const Chunking c = ChunkingOf(quant_, options_, row_map_);
  SizeGroups();
  const size_t chunk_size =
      static_cast<size_t>(std::min(c.chunk, std::max<int64_t>(n, 1)));
  buf_.values.resize(chunk_size);
  buf_.x.resize(chunk_size);
  buf_.es.resize(chunk_size);
  for (int64_t seg = part_.begin; seg < part_.end; seg += c.segment) {
    const int64_t seg_end = std::min(part_.end, seg + c.segment);
    sums_ = ErrorSums();
    weighted_ = WeightedSums();
    for (int64_t first = seg; first < seg_end; first += c.chunk) {
      if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) {
        return absl::CancelledError("diff cancelled");
      }
      const int64_t m = std::min(c.chunk, seg_end - first);
      TM_RETURN_IF_ERROR(Chunk(first, m));
      if (on_progress) on_progress(first + m - part_.begin);
    }
    part_.segments.push_back(sums_);
    if (imatrix_.use == ImatrixUse::kWeighted) {
      part_.weighted.push_back(weighted_);
    }
  }
  part_.zeroed_groups.assign(zeroed_.begin(), zeroed_.end());
  std::sort(part_.zeroed_groups.begin(), part_.zeroed_groups.end());
  pct_.ExportTo(&part_);
  while (!worst_.empty()) {
    part_.worst.emplace_back(worst_.top().err_steps, worst_.top().flat);
    worst_.pop();
  }
  return absl::OkStatus();
}

// Group ids grow with the index, so the last element's is (nearly) the
// largest: the table is sized once instead of doubling through the tensor,
// and when that is past the limit, none is tracked from the start rather
// than given up half-way. Group ids are dense (block, sub-block or
// row-by-group indices), so a vector indexed by id beats a hash map.
void PartRunner::SizeGroups() {
  const int64_t n = quant_.num_elements;
  buf_.groups.clear();
  if (ScalarInfo last; n > 0 && GuardedRead([&] {
                                  return quant_.encoding->Inspect(n - 1, &last);
                                }).ok()) {
    const int64_t g = GroupIdOf(last);
    if (g >= options_.max_tracked_groups) {
      part_.groups_tracked = false;
    } else if (g >= 0) {
      buf_.groups.resize(static_cast<size_t>(g + 1));
    }
  }
}

absl::Status PartRunner::Chunk(int64_t first, int64_t m) {
  const int64_t n = quant_.num_elements;
  // A float32 source without a row map is read where it is mapped (the
  // passes below run under GuardedRead then), not copied first.
  const float* in_place =
      row_map_.empty() && ref_.num_elements == n && ref_.shape == quant_.shape
          ? ref_.encoding->StoredF32()
          : nullptr;
  const float* xs = in_place != nullptr ? in_place + first : buf_.x.data();
  TM_RETURN_IF_ERROR(ReadChunk(first, m, in_place));
  if (float_runs_ == nullptr) TM_RETURN_IF_ERROR(BoundRuns(xs));
  TM_RETURN_IF_ERROR(Errors(first, m, xs, in_place));
  if (imatrix_.use == ImatrixUse::kWeighted) {
    auto weigh = [&] {
      AccumulateWeighted(xs, buf_.values.data(), first, m, imatrix_.weights,
                         &weighted_);
      return absl::OkStatus();
    };
    TM_RETURN_IF_ERROR(in_place != nullptr ? GuardedRead(weigh) : weigh());
  }
  // Pass 2: the errors that can still matter for percentiles and top-k.
  const double chunk_max = pct_.Add(buf_.es.data(), m);
  OfferWorst(first, m, chunk_max);
  return absl::OkStatus();
}

absl::Status PartRunner::ReadChunk(int64_t first, int64_t m,
                                   const float* in_place) {
  return GuardedRead([&]() -> absl::Status {
    // A plain float's values alone: its runs come from the key table.
    if (float_runs_ != nullptr) {
      TM_RETURN_IF_ERROR(quant_.encoding->Decode(first, m, buf_.values.data()));
    } else {
      TM_RETURN_IF_ERROR(quant_.encoding->DecodeRuns(
          first, m, buf_.values.data(), &buf_.runs));
    }
    if (in_place != nullptr) return absl::OkStatus();
    return DecodeMappedRows(ref_, row_map_, first, m, buf_.x.data());
  });
}

// Each run's bound from the encoding's statement, and the groups whose
// stored scale is zero while their source is not.
absl::Status PartRunner::BoundRuns(const float* xs) {
  std::vector<QuantRun>& runs = buf_.runs;
  const float* values = buf_.values.data();
  for (size_t r = 0, at = 0; r < runs.size(); at += runs[r++].count) {
    QuantRun& run = runs[r];
    ApplyBound(bound_, &run);
    WidenForSourceRounding(source_rel_, source_f16_, &run);
    part_.bound_steps =
        std::max(part_.bound_steps, bound_.float_codes
                                        ? FloatGridBoundSteps(run, values + at)
                                        : InteriorBoundSteps(run));
    if (run.step_below != 0 || run.step_above != 0) continue;
    const float* src = xs + at;
    bool nonzero = false;
    TM_RETURN_IF_ERROR(GuardedRead([&] {
      for (int64_t k = 0; k < run.count; ++k) nonzero |= src[k] != 0;
      return absl::OkStatus();
    }));
    if (nonzero) {
      if (run.group < 0) {
        ++part_.zeroed_ungrouped;
      } else {
        zeroed_.insert(run.group);
      }
    }
  }
  return absl::OkStatus();
}

// The group table must hold every group of the chunk before the pass (a
// group's elements may come in several runs: FP8 blocks span rows,
// codebooks give runs of one). nullptr when groups are not tracked.
GroupAcc* PartRunner::GroupTable() {
  if (!part_.groups_tracked) return nullptr;
  std::vector<GroupAcc>& groups = buf_.groups;
  int64_t top = -1;
  for (const QuantRun& r : buf_.runs) top = std::max(top, r.group);
  if (top >= options_.max_tracked_groups) {
    part_.groups_tracked = false;
    groups.clear();
    groups.shrink_to_fit();
    return nullptr;
  }
  if (top >= static_cast<int64_t>(groups.size())) {
    groups.resize(std::max<size_t>(top + 1, groups.size() * 2));
  }
  return groups.data();
}

// Pass 1: the sums, counts and maxima, each element's error in steps, and
// the per-group errors; then the element beyond its bound by the most,
// looked for again only in a chunk that raised the maximum (rare after the
// first).
absl::Status PartRunner::Errors(int64_t first, int64_t m, const float* xs,
                                const float* in_place) {
  const float* values = buf_.values.data();
  double* es = buf_.es.data();
  GroupAcc* group_table = float_runs_ == nullptr ? GroupTable() : nullptr;
  auto pass = [&] {
    if (float_runs_ != nullptr) {
      AccumulateFloatErrors(values, xs, m, first, *float_runs_, es, &sums_,
                            &part_.bound_steps);
    } else {
      AccumulateErrors(values, buf_.runs.data(), buf_.runs.size(), xs, first,
                       es, &sums_, group_table);
    }
    const double now = JudgedExcess(sums_, nearest_codes_);
    if (now > part_.max_excess) {
      const int64_t k =
          float_runs_ != nullptr
              ? FindFloatExcess(values, xs, es, m, *float_runs_, now,
                                nearest_codes_)
              : FindExcess(values, buf_.runs, xs, es, now, nearest_codes_);
      part_.max_excess = now;
      part_.max_excess_flat = first + k;
      part_.max_excess_err_steps = es[k];
    }
    return absl::OkStatus();
  };
  if (in_place == nullptr) return pass();
  return GuardedRead(pass);
}

// Most errors are below the least bad of the top k: a chunk whose largest
// is not above it is skipped, and otherwise a vector comparison over 16
// skips most.
void PartRunner::OfferWorst(int64_t first, int64_t m, double chunk_max) {
  const double* es = buf_.es.data();
  const size_t k = static_cast<size_t>(std::max(0, options_.top_k));
  auto offer = [&](int64_t i) {
    const double v = es[i];
    if (!(v > worst_floor_)) return;
    if (worst_.size() == k) worst_.pop();
    worst_.push({v, first + i});
    if (worst_.size() == k) worst_floor_ = worst_.top().err_steps;
  };
  if (!(chunk_max > worst_floor_)) return;
  int64_t i = 0;
  for (; i + 16 <= m; i += 16) {
    bool any = false;
    for (int j = 0; j < 16; ++j) any |= es[i + j] > worst_floor_;
    if (!any) continue;
    for (int j = 0; j < 16; ++j) offer(i + j);
  }
  for (; i < m; ++i) offer(i);
}

// A segment's sums added to the tensor's: the sums in order, the maxima
// keeping the earlier element of equal ones.
void FoldSums(const ErrorSums& s, ErrorSums* t) {
  t->sum_sq_err += s.sum_sq_err;
  t->sum_abs_err += s.sum_abs_err;
  t->sum_xx += s.sum_xx;
  t->sum_hh += s.sum_hh;
  t->sum_xh += s.sum_xh;
  if (s.max_abs_err > t->max_abs_err) {
    t->max_abs_err = s.max_abs_err;
    t->max_abs_err_index = s.max_abs_err_index;
  }
  if (s.max_err_steps > t->max_err_steps) t->max_err_steps = s.max_err_steps;
  t->above_half_step += s.above_half_step;
  t->clipped += s.clipped;
  t->clipped_beyond_bound += s.clipped_beyond_bound;
  t->not_nearest += s.not_nearest;
  t->max_excess_not_nearest =
      std::max(t->max_excess_not_nearest, s.max_excess_not_nearest);
  t->max_excess_clipped = std::max(t->max_excess_clipped, s.max_excess_clipped);
  t->zeroed_elements += s.zeroed_elements;
  t->source_zeros += s.source_zeros;
  t->decoded_zeros += s.decoded_zeros;
  t->induced_zeros += s.induced_zeros;
}

// The report's metrics from the tensor's sums.
void FillFromSums(const ErrorSums& sums, const LogicalTensor& quant,
                  TensorDiff* d) {
  const int64_t n = quant.num_elements;
  const double nn = static_cast<double>(std::max<int64_t>(n, 1));
  const double sse = sums.sum_sq_err, sxx = sums.sum_xx, shh = sums.sum_hh;
  d->mse = sse / nn;
  d->rmse = std::sqrt(d->mse);
  d->mean_abs_err = sums.sum_abs_err / nn;
  d->max_abs_err = sums.max_abs_err;
  // An empty tensor has no element to point at (and Unravel would divide by
  // its zero dimension).
  if (n > 0) {
    d->max_abs_err_index = Unravel(sums.max_abs_err_index, quant.shape);
  }
  d->max_err_steps = sums.max_err_steps;
  d->above_half_step = sums.above_half_step;
  d->clipped = sums.clipped;
  d->clipped_beyond_bound = sums.clipped_beyond_bound;
  d->not_nearest = sums.not_nearest;
  d->zeroed_elements = sums.zeroed_elements;
  d->max_excess_not_nearest = sums.max_excess_not_nearest;
  d->max_excess_steps = JudgedExcess(sums, d->nearest_codes);
  d->source_zeros = sums.source_zeros;
  d->decoded_zeros = sums.decoded_zeros;
  d->induced_zeros = sums.induced_zeros;
  d->sqnr_db = sse == 0 ? kInf : 10 * std::log10(sxx / sse);
  d->cosine = sxx == 0 || shh == 0 ? (sxx == shh ? 1 : 0)
                                   : sums.sum_xh / std::sqrt(sxx * shh);
  d->rel_fro_err = sxx == 0 ? (sse == 0 ? 0 : kInf) : std::sqrt(sse / sxx);
}

// The k worst of possibly millions of groups, kept in order as they come
// (k is a handful: no need to gather them all first).
std::vector<WorstGroup> WorstGroupsOf(const std::vector<GroupAcc>& groups,
                                      int worst_groups) {
  const size_t k = static_cast<size_t>(std::max(0, worst_groups));
  auto worse = [](const WorstGroup& a, const WorstGroup& b) {
    return a.mean_err_steps != b.mean_err_steps
               ? a.mean_err_steps > b.mean_err_steps
               : a.group < b.group;
  };
  std::vector<WorstGroup> top;
  for (size_t g = 0; g < groups.size() && k > 0; ++g) {
    const GroupAcc& a = groups[g];
    if (a.count == 0) continue;
    const WorstGroup w{static_cast<int64_t>(g), a.count, a.sum / a.count,
                       a.max};
    if (top.size() == k && !worse(w, top.back())) continue;
    top.insert(std::upper_bound(top.begin(), top.end(), w, worse), w);
    if (top.size() > k) top.pop_back();
  }
  return top;
}

// The parts' groups, added part by part (a group a part boundary splits
// adds its partial sums: DiffSplits keeps such tensors whole).
std::vector<GroupAcc> MergedGroups(const std::vector<DiffPart>& parts) {
  std::vector<GroupAcc> all;
  for (size_t p = 0; p < parts.size(); ++p) {
    const std::vector<GroupAcc>& g = parts[p].groups;
    if (g.size() > all.size()) all.resize(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      if (g[i].count == 0) continue;
      all[i].sum += g[i].sum;
      all[i].max = std::max(all[i].max, g[i].max);
      all[i].count += g[i].count;
    }
  }
  return all;
}

absl::Status CheckParts(const LogicalTensor& quant,
                        const std::vector<DiffPart>& parts) {
  int64_t at = 0;
  bool in_order = !parts.empty();
  for (const DiffPart& p : parts) {
    in_order &= p.begin == at && p.end >= p.begin;
    at = p.end;
  }
  if (!in_order || at != quant.num_elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "diff parts of '", quant.name, "' do not cover its elements in order"));
  }
  return absl::OkStatus();
}

// Every part's statement of its zeroed groups, bound and worst element
// beyond its bound, merged.
void MergeFindings(const std::vector<DiffPart>& parts, TensorDiff* d,
                   const DiffPart** excess) {
  absl::flat_hash_set<int64_t> zeroed;
  for (const DiffPart& p : parts) {
    d->bound_steps = std::max(d->bound_steps, p.bound_steps);
    d->zeroed_groups += p.zeroed_ungrouped;
    zeroed.insert(p.zeroed_groups.begin(), p.zeroed_groups.end());
    if (!p.zeroed_groups.empty() &&
        (d->first_zeroed_group < 0 ||
         p.zeroed_groups.front() < d->first_zeroed_group)) {
      d->first_zeroed_group = p.zeroed_groups.front();
    }
    if (p.max_excess_flat >= 0 &&
        (*excess == nullptr || p.max_excess > (*excess)->max_excess)) {
      *excess = &p;
    }
  }
  d->zeroed_groups += static_cast<int64_t>(zeroed.size());
}

absl::StatusOr<TensorDiff> MergeParts(const LogicalTensor& quant,
                                      const LogicalTensor& ref,
                                      const DiffOptions& options,
                                      const RowMap& row_map,
                                      const std::vector<DiffPart>& parts);

}  // namespace

bool DiffSplits(const LogicalTensor& quant, const LogicalTensor& ref,
                const RowMap& row_map) {
  if (!row_map.empty()) return false;
  const RoundingBound bound = quant.encoding->Bound();
  const EncodingInfo& source = ref.encoding->info();
  return FloatRuns::For(*quant.encoding, bound,
                        bound.float_codes ? SourceRoundingRel(source) : 0,
                        source.scheme == "F16") != nullptr;
}

absl::StatusOr<DiffPart> DiffTensorPart(
    const LogicalTensor& quant, const LogicalTensor& ref,
    const DiffOptions& options, int64_t begin, int64_t end,
    const RowMap& row_map, const std::atomic<bool>* cancelled,
    const std::function<void(int64_t)>& on_progress, DiffWorkspace* workspace,
    std::atomic<double>* shared_floor) {
  std::optional<DiffWorkspace> local;
  DiffWorkspace::Buffers& buf =
      (workspace != nullptr ? *workspace : local.emplace()).buffers();
  TM_RETURN_IF_ERROR(CheckRowMap(row_map, quant));
  DiffPart part;
  part.begin = begin;
  part.end = end;
  PartRunner runner(quant, ref, options, row_map, buf, &part);
  runner.ShareFloor(shared_floor);
  TM_RETURN_IF_ERROR(runner.Run(cancelled, on_progress));
  // The group table goes with the part (DiffTensor hands its storage back
  // to the workspace after the merge).
  if (part.groups_tracked) part.groups.swap(buf.groups);
  return part;
}

absl::StatusOr<TensorDiff> MergeDiffParts(const LogicalTensor& quant,
                                          const LogicalTensor& ref,
                                          const DiffOptions& options,
                                          const RowMap& row_map,
                                          std::vector<DiffPart> parts) {
  return MergeParts(quant, ref, options, row_map, parts);
}

namespace {

absl::StatusOr<TensorDiff> MergeParts(const LogicalTensor& quant,
                                      const LogicalTensor& ref,
                                      const DiffOptions& options,
                                      const RowMap& row_map,
                                      const std::vector<DiffPart>& parts) {
  TM_RETURN_IF_ERROR(CheckParts(quant, parts));
  TensorDiff d;
  d.name = quant.name;
  d.ref_name = ref.name;
  d.shape = quant.shape;
  d.scheme = quant.encoding->info().scheme;
  d.granularity = quant.encoding->info().granularity;
  d.count = quant.num_elements;
  for (const StoredTensor* p : ref.encoding->parts()) {
    d.source_bytes += static_cast<int64_t>(p->nbytes);
  }
  const RoundingBound bound = quant.encoding->Bound();
  d.bound_family = bound.family;
  d.nearest_codes = bound.codes == RoundingBound::Codes::kNearest;
  d.zeroes_groups = bound.zeroes_groups;

  ErrorSums sums;
  const ImatrixMatch match =
      MatchImatrix(options.imatrix.get(), quant.name, quant.shape);
  d.imatrix_use = match.use;
  d.imatrix_note = match.note;
  std::vector<double> storage;
  PercentileTracker pct(quant.num_elements, options.exact_percentile_limit,
                        &storage);
  std::vector<Candidate> top;
  for (const DiffPart& p : parts) {
    for (const ErrorSums& s : p.segments) FoldSums(s, &sums);
    for (const WeightedSums& w : p.weighted) {
      d.weighted.sum_w_sq_err += w.sum_w_sq_err;
      d.weighted.sum_w_xx += w.sum_w_xx;
    }
    pct.Absorb(p);
    for (const auto& [v, flat] : p.worst) top.push_back({v, flat});
  }
  FillFromSums(sums, quant, &d);
  if (d.imatrix_use == ImatrixUse::kWeighted) {
    d.weighted_sqnr_db = WeightedSqnrDb(d.weighted);
  }
  d.percentiles_exact = pct.exact();
  d.p99_err_steps = pct.Percentile(0.99);
  d.p999_err_steps = pct.Percentile(0.999);
  const DiffPart* excess = nullptr;
  MergeFindings(parts, &d, &excess);

  std::sort(top.begin(), top.end());
  top.resize(
      std::min(top.size(), static_cast<size_t>(std::max(0, options.top_k))));
  for (const Candidate& c : top) {
    TM_ASSIGN_OR_RETURN(WorstElement w,
                        ElementAt(quant, ref, row_map, c.flat, c.err_steps));
    d.worst.push_back(std::move(w));
  }
  if (excess != nullptr) {
    TM_ASSIGN_OR_RETURN(d.max_excess_element,
                        ElementAt(quant, ref, row_map, excess->max_excess_flat,
                                  excess->max_excess_err_steps));
  }
  d.groups_tracked = true;
  for (const DiffPart& p : parts) d.groups_tracked &= p.groups_tracked;
  if (d.groups_tracked) {
    d.worst_groups =
        parts.size() == 1
            ? WorstGroupsOf(parts[0].groups, options.worst_groups)
            : WorstGroupsOf(MergedGroups(parts), options.worst_groups);
  }
  return d;
}

}  // namespace

absl::StatusOr<TensorDiff> DiffTensor(
    const LogicalTensor& quant, const LogicalTensor& ref,
    const DiffOptions& options, const RowMap& row_map,
    const std::atomic<bool>* cancelled,
    const std::function<void(int64_t)>& on_progress, DiffWorkspace* workspace) {
  std::optional<DiffWorkspace> local;
  DiffWorkspace* ws = workspace != nullptr ? workspace : &local.emplace();
  auto part = DiffTensorPart(quant, ref, options, 0, quant.num_elements,
                             row_map, cancelled, on_progress, ws);
  if (!part.ok()) return part.status();
  std::vector<DiffPart> parts;
  parts.push_back(*std::move(part));
  auto d = MergeParts(quant, ref, options, row_map, parts);
  // The table and candidates' storage stay mapped for the next tensor.
  DiffWorkspace::Buffers& buf = ws->buffers();
  buf.groups.swap(parts[0].groups);
  buf.top.swap(parts[0].kept);
  return d;
}

}  // namespace tensormorph
