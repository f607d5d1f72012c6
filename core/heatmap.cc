#include "core/heatmap.h"

#include <algorithm>
#include <cmath>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

// Elements a batched read of whole rows decodes at once (1 MiB of floats).
constexpr int64_t kBatchElements = int64_t{1} << 18;

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

#if defined(__x86_64__)
// Eight cells at once, a cell per lane of two vectors of doubles, over the
// first `n` columns of each (n a multiple of 4): four columns of each cell
// loaded, transposed so that a vector holds one column of four cells, and
// added column after column. Each lane is still its cell's additions in
// order, each rounded once as a scalar addition is.
__attribute__((target("avx2"))) void SumEightCells(const float* v,
                                                   const int64_t* b, int64_t n,
                                                   double* sums) {
  __m256d lo = _mm256_loadu_pd(sums), hi = _mm256_loadu_pd(sums + 4);
  for (int64_t k = 0; k < n; k += 4) {
    __m128 a0 = _mm_loadu_ps(v + b[0] + k), a1 = _mm_loadu_ps(v + b[1] + k),
           a2 = _mm_loadu_ps(v + b[2] + k), a3 = _mm_loadu_ps(v + b[3] + k);
    __m128 c0 = _mm_loadu_ps(v + b[4] + k), c1 = _mm_loadu_ps(v + b[5] + k),
           c2 = _mm_loadu_ps(v + b[6] + k), c3 = _mm_loadu_ps(v + b[7] + k);
    _MM_TRANSPOSE4_PS(a0, a1, a2, a3);
    _MM_TRANSPOSE4_PS(c0, c1, c2, c3);
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(a0));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(c0));
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(a1));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(c1));
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(a2));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(c2));
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(a3));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(c3));
  }
  _mm256_storeu_pd(sums, lo);
  _mm256_storeu_pd(sums + 4, hi);
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

// Adds each cell's run of `v` to its sum: sums[j] += v[run[j]], then
// v[run[j] + 1], ... in that order. Each cell's additions form one dependent
// chain, so cells are taken several at a time to keep chains in flight
// (eight to a pair of vectors where the CPU has AVX2); every chain still adds
// its elements in order, bit for bit the sequential sum.
void AccumulateSums(const float* v, const std::vector<int64_t>& run,
                    double* sums) {
  const int width = static_cast<int>(run.size()) - 1;
  int j = 0;
#if defined(__x86_64__)
  if (HasAvx2()) {
    for (; j + 8 <= width; j += 8) {
      const int64_t* b = run.data() + j;
      int64_t n = b[1] - b[0];
      for (int k = 1; k < 8; ++k) n = std::min(n, b[k + 1] - b[k]);
      n -= n % 4;
      if (n > 0) SumEightCells(v, b, n, sums + j);
      // The rest of each run (cells differ in width by at most a column).
      for (int k = 0; k < 8; ++k) {
        double s = sums[j + k];
        for (int64_t c = b[k] + n; c < b[k + 1]; ++c) s += v[c];
        sums[j + k] = s;
      }
    }
  }
#endif
  for (; j + 4 <= width; j += 4) {
    const int64_t b0 = run[j], b1 = run[j + 1], b2 = run[j + 2],
                  b3 = run[j + 3], e3 = run[j + 4];
    const int64_t n = std::min({b1 - b0, b2 - b1, b3 - b2, e3 - b3});
    double s0 = sums[j], s1 = sums[j + 1], s2 = sums[j + 2], s3 = sums[j + 3];
    for (int64_t k = 0; k < n; ++k) {
      s0 += v[b0 + k];
      s1 += v[b1 + k];
      s2 += v[b2 + k];
      s3 += v[b3 + k];
    }
    for (int64_t c = b0 + n; c < b1; ++c) s0 += v[c];
    for (int64_t c = b1 + n; c < b2; ++c) s1 += v[c];
    for (int64_t c = b2 + n; c < b3; ++c) s2 += v[c];
    for (int64_t c = b3 + n; c < e3; ++c) s3 += v[c];
    sums[j] = s0, sums[j + 1] = s1, sums[j + 2] = s2, sums[j + 3] = s3;
  }
  for (; j < width; ++j) {
    double s = sums[j];
    for (int64_t c = run[j]; c < run[j + 1]; ++c) s += v[c];
    sums[j] = s;
  }
}

