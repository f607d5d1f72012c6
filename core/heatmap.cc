#include "core/heatmap.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/io/fault_guard.h"
#include "core/util/status_macros.h"

namespace tensormorph {

std::vector<uint8_t> GroupBoundaries(const Heatmap& h) {
  std::vector<uint8_t> out(h.groups.size(), 0);
  for (int i = 0; i < h.height; ++i) {
    for (int j = 0; j < h.width; ++j) {
      const int64_t g = h.groups[i * h.width + j];
      if (j + 1 < h.width && h.groups[i * h.width + j + 1] != g)
        out[i * h.width + j] |= 1;
      if (i + 1 < h.height && h.groups[(i + 1) * h.width + j] != g)
        out[i * h.width + j] |= 2;
    }
  }
  return out;
}

namespace {

// Edge i of n parts of [begin, begin + len): begin + floor(i * len / n),
// spelled so that no product exceeds len or n * n (len may be near 2^63).
int64_t Edge(int64_t begin, int64_t len, int64_t n, int64_t i) {
  const int64_t q = len / n, r = len % n;
  return begin + i * q + (i * r) / n;
}

// Resolves an end of 0 to `size`, then checks [begin, end) inside
// [0, size).
absl::Status ResolveRange(const char* what, int64_t begin, int64_t* end,
                          int64_t size, const Heatmap& h) {
  const int64_t asked_end = *end;
  if (*end == 0) *end = size;
  if (begin < 0 || asked_end < 0 || begin >= *end || *end > size) {
    return absl::InvalidArgumentError(
        absl::StrCat("heatmap region ", what, " [", begin, ", ", asked_end,
                     asked_end == 0 ? " (= to the end)" : "",
                     ") must be non-empty and inside the view's ", h.rows,
                     " rows x ", h.cols, " cols (", what, " 0..", size,
                     "; an end of 0 means ", size, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Heatmap> ComputeHeatmap(const LogicalTensor& t,
                                       const LogicalTensor* ref,
                                       const HeatmapOptions& o) {
  const size_t rank = t.shape.size();
  if (rank == 0)
    return absl::InvalidArgumentError("a rank-0 tensor has no 2-D view");
  if (o.mode == HeatmapMode::kErrorSteps && ref == nullptr) {
    return absl::InvalidArgumentError("error mode needs a reference (--ref)");
  }
  if (absl::Status s = CheckReference(t, ref, o.ref_rows); !s.ok()) return s;
  Heatmap h;
  h.cols = t.shape.back();
  h.rows = rank >= 2 ? t.shape[rank - 2] : 1;
  const bool whole =
      o.row_begin == 0 && o.row_end == 0 && o.col_begin == 0 && o.col_end == 0;
  if (t.num_elements == 0) {
    // An empty tensor (a zero dimension): a view of no cells, rather than
    // cells that cover nothing (and minima of -inf).
    if (!whole) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", t.name, "' is empty (a view of ", h.rows, " rows x ",
          h.cols, " cols), so it has no region rows [", o.row_begin, ", ",
          o.row_end, ") x cols [", o.col_begin, ", ", o.col_end, ")"));
    }
    h.width = h.height = 0;
    h.row_edges = {0};
    h.col_edges = {0};
    return h;
  }
  int64_t row_end = o.row_end, col_end = o.col_end;
  TM_RETURN_IF_ERROR(ResolveRange("rows", o.row_begin, &row_end, h.rows, h));
  TM_RETURN_IF_ERROR(ResolveRange("cols", o.col_begin, &col_end, h.cols, h));
  const int64_t nrows = row_end - o.row_begin, ncols = col_end - o.col_begin;
  int64_t base = 0;  // flat offset of the view
  for (size_t d = 0; d + 2 < rank; ++d) {
    const int64_t i = d < o.leading.size() ? o.leading[d] : 0;
    if (i < 0 || i >= t.shape[d]) {
      return absl::InvalidArgumentError(
          absl::StrCat("leading index ", i, " is out of range for ",
                       "dimension ", d, " of size ", t.shape[d]));
    }
    base = base * t.shape[d] + i;
  }
  base *= h.rows * h.cols;  // < num_elements: every index checked above
  h.height = static_cast<int>(std::clamp<int64_t>(o.height, 1, nrows));
  h.width = static_cast<int>(std::clamp<int64_t>(o.width, 1, ncols));
  for (int i = 0; i <= h.height; ++i)
    h.row_edges.push_back(Edge(o.row_begin, nrows, h.height, i));
  for (int j = 0; j <= h.width; ++j)
    h.col_edges.push_back(Edge(o.col_begin, ncols, h.width, j));
  const size_t cells = static_cast<size_t>(h.width) * h.height;
  const bool zeros = o.mode == HeatmapMode::kZeros;
  h.values.assign(cells, o.mode == HeatmapMode::kMean || zeros
                             ? 0.0
                             : -std::numeric_limits<double>::infinity());
  h.groups.assign(cells, -1);
  if (zeros && ref != nullptr) h.pruned.assign(cells, 0.0);

  // Each cell's group, from its first element.
  absl::Status inspected = GuardedRead([&]() -> absl::Status {
    ScalarInfo s;
    for (int i = 0; i < h.height; ++i) {
      for (int j = 0; j < h.width; ++j) {
        TM_RETURN_IF_ERROR(t.encoding->Inspect(
            base + h.row_edges[i] * h.cols + h.col_edges[j], &s));
        h.groups[i * h.width + j] = s.group;
      }
    }
    return absl::OkStatus();
  });
  if (!inspected.ok()) return inspected;

  // One decode of the region, a row of it at a time: the values alone, or
  // with their steps for error mode; the reference where it is compared.
  const bool detailed = o.mode == HeatmapMode::kErrorSteps;
  const bool with_ref = ref != nullptr && (detailed || zeros);
  std::vector<ElementQuant> q(detailed ? static_cast<size_t>(ncols) : 0);
  std::vector<float> v(detailed ? 0 : static_cast<size_t>(ncols));
  std::vector<float> x(with_ref ? static_cast<size_t>(ncols) : 0);
  if (o.mode != HeatmapMode::kGroup) {
    for (int i = 0; i < h.height; ++i) {
      for (int64_t r = h.row_edges[i]; r < h.row_edges[i + 1]; ++r) {
        const int64_t first = base + r * h.cols + o.col_begin;
        absl::Status read = GuardedRead([&]() -> absl::Status {
          TM_RETURN_IF_ERROR(
              detailed ? t.encoding->DecodeDetailed(first, ncols, q.data())
                       : t.encoding->Decode(first, ncols, v.data()));
          return with_ref ? DecodeMappedRows(*ref, o.ref_rows, first, ncols,
                                             x.data())
                          : absl::OkStatus();
        });
        if (!read.ok()) return read;
        for (int j = 0; j < h.width; ++j) {
          double& out = h.values[i * h.width + j];
          const int64_t c0 = h.col_edges[j] - o.col_begin;
          const int64_t c1 = h.col_edges[j + 1] - o.col_begin;
          switch (o.mode) {
            case HeatmapMode::kMean:
              for (int64_t c = c0; c < c1; ++c) out += v[c];
              break;
            case HeatmapMode::kAbsmax:
              for (int64_t c = c0; c < c1; ++c)
                out = std::max(out, static_cast<double>(std::fabs(v[c])));
              break;
            case HeatmapMode::kErrorSteps:
              for (int64_t c = c0; c < c1; ++c) {
                const double e = q[c].value;
                const double err = std::fabs(x[c] - e);
                const double step =
                    x[c] > e ? q[c].step_above : q[c].step_below;
                out = std::max(
                    out, err == 0 ? 0 : (step > 0 ? err / step : INFINITY));
              }
              break;
            case HeatmapMode::kZeros:
              for (int64_t c = c0; c < c1; ++c) {
                if (v[c] != 0) continue;
                if (!with_ref || x[c] != 0) {
                  out += 1;
                } else {
                  h.pruned[i * h.width + j] += 1;
                }
              }
              break;
            case HeatmapMode::kGroup:
              break;
          }
        }
      }
    }
  }
  for (int i = 0; i < h.height; ++i) {
    for (int j = 0; j < h.width; ++j) {
      const size_t k = static_cast<size_t>(i) * h.width + j;
      // A cell holds at most max_heatmap_cells-th of the region, but the
      // region can be large: the count in double, as the mean's sum is.
      const double count =
          static_cast<double>(h.row_edges[i + 1] - h.row_edges[i]) *
          static_cast<double>(h.col_edges[j + 1] - h.col_edges[j]);
      if (o.mode == HeatmapMode::kMean || zeros) h.values[k] /= count;
      if (!h.pruned.empty()) h.pruned[k] /= count;
      if (o.mode == HeatmapMode::kGroup)
        h.values[k] = static_cast<double>(h.groups[k]);
    }
  }
  const auto [lo, hi] = std::minmax_element(h.values.begin(), h.values.end());
  h.min = *lo;
  h.max = *hi;
  return h;
}

}  // namespace tensormorph
