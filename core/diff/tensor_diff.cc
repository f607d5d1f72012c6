#include "core/diff/tensor_diff.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>

#include "absl/status/status.h"
#include "core/format/stored_tensor.h"
#include "core/io/fault_guard.h"

namespace tensormorph {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Percentiles of err_steps: exact from the largest values when they fit,
// otherwise from a log-spaced histogram.
class PercentileTracker {
 public:
  PercentileTracker(int64_t n, int64_t exact_limit) : n_(n) {
    keep_ =
        n - static_cast<int64_t>(std::floor(0.99 * static_cast<double>(n - 1)));
    exact_ = keep_ <= exact_limit;
    if (!exact_) hist_.assign(kBins + 2, 0);
  }
  void Add(double v) {
    if (exact_) {
      if (static_cast<int64_t>(top_.size()) < keep_) {
        top_.push(v);
      } else if (v > top_.top()) {
        top_.pop();
        top_.push(v);
      }
      return;
    }
    ++hist_[Bin(v)];
  }
  bool exact() const { return exact_; }
  // numpy.percentile(values, q) with linear interpolation.
  double Percentile(double q) {
    if (n_ == 0) return 0;
    const double pos = q * static_cast<double>(n_ - 1);
    const int64_t lo = static_cast<int64_t>(std::floor(pos));
    const double frac = pos - static_cast<double>(lo);
    const double a = Rank(lo), b = lo + 1 < n_ ? Rank(lo + 1) : a;
    if (std::isinf(a) || std::isinf(b)) return frac > 0 ? b : a;
    return a + (b - a) * frac;
  }

