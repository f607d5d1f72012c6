#include "core/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/io/fault_guard.h"

namespace tensormorph {

absl::StatusOr<TensorStats> ComputeStats(const LogicalTensor& t,
                                         const LogicalTensor* ref,
                                         const StatsOptions& o,
                                         const std::atomic<bool>* cancelled) {
  if (absl::Status s = CheckReference(t, ref, o.ref_rows); !s.ok()) return s;
  TensorStats st;
  const int64_t n = t.num_elements;
  st.count = n;
  const int64_t chunk = std::max<int64_t>(1, o.chunk_elements);
  std::vector<ElementQuant> q(
      static_cast<size_t>(std::min(chunk, std::max<int64_t>(n, 1))));
  std::vector<float> x(ref != nullptr ? q.size() : 0);
  const EncodingInfo& info = t.encoding->info();
  st.has_levels = info.quantized && info.bits <= 8;
  st.code_bits = info.bits;
  if (st.has_levels) st.code_histogram.assign(size_t{1} << info.bits, 0);
  st.has_reference = ref != nullptr;

  double sum = 0, sum_sq = 0;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  absl::flat_hash_set<int64_t> groups, saturated;
  // Pass 1: everything but the histogram (whose range may depend on it).
  for (int64_t first = 0; first < n; first += chunk) {
    if (cancelled != nullptr && cancelled->load())
      return absl::CancelledError("cancelled");
    const int64_t m = std::min(chunk, n - first);
    absl::Status read = GuardedRead([&]() -> absl::Status {
      if (absl::Status s = t.encoding->DecodeDetailed(first, m, q.data());
          !s.ok())
        return s;
      return ref != nullptr
                 ? DecodeMappedRows(*ref, o.ref_rows, first, m, x.data())
                 : absl::OkStatus();
    });
    if (!read.ok()) return read;
    for (int64_t i = 0; i < m; ++i) {
      const double v = q[i].value;
      if (std::isnan(v)) {
        ++st.nan_count;
        continue;
      }
      if (std::isinf(v)) {
        ++st.inf_count;
        continue;
      }
      sum += v;
      sum_sq += v * v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      if (v == 0) {
        ++st.zeros;
        if (ref != nullptr) (x[i] == 0 ? st.pruned_zeros : st.induced_zeros)++;
      }
      if (st.has_levels && q[i].group >= 0) {
        groups.insert(q[i].group);
        const bool at_low = v == q[i].range_min, at_high = v == q[i].range_max;
        st.saturated_low += at_low;
        st.saturated_high += at_high && !at_low;
        if (at_low || at_high) saturated.insert(q[i].group);
      }
    }
    if (st.has_levels) {
      absl::Status codes = GuardedRead([&]() -> absl::Status {
        for (int64_t i = 0; i < m; ++i) {
          ScalarInfo s;
          if (absl::Status e = t.encoding->Inspect(first + i, &s); !e.ok())
            return e;
          ++st.code_histogram[s.code_bits_value &
                              ((uint64_t{1} << info.bits) - 1)];
        }
        return absl::OkStatus();
      });
      if (!codes.ok()) return codes;
    }
  }
  const int64_t finite = n - st.nan_count - st.inf_count;
  if (finite > 0) {
    st.min = lo;
    st.max = hi;
    st.mean = sum / finite;
    st.std = std::sqrt(std::max(0.0, sum_sq / finite - st.mean * st.mean));
    st.absmax = std::max(std::fabs(lo), std::fabs(hi));
  }
  st.sparsity = n > 0 ? static_cast<double>(st.zeros) / n : 0;
  st.groups = static_cast<int64_t>(groups.size());
  st.groups_saturated = static_cast<int64_t>(saturated.size());
  for (int64_t c : st.code_histogram) st.levels_used += c > 0;

  // Pass 2: the histogram over [hist_min, hist_max].
  st.hist_min = o.range_min.value_or(st.min);
  st.hist_max = o.range_max.value_or(st.max);
  const int bins = std::max(1, o.bins);
  st.histogram.assign(bins, 0);
  const double width = (st.hist_max - st.hist_min) / bins;
  std::vector<float> v(q.size());
  for (int64_t first = 0; first < n; first += chunk) {
    if (cancelled != nullptr && cancelled->load())
      return absl::CancelledError("cancelled");
    const int64_t m = std::min(chunk, n - first);
    if (absl::Status s =
            GuardedRead([&] { return t.encoding->Decode(first, m, v.data()); });
        !s.ok()) {
      return s;
    }
    for (int64_t i = 0; i < m; ++i) {
      if (!std::isfinite(v[i])) continue;
      int b = width > 0
                  ? static_cast<int>(std::floor((v[i] - st.hist_min) / width))
                  : 0;
      ++st.histogram[std::clamp(b, 0, bins - 1)];
    }
  }
  return st;
}

}  // namespace tensormorph
