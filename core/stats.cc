#include "core/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/io/fault_guard.h"
#include "core/quant/levels.h"

namespace tensormorph {

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
      if (absl::Status s = t.encoding->DecodeDetailed(first, m, q.data());
          !s.ok())
        return s;
      return ref != nullptr
                 ? DecodeMappedRows(*ref, o.ref_rows, first, m, x.data())
                 : absl::OkStatus();
    });
    if (!read.ok()) return read;
    for (int64_t i = 0; i < m; ++i) {
      max_group = std::max(max_group, q[i].group);
      if (one_group && q[i].group != want) continue;
      ++counted;
      if (level_index < 0) {
        level_index = first + i;
        only_group = q[i].group;
      } else if (q[i].group != only_group) {
        many_groups = true;
      }
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
          if (one_group && q[i].group != want) continue;
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
  if (one_group && counted == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", want, " is past the last group of tensor '",
                     t.name, "', which has groups 0..", max_group));
  }
  st.count = counted;
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
    st.min = lo;
    st.max = hi;
    st.mean = sum / finite;
    st.std = std::sqrt(std::max(0.0, sum_sq / finite - st.mean * st.mean));
    st.absmax = std::max(std::fabs(lo), std::fabs(hi));
  }
  st.sparsity = counted > 0 ? static_cast<double>(st.zeros) / counted : 0;
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
    // One group: the values come with their groups, to pick the group's.
    if (absl::Status s = GuardedRead([&] {
          if (!one_group) return t.encoding->Decode(first, m, v.data());
          absl::Status d = t.encoding->DecodeDetailed(first, m, q.data());
          for (int64_t i = 0; d.ok() && i < m; ++i) {
            v[i] = q[i].group == want ? q[i].value : NAN;
          }
          return d;
        });
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
