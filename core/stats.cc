#include "core/stats.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/io/fault_guard.h"
#include "core/quant/levels.h"

namespace tensormorph {

namespace {

// The moments, specials and zeros of the elements folded so far, in the
// order they came.
struct Moments {
  double sum = 0, sum_sq = 0;
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  int64_t nan = 0, inf = 0, zeros = 0;
  int64_t zeros_with_ref = 0, pruned = 0;  // with a reference
};

// Folds v[0, n) (beside the reference x[0, n), when given) into `m`, and
// with kFine counts the finite values into `fine` by their top 16 bits
// (FineHistogram).
// The sums must come out bit for bit as adding each finite value in order does,
// so they stay one chain of double additions each: a non-finite element
// adds -0.0, which leaves every double as it is (x + -0.0 == x, -0.0 too).
// Everything else is branch-free beside those two chains, whose latency
// (not the decode) bounds this loop; min and max keep the earlier of equal
// values (+0 before -0), as std::min and std::max do.
template <bool kFine>
void FoldMoments(const float* v, const float* x, int64_t n, Moments* m,
                 int64_t* fine) {
  double sum = m->sum, sum_sq = m->sum_sq;
  float lo = m->lo, hi = m->hi;
  int64_t nan = 0, inf = 0, zeros = 0, pruned = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float f = v[i];
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    const uint32_t mag = bits & 0x7fffffffu;
    const bool finite = mag < 0x7f800000u;
    if constexpr (kFine) fine[bits >> 16] += finite;
    nan += mag > 0x7f800000u;
    inf += mag == 0x7f800000u;
    const double d = finite ? static_cast<double>(f) : -0.0;
    sum += d;
    sum_sq += d * d;  // +0.0 for a non-finite one: sum_sq is never -0.0
    lo = finite && f < lo ? f : lo;
    hi = finite && hi < f ? f : hi;
    const bool zero = mag == 0;
    zeros += zero;
    if (x != nullptr) pruned += zero && x[i] == 0;
  }
  m->sum = sum;
  m->sum_sq = sum_sq;
  m->lo = lo;
  m->hi = hi;
  m->nan += nan;
  m->inf += inf;
  m->zeros += zeros;
  if (x != nullptr) {
    m->zeros_with_ref += zeros;
    m->pruned += pruned;
  }
}

// A run's finite elements and those on its group's end levels.
struct Saturation {
  int64_t finite = 0, low = 0, high = 0;  // high: on range_max, not range_min
};

// The float equal to `d`, or NaN (equal to nothing) where no finite float
// is: a float compares equal to a double only when it is that value.
float AsFloatOrNaN(double d) {
  const float f = static_cast<float>(d);
  return std::isfinite(d) && static_cast<double>(f) == d
             ? f
             : std::numeric_limits<float>::quiet_NaN();
}

// As `finite && double(v) == range` for each element, in float compares
// and integer sums that vectorize (no element equals a NaN bound, and a
// non-finite one equals no finite bound).
Saturation CountSaturation(const float* v, int64_t n, const QuantRun& r) {
  const float lo = AsFloatOrNaN(r.range_min), hi = AsFloatOrNaN(r.range_max);
  int64_t finite = 0, low = 0, high = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float f = v[i];
    const uint32_t mag = std::bit_cast<uint32_t>(f) & 0x7fffffffu;
    const int at_low = f == lo, at_high = f == hi;
    finite += mag < 0x7f800000u;
    low += at_low;
    high += at_high & (at_low ^ 1);
  }
  return {finite, low, high};
}