// A cell's maximum with NaN kept: std::max keeps its left operand when
// either is NaN, so an accumulator that is NaN stays NaN but a NaN element
// would be dropped; the flag catches those, beside the max chain rather
// than in it (a select on isnan inside the chain ran 3-4 times slower).
struct MaxKeepingNaN {
  double acc;
  bool nan = false;
  void Add(double x) {
    acc = std::max(acc, x);
    nan |= std::isnan(x);
  }
  double Result() const {
    return nan ? std::numeric_limits<double>::quiet_NaN() : acc;
  }
};

// One element's error in steps (see Heatmap::values): NaN from a NaN, 0
// where source and decoded agree (inf - inf would be NaN), +inf where no
// finite step measures it.
inline double ErrorSteps(float source, const ElementQuant& q) {
  const double x = source, e = q.value;
  if (std::isnan(x) || std::isnan(e))
    return std::numeric_limits<double>::quiet_NaN();
  if (x == e) return 0;
  const double err = std::fabs(x - e);
  const double step = x > e ? q.step_above : q.step_below;
  return step > 0 && std::isfinite(err) ? err / step : INFINITY;
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
    const int64_t asked = d < o.leading.size() ? o.leading[d] : 0;
    // shape[d] > 0 here (the tensor is not empty): no overflow either way.
    const int64_t i = asked < 0 ? asked + t.shape[d] : asked;
    if (i < 0 || i >= t.shape[d]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "leading index ", asked, " is out of range for dimension ", d,
          " of size ", t.shape[d], " (valid: ", -t.shape[d], "..",
          t.shape[d] - 1, ", negative counting from the end)"));
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

  // Each cell's group, from its first element: ids alone, in one batch
  // (Inspect would decompose a million scalars to read one field of each).
  std::vector<int64_t> firsts(cells);
  for (int i = 0; i < h.height; ++i) {
    for (int j = 0; j < h.width; ++j) {
      firsts[static_cast<size_t>(i) * h.width + j] =
          base + h.row_edges[i] * h.cols + h.col_edges[j];
    }
  }
  absl::Status grouped = GuardedRead([&]() -> absl::Status {
    return t.encoding->GroupIds(firsts, h.groups.data());
  });
  if (!grouped.ok()) return grouped;

  // One decode of the region: the values alone, or with their steps for
  // error mode; the reference where it is compared. Where the region spans
  // whole rows, several rows of a cell's band come in one read (layouts
  // that pack codes down columns, GPTQ's, then use each cache line once
  // rather than once per row: 5x faster there); else a row at a time.
  const bool detailed = o.mode == HeatmapMode::kErrorSteps;
  const bool with_ref = ref != nullptr && (detailed || zeros);
  int64_t band = 1;  // the most rows a cell spans
  for (int i = 0; i < h.height; ++i)
    band = std::max(band, h.row_edges[i + 1] - h.row_edges[i]);
  const int64_t batch_rows =
      ncols == h.cols
          ? std::min(band, std::max<int64_t>(1, kBatchElements / ncols))
          : 1;
  const size_t buf = static_cast<size_t>(batch_rows * ncols);
  std::vector<ElementQuant> q(detailed ? buf : 0);
  std::vector<float> v(detailed ? 0 : buf);
  std::vector<float> x(with_ref ? buf : 0);
  // Column runs of the cells, relative to the region's first column.
  std::vector<int64_t> run(static_cast<size_t>(h.width) + 1);
  for (int j = 0; j <= h.width; ++j) run[j] = h.col_edges[j] - o.col_begin;
  if (o.mode != HeatmapMode::kGroup) {
    for (int i = 0; i < h.height; ++i) {
      double* const row_out =
          h.values.data() + static_cast<size_t>(i) * h.width;
      double* const row_pruned =
          h.pruned.empty() ? nullptr
                           : h.pruned.data() + static_cast<size_t>(i) * h.width;
      for (int64_t r = h.row_edges[i], nb = 0; r < h.row_edges[i + 1];
           r += nb) {
        nb = std::min(batch_rows, h.row_edges[i + 1] - r);
        const int64_t first = base + r * h.cols + o.col_begin;
        const int64_t count = nb * ncols;  // whole rows when nb > 1
        absl::Status read = GuardedRead([&]() -> absl::Status {
          TM_RETURN_IF_ERROR(
              detailed ? t.encoding->DecodeDetailed(first, count, q.data())
                       : t.encoding->Decode(first, count, v.data()));
          return with_ref ? DecodeMappedRows(*ref, o.ref_rows, first, count,
                                             x.data())
                          : absl::OkStatus();
        });
        if (!read.ok()) return read;
        for (int64_t k = 0; k < nb; ++k) {
          const size_t at = static_cast<size_t>(k * ncols);
          const float* const vr = v.empty() ? nullptr : v.data() + at;
          const ElementQuant* const qr = q.empty() ? nullptr : q.data() + at;
          const float* const xr = x.empty() ? nullptr : x.data() + at;
          // Per mode, each cell's run folded into a local accumulator in the
          // order the elements come (the mean's sum stays a sequence of
          // double additions, so results do not depend on this loop's shape).
          switch (o.mode) {
            case HeatmapMode::kMean:
              AccumulateSums(vr, run, row_out);
              break;
            case HeatmapMode::kAbsmax:
              for (int j = 0; j < h.width; ++j) {
                MaxKeepingNaN m{row_out[j]};
                for (int64_t c = run[j]; c < run[j + 1]; ++c)
                  m.Add(static_cast<double>(std::fabs(vr[c])));
                row_out[j] = m.Result();
              }
              break;
            case HeatmapMode::kErrorSteps:
              for (int j = 0; j < h.width; ++j) {
                MaxKeepingNaN m{row_out[j]};
                for (int64_t c = run[j]; c < run[j + 1]; ++c)
                  m.Add(ErrorSteps(xr[c], qr[c]));
                row_out[j] = m.Result();
              }
              break;
            case HeatmapMode::kZeros:
              for (int j = 0; j < h.width; ++j) {
                // Counts below 2^53 are exact in double, so counting in
                // integers and adding once gives the same sum.
                int64_t made = 0, pruned = 0;
                for (int64_t c = run[j]; c < run[j + 1]; ++c) {
                  if (vr[c] != 0) continue;
                  if (!with_ref || xr[c] != 0) {
                    ++made;
                  } else {
                    ++pruned;
                  }
                }
                row_out[j] += static_cast<double>(made);
                if (row_pruned != nullptr)
                  row_pruned[j] += static_cast<double>(pruned);
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
      // One NaN for every NaN cell: payloads and signs (x86's default NaN
      // is negative) depend on which operand carried it.
      if (std::isnan(h.values[k]))
        h.values[k] = std::numeric_limits<double>::quiet_NaN();
    }
  }
  // The finite range, chosen as std::minmax_element chooses among equals
  // (the first smallest, the last largest: +0 and -0 keep their bits).
  bool any_finite = false;
  for (const double v : h.values) {
    if (!std::isfinite(v)) continue;
    if (!any_finite) {
      h.min = h.max = v;
      any_finite = true;
      continue;
    }
    if (v < h.min) h.min = v;
    if (!(v < h.max)) h.max = v;
  }
  return h;
}

}  // namespace tensormorph
