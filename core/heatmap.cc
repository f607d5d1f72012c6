#include "core/heatmap.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/io/fault_guard.h"

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
  if (t.num_elements == 0) {
    // An empty tensor (a zero dimension): a view of no cells, rather than
    // cells that cover nothing (and minima of -inf).
    h.width = h.height = 0;
    h.row_edges = {0};
    h.col_edges = {0};
    return h;
  }
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
  base *= h.rows * h.cols;
  h.height = static_cast<int>(
      std::clamp<int64_t>(o.height, 1, std::max<int64_t>(h.rows, 1)));
  h.width = static_cast<int>(
      std::clamp<int64_t>(o.width, 1, std::max<int64_t>(h.cols, 1)));
  for (int i = 0; i <= h.height; ++i)
    h.row_edges.push_back(i * h.rows / h.height);
  for (int j = 0; j <= h.width; ++j)
    h.col_edges.push_back(j * h.cols / h.width);
  const size_t cells = static_cast<size_t>(h.width) * h.height;
  h.values.assign(cells, o.mode == HeatmapMode::kMean
                             ? 0.0
                             : -std::numeric_limits<double>::infinity());
  h.groups.assign(cells, -1);
  std::vector<int64_t> counts(cells, 0);
  std::vector<ElementQuant> q(static_cast<size_t>(h.cols));
  std::vector<float> x(ref != nullptr ? q.size() : 0);
  for (int i = 0; i < h.height; ++i) {
    for (int64_t r = h.row_edges[i]; r < h.row_edges[i + 1]; ++r) {
      const int64_t first = base + r * h.cols;
      absl::Status read = GuardedRead([&]() -> absl::Status {
        if (absl::Status s =
                t.encoding->DecodeDetailed(first, h.cols, q.data());
            !s.ok()) {
          return s;
        }
        return ref != nullptr
                   ? DecodeMappedRows(*ref, o.ref_rows, first, h.cols, x.data())
                   : absl::OkStatus();
      });
      if (!read.ok()) return read;
      for (int j = 0; j < h.width; ++j) {
        double& v = h.values[i * h.width + j];
        if (r == h.row_edges[i])
          h.groups[i * h.width + j] = q[h.col_edges[j]].group;
        for (int64_t c = h.col_edges[j]; c < h.col_edges[j + 1]; ++c) {
          const double e = q[c].value;
          switch (o.mode) {
            case HeatmapMode::kMean:
              v += e;
              break;
            case HeatmapMode::kAbsmax:
              v = std::max(v, std::fabs(e));
              break;
            case HeatmapMode::kErrorSteps: {
              const double err = std::fabs(x[c] - e);
              const double step = x[c] > e ? q[c].step_above : q[c].step_below;
              v = std::max(v,
                           err == 0 ? 0 : (step > 0 ? err / step : INFINITY));
              break;
            }
            case HeatmapMode::kGroup:
              break;
          }
        }
        counts[i * h.width + j] += h.col_edges[j + 1] - h.col_edges[j];
      }
    }
  }
  for (size_t k = 0; k < cells; ++k) {
    if (o.mode == HeatmapMode::kMean && counts[k] > 0) h.values[k] /= counts[k];
    if (o.mode == HeatmapMode::kGroup)
      h.values[k] = static_cast<double>(h.groups[k]);
  }
  const auto [lo, hi] = std::minmax_element(h.values.begin(), h.values.end());
  h.min = *lo;
  h.max = *hi;
  return h;
}

}  // namespace tensormorph