// A histogram of 8-bit codes, in four interleaved copies so that a run of
// equal codes does not wait on its own increments.
class CodeCounter {
 public:
  void Add(const uint8_t* c, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      ++h_[0][c[i]];
      ++h_[1][c[i + 1]];
      ++h_[2][c[i + 2]];
      ++h_[3][c[i + 3]];
    }
    for (; i < n; ++i) ++h_[0][c[i]];
  }
  // Adds the counts into `hist` (2^bits entries), each code masked to its
  // bits as Inspect's code_bits_value is.
  void AddTo(std::vector<int64_t>* hist) const {
    const size_t mask = hist->size() - 1;
    for (size_t k = 0; k < 256; ++k)
      (*hist)[k & mask] += h_[0][k] + h_[1][k] + h_[2][k] + h_[3][k];
  }

 private:
  int64_t h_[4][256] = {};
};

// A set of group ids: a bitmap for ids below the element count (ids are
// dense, so all of them), a hash set for any other; consecutive repeats
// (a group's runs, row after row) cost one comparison.
class GroupSet {
 public:
  explicit GroupSet(int64_t elements) : limit_(elements) {}
  void Insert(int64_t g) {
    if (g == last_) return;
    last_ = g;
    if (g < 0 || g >= limit_) {
      other_.insert(g);
      return;
    }
    const size_t w = static_cast<size_t>(g >> 6);
    if (w >= bits_.size()) bits_.resize(std::max(w + 1, 2 * bits_.size()));
    const uint64_t bit = uint64_t{1} << (g & 63);
    count_ += (bits_[w] & bit) == 0;
    bits_[w] |= bit;
  }
  int64_t size() const { return count_ + static_cast<int64_t>(other_.size()); }

 private:
  int64_t limit_;
  int64_t last_ = std::numeric_limits<int64_t>::min();
  std::vector<uint64_t> bits_;
  int64_t count_ = 0;
  absl::flat_hash_set<int64_t> other_;
};

// A chunk's decoded values and the runs of consecutive elements sharing a
// group: DecodeRuns where the runs' ranges are needed (level usage); else
// Decode beside GroupIds, or no ids at all for an encoding that is not
// quantized (plain dtypes, whose every element has group -1; checked on the
// first element). Never Inspect per element unless the encoding's own
// DecodeRuns does.
class ChunkReader {
 public:
  ChunkReader(const LogicalTensor& t, bool ranges, size_t capacity)
      : t_(t), ranges_(ranges), v_(capacity) {}

  // REQUIRES: the tensor is not empty. Errors: as GroupIds.
  absl::Status Init() {
    if (ranges_ || t_.encoding->info().quantized || t_.num_elements == 0) {
      return absl::OkStatus();
    }
    const int64_t zero = 0;
    int64_t g = 0;
    if (absl::Status s = t_.encoding->GroupIds({&zero, 1}, &g); !s.ok())
      return s;
    plain_ = g == -1;
    return absl::OkStatus();
  }

  absl::Status Read(int64_t first, int64_t m) {
    if (ranges_) return t_.encoding->DecodeRuns(first, m, v_.data(), &runs_);
    if (absl::Status s = ReadValues(first, m); !s.ok()) return s;
    runs_.clear();
    if (plain_) {
      runs_.push_back({m, -1});
      return absl::OkStatus();
    }
    idx_.resize(static_cast<size_t>(m));
    ids_.resize(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) idx_[i] = first + i;
    if (absl::Status s = t_.encoding->GroupIds(idx_, ids_.data()); !s.ok())
      return s;
    for (int64_t i = 0; i < m; ++i) {
      if (runs_.empty() || runs_.back().group != ids_[i]) {
        runs_.push_back({0, ids_[i]});
      }
      ++runs_.back().count;
    }
    return absl::OkStatus();
  }
  absl::Status ReadValues(int64_t first, int64_t m) {
    return t_.encoding->Decode(first, m, v_.data());
  }
  const float* values() const { return v_.data(); }
  const std::vector<QuantRun>& runs() const { return runs_; }

 private:
  const LogicalTensor& t_;
  bool ranges_;
  bool plain_ = false;
  std::vector<float> v_;
  std::vector<QuantRun> runs_;
  std::vector<int64_t> idx_, ids_;
};

