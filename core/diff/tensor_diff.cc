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
#include "core/diff/error_pass.h"
#include "core/format/stored_tensor.h"
#include "core/io/fault_guard.h"
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
    if (count_ <= keep_ + keep_ / 2 + 1024) return;
    std::nth_element(top_.begin(), top_.begin() + (keep_ - 1),
                     top_.begin() + count_, std::greater<double>());
    count_ = keep_;
    ranked_end_ = count_;
    floor_ = top_[keep_ - 1];
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

}  // namespace

absl::StatusOr<TensorDiff> DiffTensor(
    const LogicalTensor& quant, const LogicalTensor& ref,
    const DiffOptions& options, const RowMap& row_map,
    const std::atomic<bool>* cancelled,
    const std::function<void(int64_t)>& on_progress, DiffWorkspace* workspace) {
  std::optional<DiffWorkspace> local;
  DiffWorkspace::Buffers& buf =
      (workspace != nullptr ? *workspace : local.emplace()).buffers();
  if (absl::Status s = CheckRowMap(row_map, quant); !s.ok()) return s;
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
  const int64_t n = quant.num_elements;
  const int64_t cols = quant.shape.empty() ? 1 : quant.shape.back();
  // With a row map, chunks hold whole rows: the reference is read a row at
  // a time, in runs as long as the chunk allows.
  int64_t chunk = std::max<int64_t>(1, options.chunk_elements);
  if (!row_map.empty() && cols > 0) {
    chunk = std::max<int64_t>(1, chunk / cols) * cols;
  }

  ErrorSums sums;
  const RoundingBound bound = quant.encoding->Bound();
  const EncodingInfo& source_info = ref.encoding->info();
  const double source_rel =
      bound.float_codes ? SourceRoundingRel(source_info) : 0;
  const bool source_f16 = source_info.scheme == "F16";
  d.bound_family = bound.family;
  d.nearest_codes = bound.codes == RoundingBound::Codes::kNearest;
  d.zeroes_groups = bound.zeroes_groups;
  absl::flat_hash_set<int64_t> zeroed;  // groups, once each across runs
  int64_t max_excess_flat = -1;         // and its error in steps
  double max_excess_v = 0;
  PercentileTracker pct(n, options.exact_percentile_limit, &buf.top);
  std::priority_queue<Candidate> worst;  // top() is the least bad kept
  // Only an error above the least bad kept can enter a full top-k: elements
  // come in index order, so an equal error never outranks a kept one.
  // With top_k = 0 nothing enters.
  double worst_floor = options.top_k > 0 ? -kInf : kInf;
  // Group ids are dense (block, sub-block or row-by-group indices), so a
  // vector indexed by id beats a hash map on the hot path.
  std::vector<GroupAcc>& groups = buf.groups;
  groups.clear();
  // Group ids grow with the index, so the last element's is (nearly) the
  // largest: size the table once instead of doubling it through the tensor,
  // and when it is past the limit, track none from the start rather than
  // give up half-way.
  if (ScalarInfo last; n > 0 && GuardedRead([&] {
                                  return quant.encoding->Inspect(n - 1, &last);
                                }).ok()) {
    const int64_t g = GroupIdOf(last);
    if (g >= options.max_tracked_groups) {
      d.groups_tracked = false;
    } else if (g >= 0) {
      groups.resize(static_cast<size_t>(g + 1));
    }
  }
  const size_t chunk_size = static_cast<size_t>(std::min(chunk, n));
  std::vector<float>& values = buf.values;
  std::vector<QuantRun>& runs = buf.runs;
  std::vector<float>& x = buf.x;
  std::vector<double>& es = buf.es;
  values.resize(chunk_size);
  x.resize(chunk_size);
  es.resize(chunk_size);

  const float* in_place =
      row_map.empty() && ref.num_elements == n && ref.shape == quant.shape
          ? ref.encoding->StoredF32()
          : nullptr;
  for (int64_t first = 0; first < n; first += chunk) {
    if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) {
      return absl::CancelledError("diff cancelled");
    }
    const int64_t m = std::min(chunk, n - first);
    // A float32 source without a row map is read where it is mapped (the
    // pass below runs under GuardedRead then), not copied first.
    const float* xs = in_place != nullptr ? in_place + first : x.data();
    absl::Status read = GuardedRead([&]() -> absl::Status {
      if (absl::Status s =
              quant.encoding->DecodeRuns(first, m, values.data(), &runs);
          !s.ok())
        return s;
      if (in_place != nullptr) return absl::OkStatus();
      return DecodeMappedRows(ref, row_map, first, m, x.data());
    });
    if (!read.ok()) return read;
    // Each run's bound from the encoding's statement, and the groups whose
    // stored scale is zero while their source is not.
    for (size_t r = 0, at = 0; r < runs.size(); at += runs[r++].count) {
      QuantRun& run = runs[r];
      ApplyBound(bound, &run);
      WidenForSourceRounding(source_rel, source_f16, &run);
      d.bound_steps = std::max(d.bound_steps, InteriorBoundSteps(run));
      if (run.step_below != 0 || run.step_above != 0) continue;
      const float* src = xs + at;
      bool nonzero = false;
      if (absl::Status s = GuardedRead([&] {
            for (int64_t k = 0; k < run.count; ++k) nonzero |= src[k] != 0;
            return absl::OkStatus();
          });
          !s.ok()) {
        return s;
      }
      if (nonzero) {
        if (run.group < 0) {
          ++d.zeroed_groups;
        } else {
          zeroed.insert(run.group);
        }
      }
    }

    // The group table must hold every group of the chunk before the pass
    // (a group's elements may come in several runs: FP8 blocks span rows,
    // codebooks give runs of one).
    GroupAcc* group_table = nullptr;
    if (d.groups_tracked) {
      int64_t top = -1;
      for (const QuantRun& r : runs) top = std::max(top, r.group);
      if (top >= options.max_tracked_groups) {
        d.groups_tracked = false;
        groups.clear();
        groups.shrink_to_fit();
      } else {
        if (top >= static_cast<int64_t>(groups.size())) {
          groups.resize(std::max<size_t>(top + 1, groups.size() * 2));
        }
        group_table = groups.data();
      }
    }
    // Pass 1: the sums, counts and maxima, each element's error in steps,
    // and the per-group errors.
    const double excess_before = JudgedExcess(sums, d.nearest_codes);
    if (in_place == nullptr) {
      AccumulateErrors(values.data(), runs.data(), runs.size(), xs, first,
                       es.data(), &sums, group_table);
    } else if (absl::Status s = GuardedRead([&] {
                 AccumulateErrors(values.data(), runs.data(), runs.size(), xs,
                                  first, es.data(), &sums, group_table);
                 return absl::OkStatus();
               });
               !s.ok()) {
      return s;
    }

    // The element beyond its bound by the most: looked for again only in a
    // chunk that raised the maximum (rare after the first).
    if (const double now = JudgedExcess(sums, d.nearest_codes);
        now > excess_before) {
      if (absl::Status s = GuardedRead([&] {
            const int64_t k = FindExcess(values.data(), runs, xs, es.data(),
                                         now, d.nearest_codes);
            max_excess_flat = first + k;
            max_excess_v = es[k];
            return absl::OkStatus();
          });
          !s.ok()) {
        return s;
      }
    }

    // Pass 2: the errors that can still matter for percentiles and top-k.
    const double chunk_max = pct.Add(es.data(), m);
    // Most errors are below the least bad of the top k: a chunk whose
    // largest is not above it is skipped, and otherwise a vector
    // comparison over 16 skips most.
    auto offer = [&](int64_t k) {
      const double v = es[k];
      if (v > worst_floor) {
        worst.pop();
        worst.push({v, first + k});
        worst_floor = worst.top().err_steps;
      }
    };
    int64_t i = 0;
    for (; i < m && static_cast<int>(worst.size()) < options.top_k; ++i) {
      worst.push({es[i], first + i});
      if (static_cast<int>(worst.size()) == options.top_k)
        worst_floor = worst.top().err_steps;
    }
    if (!(chunk_max > worst_floor)) i = m;
    for (; i + 16 <= m; i += 16) {
      bool any = false;
      for (int k = 0; k < 16; ++k) any |= es[i + k] > worst_floor;
      if (!any) continue;
      for (int k = 0; k < 16; ++k) offer(i + k);
    }
    for (; i < m; ++i) offer(i);

    if (on_progress) on_progress(first + m);
  }

  const double nn = static_cast<double>(std::max<int64_t>(n, 1));
  const double sse = sums.sum_sq_err, sxx = sums.sum_xx, shh = sums.sum_hh;
  d.mse = sse / nn;
  d.rmse = std::sqrt(d.mse);
  d.mean_abs_err = sums.sum_abs_err / nn;
  d.max_abs_err = sums.max_abs_err;
  // An empty tensor has no element to point at (and Unravel would divide by
  // its zero dimension).
  if (n > 0) d.max_abs_err_index = Unravel(sums.max_abs_err_index, quant.shape);
  d.max_err_steps = sums.max_err_steps;
  d.above_half_step = sums.above_half_step;
  d.clipped = sums.clipped;
  d.clipped_beyond_bound = sums.clipped_beyond_bound;
  d.not_nearest = sums.not_nearest;
  d.zeroed_groups += static_cast<int64_t>(zeroed.size());
  for (int64_t g : zeroed) {
    if (d.first_zeroed_group < 0 || g < d.first_zeroed_group) {
      d.first_zeroed_group = g;
    }
  }
  d.zeroed_elements = sums.zeroed_elements;
  d.max_excess_not_nearest = sums.max_excess_not_nearest;
  d.max_excess_steps = JudgedExcess(sums, d.nearest_codes);
  d.source_zeros = sums.source_zeros;
  d.decoded_zeros = sums.decoded_zeros;
  d.induced_zeros = sums.induced_zeros;
  d.sqnr_db = sse == 0 ? kInf : 10 * std::log10(sxx / sse);
  d.cosine = sxx == 0 || shh == 0 ? (sxx == shh ? 1 : 0)
                                  : sums.sum_xh / std::sqrt(sxx * shh);
  d.rel_fro_err = sxx == 0 ? (sse == 0 ? 0 : kInf) : std::sqrt(sse / sxx);
  d.percentiles_exact = pct.exact();
  d.p99_err_steps = pct.Percentile(0.99);
  d.p999_err_steps = pct.Percentile(0.999);

  std::vector<Candidate> top;
  while (!worst.empty()) {
    top.push_back(worst.top());
    worst.pop();
  }
  std::sort(top.begin(), top.end());
  for (const Candidate& c : top) {
    TM_ASSIGN_OR_RETURN(WorstElement w,
                        ElementAt(quant, ref, row_map, c.flat, c.err_steps));
    d.worst.push_back(std::move(w));
  }
  if (max_excess_flat >= 0) {
    TM_ASSIGN_OR_RETURN(
        d.max_excess_element,
        ElementAt(quant, ref, row_map, max_excess_flat, max_excess_v));
  }
  if (d.groups_tracked) {
    // The k worst of possibly millions of groups, kept in order as they come
    // (k is a handful: no need to gather them all first).
    const size_t k = static_cast<size_t>(std::max(0, options.worst_groups));
    auto worse = [](const WorstGroup& a, const WorstGroup& b) {
      return a.mean_err_steps != b.mean_err_steps
                 ? a.mean_err_steps > b.mean_err_steps
                 : a.group < b.group;
    };
    std::vector<WorstGroup>& top = d.worst_groups;
    for (size_t g = 0; g < groups.size() && k > 0; ++g) {
      const GroupAcc& a = groups[g];
      if (a.count == 0) continue;
      const WorstGroup w{static_cast<int64_t>(g), a.count, a.sum / a.count,
                         a.max};
      if (top.size() == k && !worse(w, top.back())) continue;
      top.insert(std::upper_bound(top.begin(), top.end(), w, worse), w);
      if (top.size() > k) top.pop_back();
    }
  }
  return d;
}

}  // namespace tensormorph