 private:
  static constexpr int kBins = 27632;  // 1e-6 .. 1e6 at 0.1% per bin
  static int Bin(double v) {
    if (!(v > 1e-6)) return 0;
    if (std::isinf(v) || v >= 1e6) return kBins + 1;
    return 1 + static_cast<int>(std::log(v / 1e-6) / std::log(1.001));
  }
  static double BinValue(int b) {
    if (b == 0) return 0;
    if (b == kBins + 1) return kInf;
    return 1e-6 * std::pow(1.001, b - 0.5);
  }
  // The value of rank r (0 = smallest) among all n.
  double Rank(int64_t r) {
    if (exact_) {
      if (sorted_.empty()) {
        while (!top_.empty()) {
          sorted_.push_back(top_.top());
          top_.pop();
        }
        std::reverse(sorted_.begin(), sorted_.end());  // largest first
      }
      return sorted_[static_cast<size_t>(n_ - 1 - r)];
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
  std::priority_queue<double, std::vector<double>, std::greater<double>> top_;
  std::vector<double> sorted_;
  std::vector<int64_t> hist_;
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

}  // namespace

absl::StatusOr<TensorDiff> DiffTensor(
    const LogicalTensor& quant, const LogicalTensor& ref,
    const DiffOptions& options, const RowMap& row_map,
    const std::atomic<bool>* cancelled,
    const std::function<void(int64_t)>& on_progress) {
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
  // With a row map, chunks hold whole rows so that reference rows can be
  // fetched one by one.
  int64_t chunk = std::max<int64_t>(1, options.chunk_elements);
  if (!row_map.empty()) chunk = std::max<int64_t>(1, chunk / cols) * cols;

  double sum_sq_err = 0, sum_abs = 0, sum_xx = 0, sum_hh = 0, sum_xh = 0;
  int64_t max_abs_flat = 0;
  PercentileTracker pct(n, options.exact_percentile_limit);
  std::priority_queue<Candidate>
      worst;  // top() is the least bad kept
              // Group ids are dense (block, sub-block or row-by-group indices),
              // so a
  // vector indexed by id beats a hash map on the hot path.
  struct GroupAcc {
    double sum = 0;
    float max = 0;
    uint32_t count = 0;
  };
  std::vector<GroupAcc> groups;
  std::vector<ElementQuant> q(static_cast<size_t>(std::min(chunk, n)));
  std::vector<float> x(q.size());

  for (int64_t first = 0; first < n; first += chunk) {
    if (cancelled != nullptr && cancelled->load()) {
      return absl::CancelledError("diff cancelled");
    }
    const int64_t m = std::min(chunk, n - first);
    absl::Status read = GuardedRead([&]() -> absl::Status {
      if (absl::Status s = quant.encoding->DecodeDetailed(first, m, q.data());
          !s.ok())
        return s;
      if (row_map.empty()) return ref.encoding->Decode(first, m, x.data());
      for (int64_t r = 0; r < m / cols; ++r) {
        const int64_t src = row_map[first / cols + r] * cols;
        if (absl::Status s =
                ref.encoding->Decode(src, cols, x.data() + r * cols);
            !s.ok()) {
          return s;
        }
      }
      return absl::OkStatus();
    });
    if (!read.ok()) return read;
    GroupAcc* acc = nullptr;
    int64_t acc_group = std::numeric_limits<int64_t>::min();
    for (int64_t i = 0; i < m; ++i) {
      const double xs = x[i];
      const double xq = q[i].value;
      const double err = std::fabs(xs - xq);
      const double step = xs > xq ? q[i].step_above : q[i].step_below;
      const double es = err == 0 ? 0 : (step > 0 ? err / step : kInf);
      sum_sq_err += err * err;
      sum_abs += err;
      sum_xx += xs * xs;
      sum_hh += xq * xq;
      sum_xh += xs * xq;
      if (err > d.max_abs_err) {
        d.max_abs_err = err;
        max_abs_flat = first + i;
      }
      d.max_err_steps = std::max(d.max_err_steps, es);
      if (es > 0.5) ++d.above_half_step;
      if (xs > q[i].range_max + 0.5 * q[i].step_above ||
          xs < q[i].range_min - 0.5 * q[i].step_below) {
        ++d.clipped;
      }
      if (xs == 0) ++d.source_zeros;
      if (xq == 0) {
        ++d.decoded_zeros;
        if (xs != 0) ++d.induced_zeros;
      }
      pct.Add(es);
      const Candidate c{es, first + i};
      if (static_cast<int>(worst.size()) < options.top_k) {
        worst.push(c);
      } else if (options.top_k > 0 && c < worst.top()) {
        worst.pop();
        worst.push(c);
      }
      if (d.groups_tracked && q[i].group >= 0) {
        if (q[i].group != acc_group) {
          if (q[i].group >= options.max_tracked_groups) {
            d.groups_tracked = false;
            groups = {};
            continue;
          }
          if (q[i].group >= static_cast<int64_t>(groups.size())) {
            groups.resize(std::max<size_t>(q[i].group + 1, groups.size() * 2));
          }
          acc = &groups[q[i].group];
          acc_group = q[i].group;
        }
        acc->sum += es;
        acc->max = std::max(acc->max, static_cast<float>(es));
        ++acc->count;
      }
    }
    if (on_progress) on_progress(first + m);
  }

  const double nn = static_cast<double>(std::max<int64_t>(n, 1));
  d.mse = sum_sq_err / nn;
  d.rmse = std::sqrt(d.mse);
  d.mean_abs_err = sum_abs / nn;
  d.max_abs_err_index = Unravel(max_abs_flat, quant.shape);
  d.sqnr_db = sum_sq_err == 0 ? kInf : 10 * std::log10(sum_xx / sum_sq_err);
  d.cosine = sum_xx == 0 || sum_hh == 0 ? (sum_xx == sum_hh ? 1 : 0)
                                        : sum_xh / std::sqrt(sum_xx * sum_hh);
  d.rel_fro_err = sum_xx == 0 ? (sum_sq_err == 0 ? 0 : kInf)
                              : std::sqrt(sum_sq_err / sum_xx);
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
    WorstElement w;
    w.flat_index = c.flat;
    w.index = Unravel(c.flat, quant.shape);
    w.err_steps = c.err_steps;
    if (absl::Status s = quant.encoding->Inspect(c.flat, &w.quant); !s.ok())
      return s;
    float xs;
    const int64_t src = row_map.empty()
                            ? c.flat
                            : row_map[c.flat / cols] * cols + c.flat % cols;
    if (absl::Status s = ref.encoding->Decode(src, 1, &xs); !s.ok()) return s;
    w.source = xs;
    w.decoded = w.quant.value;
    w.abs_err = std::fabs(w.source - static_cast<double>(w.decoded));
    d.worst.push_back(std::move(w));
  }
  if (d.groups_tracked) {
    std::vector<WorstGroup> all;
    all.reserve(groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      const GroupAcc& a = groups[g];
      if (a.count == 0) continue;
      all.push_back({static_cast<int64_t>(g), a.count, a.sum / a.count, a.max});
    }
    const size_t k =
        std::min<size_t>(all.size(), std::max(0, options.worst_groups));
    std::partial_sort(all.begin(), all.begin() + k, all.end(),
                      [](const WorstGroup& a, const WorstGroup& b) {
                        return a.mean_err_steps != b.mean_err_steps
                                   ? a.mean_err_steps > b.mean_err_steps
                                   : a.group < b.group;
                      });
    all.resize(k);
    d.worst_groups = std::move(all);
  }
  return d;
}

}  // namespace tensormorph