// The histogram's bin of a finite value: floor((v - min) / width), clamped
// to the bins, the same double expression whatever the caller.
class Binner {
 public:
  Binner(double min, double max, int bins)
      : min_(min), width_((max - min) / bins), bins_(bins) {}
  int Bin(float v) const {
    const int b =
        width_ > 0 ? static_cast<int>(std::floor((v - min_) / width_)) : 0;
    return std::clamp(b, 0, bins_ - 1);
  }
  void Add(const float* v, int64_t n, int64_t* hist) const {
    for (int64_t i = 0; i < n; ++i) {
      if (std::isfinite(v[i])) ++hist[Bin(v[i])];
    }
  }
  // Whether every float in [lo, hi] (lo <= hi, both finite) has one bin,
  // and which. Bin is monotonic in v where floor((v - min) / width) stays
  // below 2^31 (a subtraction, a division by a positive width and a floor,
  // each rounding monotonically); past that the int conversion wraps to
  // INT_MIN (bin 0), so such ranges are never called uniform. Only for a
  // finite min and a finite positive width (Exact()).
  bool Uniform(float lo, float hi, int* bin) const {
    const double a = std::floor((lo - min_) / width_);
    const double b = std::floor((hi - min_) / width_);
    constexpr double kWraps = 2147483648.0;  // 2^31
    if (!(a < kWraps) || !(b < kWraps)) return false;
    const double top = bins_ - 1;
    const double ca = std::clamp(a, 0.0, top), cb = std::clamp(b, 0.0, top);
    if (ca != cb) return false;
    *bin = static_cast<int>(ca);
    return true;
  }
  bool Exact() const {
    return std::isfinite(min_) && width_ > 0 && std::isfinite(width_);
  }

 private:
  double min_, width_;
  int bins_;
};

constexpr int64_t kFineMinElements = int64_t{1} << 16;

// Finite values counted by their top 16 bits (sign, exponent and 7 bits of
// mantissa) in pass 1, so that the histogram needs no second look at a
// value whose bucket lies inside one bin: pass 1 cannot bin them itself
// (the range may be the values' own min and max), but most buckets fall
// wholly inside a bin; only values in the few buckets a bin edge cuts
// (at most one per edge) are binned one by one in pass 2.
class FineHistogram {
 public:
  static constexpr size_t kBuckets = size_t{1} << 16;
  explicit FineHistogram(bool used) : count_(used ? kBuckets : 0, 0) {}
  int64_t* counts() { return count_.data(); }

  // Adds every bucket inside one bin to `hist`, and marks the others as
  // needing pass 2. Returns whether any populated bucket was marked.
  bool Resolve(const Binner& binner, int64_t* hist) {
    cut_.assign(kBuckets, 0);
    bool any = false;
    for (size_t p = 0; p < kBuckets; ++p) {
      if (count_[p] == 0) continue;
      const uint32_t low = static_cast<uint32_t>(p) << 16, high = low | 0xffff;
      // Negative values run the other way.
      const float a = std::bit_cast<float>(p & 0x8000 ? high : low);
      const float b = std::bit_cast<float>(p & 0x8000 ? low : high);
      int bin = 0;
      if (binner.Uniform(a, b, &bin)) {
        hist[bin] += count_[p];
      } else {
        cut_[p] = 1;
        any = true;
      }
    }
    return any;
  }
  // Pass 2: bins the values of v[0, n) whose buckets Resolve marked.
  void AddCut(const Binner& binner, const float* v, int64_t n,
              int64_t* hist) const {
    for (int64_t i = 0; i < n; ++i) {
      if (cut_[std::bit_cast<uint32_t>(v[i]) >> 16]) ++hist[binner.Bin(v[i])];
    }
  }

 private:
  std::vector<int64_t> count_;
  std::vector<uint8_t> cut_;
};

}  // namespace

absl::StatusOr<TensorStats> ComputeStats(const LogicalTensor& t,
                                         const LogicalTensor* ref,
                                         const StatsOptions& o,
                                         const std::atomic<bool>* cancelled) {
  if (absl::Status s = CheckReference(t, ref, o.ref_rows); !s.ok()) return s;
  TensorStats st;
  const int64_t n = t.num_elements;
  const bool one_group = o.group.has_value();
  const int64_t want = o.group.value_or(-1);
  if (one_group) {
    if (want < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group ", want, " of tensor '", t.name,
          "' is negative; group ids count from 0 (ScalarInspection.group)"));
    }
    ScalarInfo first;
    if (n > 0) {
      if (absl::Status s =
              GuardedRead([&] { return t.encoding->Inspect(0, &first); });
          !s.ok()) {
        return s;
      }
    }
    if (first.group < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", t.name, "' (", t.encoding->info().scheme,
          n == 0 ? ", empty" : "",
          ") has no quantization groups, so it has no group ", want));
    }
    // Ids are dense in row-major order of the group grid, so the last
    // element is in the last group, except where act-order's g_idx
    // reorders columns (then the pass below finds the range).
    ScalarInfo last;
    if (absl::Status s =
            GuardedRead([&] { return t.encoding->Inspect(n - 1, &last); });
        !s.ok()) {
      return s;
    }
    if (!t.encoding->info().act_order && want > last.group) {
      return absl::InvalidArgumentError(
          absl::StrCat("group ", want, " is past the last group of tensor '",
                       t.name, "', which has groups 0..", last.group));
    }
  }
  const int64_t chunk = std::max<int64_t>(1, o.chunk_elements);
  const size_t buf =
      static_cast<size_t>(std::min(chunk, std::max<int64_t>(n, 1)));
  const EncodingInfo& info = t.encoding->info();
  st.has_levels = info.quantized && info.bits <= 8;
  st.code_bits = info.bits;
  if (st.has_levels) st.code_histogram.assign(size_t{1} << info.bits, 0);
  st.has_reference = ref != nullptr;
  ChunkReader reader(t, st.has_levels, buf);
  if (absl::Status s = GuardedRead([&] { return reader.Init(); }); !s.ok())
    return s;
  std::vector<float> x(ref != nullptr ? buf : 0);
  std::vector<uint8_t> codes(st.has_levels ? buf : 0);
  CodeCounter code_counter;
  GroupSet groups(n), saturated(n);

  Moments mo;
  // Small tensors take two plain passes: 2^16 buckets would cost more than
  // their second pass.
  const bool use_fine = n >= kFineMinElements;
  FineHistogram fine(use_fine);
  auto fold = [&](const float* values, const float* refs, int64_t count) {
    if (use_fine) {
      FoldMoments<true>(values, refs, count, &mo, fine.counts());
    } else {
      FoldMoments<false>(values, refs, count, &mo, nullptr);
    }
  };
  int64_t counted = 0;       // elements of the group (all: n)
  int64_t max_group = -1;    // the last group id seen, to name the range
  int64_t level_index = -1;  // an element whose group's levels are listed
  bool many_groups = false;  // no group asked and elements in several
  int64_t only_group = -1;
  // Pass 1: everything but the histogram (whose range may depend on it).
  for (int64_t first = 0; first < n; first += chunk) {
    if (cancelled != nullptr && cancelled->load())
      return absl::CancelledError("cancelled");
    const int64_t m = std::min(chunk, n - first);
    absl::Status read = GuardedRead([&]() -> absl::Status {
      if (absl::Status s = reader.Read(first, m); !s.ok()) return s;
      if (st.has_levels) {
        if (absl::Status s = t.encoding->RawCodes(first, m, codes.data());
            !s.ok())
          return s;
      }
      return ref != nullptr
                 ? DecodeMappedRows(*ref, o.ref_rows, first, m, x.data())
                 : absl::OkStatus();
    });
    if (!read.ok()) return read;
    const float* v = reader.values();
    int64_t i = 0;
    for (const QuantRun& r : reader.runs()) {
      const int64_t k = i;
      i += r.count;
      max_group = std::max(max_group, r.group);
      if (one_group && r.group != want) continue;
      counted += r.count;
      if (level_index < 0) {
        level_index = first + k;
        only_group = r.group;
      } else if (r.group != only_group) {
        many_groups = true;
      }
      // Without a group asked for, every run is counted: the chunk's
      // elements are folded at once below.
      if (one_group) {
        fold(v + k, ref != nullptr ? x.data() + k : nullptr, r.count);
        if (st.has_levels) code_counter.Add(codes.data() + k, r.count);
      }
      if (st.has_levels && r.group >= 0) {
        const Saturation sat = CountSaturation(v + k, r.count, r);
        st.saturated_low += sat.low;
        st.saturated_high += sat.high;
        if (sat.finite > 0) groups.Insert(r.group);
        if (sat.low + sat.high > 0) saturated.Insert(r.group);
      }
    }
    if (!one_group) {
      fold(v, ref != nullptr ? x.data() : nullptr, m);
      if (st.has_levels) code_counter.Add(codes.data(), m);
    }
  }
  if (one_group && counted == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", want, " is past the last group of tensor '",
                     t.name, "', which has groups 0..", max_group));
  }
  st.count = counted;
  st.nan_count = mo.nan;
  st.inf_count = mo.inf;
  st.zeros = mo.zeros;
  st.pruned_zeros = mo.pruned;
  st.induced_zeros = mo.zeros_with_ref - mo.pruned;
  if (st.has_levels) code_counter.AddTo(&st.code_histogram);
  if (level_index >= 0 && !many_groups) {
    ScalarInfo s;
    if (absl::Status e =
            GuardedRead([&] { return t.encoding->Inspect(level_index, &s); });
        !e.ok()) {
      return e;
    }
    st.levels = GroupLevels(s);
  }
  const int64_t finite = counted - st.nan_count - st.inf_count;
  if (finite > 0) {
    const double lo = mo.lo, hi = mo.hi;
    st.min = lo;
    st.max = hi;
    st.mean = mo.sum / finite;
    st.std = std::sqrt(std::max(0.0, mo.sum_sq / finite - st.mean * st.mean));
    st.absmax = std::max(std::fabs(lo), std::fabs(hi));
  }
  st.sparsity = counted > 0 ? static_cast<double>(st.zeros) / counted : 0;
  st.groups = groups.size();
  st.groups_saturated = saturated.size();
  for (int64_t c : st.code_histogram) st.levels_used += c > 0;

  // Pass 2: the histogram over [hist_min, hist_max].
  st.hist_min = o.range_min.value_or(st.min);
  st.hist_max = o.range_max.value_or(st.max);
  const int bins = std::max(1, o.bins);
  st.histogram.assign(bins, 0);
  const Binner binner(st.hist_min, st.hist_max, bins);
  // Buckets inside one bin are counted already; the rest (or, for a range
  // of no finite positive width, every value) are binned one by one.
  const bool exact = use_fine && binner.Exact();
  if (exact && !fine.Resolve(binner, st.histogram.data())) return st;
  for (int64_t first = 0; first < n; first += chunk) {
    if (cancelled != nullptr && cancelled->load())
      return absl::CancelledError("cancelled");
    const int64_t m = std::min(chunk, n - first);
    // One group: the values come with their groups, to pick the group's.
    if (absl::Status s = GuardedRead([&] {
          return one_group ? reader.Read(first, m)
                           : reader.ReadValues(first, m);
        });
        !s.ok()) {
      return s;
    }
    const float* v = reader.values();
    auto add = [&](const float* values, int64_t count) {
      if (exact) {
        fine.AddCut(binner, values, count, st.histogram.data());
      } else {
        binner.Add(values, count, st.histogram.data());
      }
    };
    if (!one_group) {
      add(v, m);
      continue;
    }
    int64_t i = 0;
    for (const QuantRun& r : reader.runs()) {
      if (r.group == want) add(v + i, r.count);
      i += r.count;
    }
  }
  return st;
}

}  // namespace tensormorph
