#include "core/heatmap.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/error_runs.h"
#include "core/error_steps.h"
#include "core/io/fault_guard.h"
#include "core/quant/decode_simd.h"
#include "core/quant/float_steps.h"
#include "core/util/lane_sum.h"
#include "core/util/status_macros.h"
#include "core/view_2d.h"

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

// The mean's lanes (core/heatmap.h): the element at column offset k of its
// cell is added to partial sum k % kLanes of that cell, and the lanes are
// combined by SumOfLanes (core/util/lane_sum.h).
constexpr int kLanes = kSumLanes;

// Where a call's lanes come from and go to: `first` (the band's first
// batch of rows) starts them at +0.0 rather than loading them from `lanes`;
// `last` (its last batch) combines them into *sum by SumOfLanes rather than
// storing them back. A band read in one batch never touches `lanes`.
struct LaneEnds {
  bool first, last;
};

// One cell over `nrows` rows of `v` (each `stride` floats apart, the cell's
// `w` columns from v[0]): l[k % 16] += v[r * stride + k], row by row, left
// to right. The plain statement of the contract, and the path where the
// CPU (or the test cap) has no AVX2.
void CellLanesScalar(const float* v, int64_t stride, int64_t nrows, int64_t w,
                     LaneEnds ends, double* lanes, double* sum) {
  double l[kLanes] = {};
  if (!ends.first) std::copy(lanes, lanes + kLanes, l);
  for (int64_t r = 0; r < nrows; ++r) {
    const float* p = v + r * stride;
    for (int64_t k = 0; k < w; ++k) l[k % kLanes] += p[k];
  }
  if (ends.last) {
    *sum = SumOfLanes(l);
  } else {
    std::copy(l, l + kLanes, lanes);
  }
}

#if defined(__x86_64__)
// The same in four vectors of four lanes, each lane still its elements'
// additions in row-major order, rounded one at a time. A row's last w % 4
// columns come through a masked load whose other lanes read as +0.0: a lane
// sum starts at +0.0 and so is never -0.0 (+0 + -0 is +0 when rounding to
// nearest), and adding +0.0 to anything else leaves its bits as they are,
// so those adds change nothing.
struct LaneVectors {
  __m256d a0, a1, a2, a3;
};

__attribute__((target("avx2,fma"), always_inline)) inline LaneVectors
StartLanes(LaneEnds ends, const double* lanes) {
  if (ends.first) {
    const __m256d z = _mm256_setzero_pd();
    return {z, z, z, z};
  }
  return {_mm256_loadu_pd(lanes), _mm256_loadu_pd(lanes + 4),
          _mm256_loadu_pd(lanes + 8), _mm256_loadu_pd(lanes + 12)};
}

// Stores the lanes, or combines them: (a0 + a2) holds p[k] + p[k + 8] for
// k < 4 and (a1 + a3) for 4 <= k < 8; their sum q[k] + q[k + 4]; its halves
// added, r[k] + r[k + 2]; then the two: SumOfLanes' tree, addition for
// addition.
__attribute__((target("avx2,fma"), always_inline)) inline void EndLanes(
    const LaneVectors& l, LaneEnds ends, double* lanes, double* sum) {
  if (!ends.last) {
    _mm256_storeu_pd(lanes, l.a0);
    _mm256_storeu_pd(lanes + 4, l.a1);
    _mm256_storeu_pd(lanes + 8, l.a2);
    _mm256_storeu_pd(lanes + 12, l.a3);
    return;
  }
  const __m256d q =
      _mm256_add_pd(_mm256_add_pd(l.a0, l.a2), _mm256_add_pd(l.a1, l.a3));
  const __m128d r =
      _mm_add_pd(_mm256_castpd256_pd128(q), _mm256_extractf128_pd(q, 1));
  *sum = _mm_cvtsd_f64(_mm_add_sd(r, _mm_unpackhi_pd(r, r)));
}

// The shape of a cell's row: `whole` columns in 16s, then `quads` whole
// fours, then `tail` (0-3) columns through `mask`.
struct RowShape {
  int64_t whole;
  int quads, tail;
  __m128i mask;
};

__attribute__((target("avx2,fma"), always_inline)) inline RowShape ShapeOf(
    int64_t w) {
  const int rest = static_cast<int>(w % kLanes);
  const int tail = rest % 4;
  return {w - rest, rest / 4, tail,
          _mm_cmpgt_epi32(_mm_set1_epi32(tail), _mm_setr_epi32(0, 1, 2, 3))};
}

// acc + x rounded once, as _mm256_add_pd gives it, but as x * 1.0 + acc on
// the multiply-add units: the product is exact, so the fused operation
// rounds the same sum once. Conversions and additions otherwise share this
// CPU's two add pipes, and the conversion is the bound (measured: 15.6 G
// elements/s with additions, 18.9 with multiply-adds, from L1).
__attribute__((target("avx2,fma"), always_inline)) inline __m256d AddOnFma(
    __m256d acc, __m256d x) {
  return _mm256_fmadd_pd(x, _mm256_set1_pd(1.0), acc);
}

__attribute__((target("avx2,fma"), always_inline)) inline void AddRow(
    const float* p, const RowShape& s, LaneVectors& l) {
  for (int64_t k = 0; k < s.whole; k += kLanes) {
    l.a0 = AddOnFma(l.a0, _mm256_cvtps_pd(_mm_loadu_ps(p + k)));
    l.a1 = AddOnFma(l.a1, _mm256_cvtps_pd(_mm_loadu_ps(p + k + 4)));
    l.a2 = AddOnFma(l.a2, _mm256_cvtps_pd(_mm_loadu_ps(p + k + 8)));
    l.a3 = AddOnFma(l.a3, _mm256_cvtps_pd(_mm_loadu_ps(p + k + 12)));
  }
  if (s.quads == 0 && s.tail == 0) return;
  const float* q = p + s.whole;
  // The whole fours of the rest, then its tail into the next lane vector.
  if (s.quads >= 1) l.a0 = AddOnFma(l.a0, _mm256_cvtps_pd(_mm_loadu_ps(q)));
  if (s.quads >= 2) l.a1 = AddOnFma(l.a1, _mm256_cvtps_pd(_mm_loadu_ps(q + 4)));
  if (s.quads >= 3) l.a2 = AddOnFma(l.a2, _mm256_cvtps_pd(_mm_loadu_ps(q + 8)));
  if (s.tail == 0) return;
  const __m256d t = _mm256_cvtps_pd(_mm_maskload_ps(q + 4 * s.quads, s.mask));
  switch (s.quads) {
    case 0:
      l.a0 = AddOnFma(l.a0, t);
      break;
    case 1:
      l.a1 = AddOnFma(l.a1, t);
      break;
    case 2:
      l.a2 = AddOnFma(l.a2, t);
      break;
    default:
      l.a3 = AddOnFma(l.a3, t);
      break;
  }
}

__attribute__((target("avx2,fma"))) void CellLanesAvx2(
    const float* v, int64_t stride, int64_t nrows, int64_t w, LaneEnds ends,
    double* lanes, double* sum) {
  LaneVectors l = StartLanes(ends, lanes);
  const RowShape s = ShapeOf(w);
  for (int64_t r = 0; r < nrows; ++r) AddRow(v + r * stride, s, l);
  EndLanes(l, ends, lanes, sum);
}

// Two neighbouring cells of the same width at once (their lanes from
// `lanes` and `lanes + kLanes`, their sums sum[0] and sum[1]): eight
// independent chains rather than four, so the additions of one row need
// not wait for the previous row's.
__attribute__((target("avx2,fma"))) void CellPairLanesAvx2(
    const float* v, int64_t stride, int64_t nrows, int64_t w, LaneEnds ends,
    double* lanes, double* sum) {
  LaneVectors l = StartLanes(ends, lanes), m = StartLanes(ends, lanes + kLanes);
  const RowShape s = ShapeOf(w);
  for (int64_t r = 0; r < nrows; ++r) {
    AddRow(v + r * stride, s, l);
    AddRow(v + r * stride + w, s, m);
  }
  EndLanes(l, ends, lanes, sum);
  EndLanes(m, ends, lanes + kLanes, sum + 1);
}
#endif

#if defined(__x86_64__)
bool HasFma() {
  static const bool has = __builtin_cpu_supports("fma");
  return has;
}
#endif

// Every cell of `nrows` rows of `v` (`stride` floats apart): cell j covers
// columns [run[j], run[j + 1]), its lanes are lanes[16 j, 16 j + 16) and its
// sum, on the band's last batch, sums[j]. A cell's rows are taken together,
// so its lanes stay in registers down them.
void AccumulateLanes(const float* v, int64_t stride, int64_t nrows,
                     const std::vector<int64_t>& run, DecodeSimd simd,
                     LaneEnds ends, double* lanes, double* sums) {
  const size_t width = run.size() - 1;
  for (size_t j = 0; j < width; ++j) {
    const float* const p = v + run[j];
    const int64_t w = run[j + 1] - run[j];
    double* const l = lanes + j * kLanes;
#if defined(__x86_64__)
    if (simd >= DecodeSimd::kAvx2 && HasFma()) {
      if (j + 1 < width && run[j + 2] - run[j + 1] == w) {
        CellPairLanesAvx2(p, stride, nrows, w, ends, l, sums + j);
        ++j;
      } else {
        CellLanesAvx2(p, stride, nrows, w, ends, l, sums + j);
      }
      continue;
    }
#endif
    CellLanesScalar(p, stride, nrows, w, ends, l, sums + j);
  }
}

// Absmax a column at a time: |x|'s float bits (sign cleared) order as
// |x| does, +inf above every finite value and every NaN above +inf, so the
// largest bits of a cell are its largest |x|, +inf, or a NaN (made
// canonical at the end) exactly as heatmap.h states absmax; and a maximum
// is the same in any order. So each column's maximum is kept down a band's
// rows (colmax[c] = max(colmax[c], bits of |v[c]|), `n` columns, vectors
// where the CPU has AVX2) and each cell's taken from its columns once per
// band, not once per row.
void ColumnMaxScalar(const float* v, int64_t n, uint32_t* colmax) {
  for (int64_t c = 0; c < n; ++c) {
    const uint32_t a = std::bit_cast<uint32_t>(v[c]) & 0x7fffffffu;
    colmax[c] = std::max(colmax[c], a);
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void ColumnMaxAvx2(const float* v, int64_t n,
                                                   uint32_t* colmax) {
  const __m256i mask = _mm256_set1_epi32(0x7fffffff);
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const __m256i a = _mm256_and_si256(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + c)), mask);
    __m256i* const m = reinterpret_cast<__m256i*>(colmax + c);
    _mm256_storeu_si256(m, _mm256_max_epu32(_mm256_loadu_si256(m), a));
  }
  ColumnMaxScalar(v + c, n - c, colmax + c);
}
#endif

void ColumnMax(const float* v, int64_t n, DecodeSimd simd, uint32_t* colmax) {
#if defined(__x86_64__)
  if (simd >= DecodeSimd::kAvx2) {
    ColumnMaxAvx2(v, n, colmax);
    return;
  }
#endif
  ColumnMaxScalar(v, n, colmax);
}

// One element's error in steps (see Heatmap::values): the definition every
// view shares (core/error_steps.h).
inline double ErrorSteps(float source, const ElementQuant& q) {
  return ElementErrorSteps(source, q.value, q.step_below, q.step_above);
}

// One row of a cell's elements folded into the cell's maximum and the
// element giving it (heatmap.h's cell_element): strictly larger replaces,
// so ties keep the first in row-major order; the first NaN ends the cell.
// `err(c)` is column c's value (error in steps, or |value| as double),
// `index0` the flat index of column 0.
template <typename ValueOf>
void LocateRow(int64_t begin, int64_t end, int64_t index0, ValueOf value_of,
               double* out, int64_t* element) {
  if (std::isnan(*out)) return;  // found in an earlier row
  for (int64_t c = begin; c < end; ++c) {
    const double e = value_of(c);
    if (std::isnan(e)) {
      *out = e;
      *element = index0 + c;
      return;
    }
    if (*element < 0 || e > *out) {
      *out = e;
      *element = index0 + c;
    }
  }
}

// Error mode's cells from a grid of the view's errors: each cell's maximum,
// NaN kept, and with `locate` the element giving it, as the decoding path
// states them (LocateRow row by row, the same order). Without locate, a
// band's column maxima first (in vectors; ErrorColumns), then each cell's
// from its columns, as the plain floats' decoding path does.
void CellsFromGrid(const ErrorGrid& g, bool locate, Heatmap* h) {
  const DecodeSimd simd = ActiveDecodeSimd();
  const int64_t col0 = h->col_edges.front();
  const int64_t ncols = h->col_edges.back() - col0;
  ErrorColumns columns;
  for (int i = 0; i < h->height; ++i) {
    double* const row_out =
        h->values.data() + static_cast<size_t>(i) * h->width;
    if (!locate) columns.Reset(ncols);
    for (int64_t r = h->row_edges[i]; r < h->row_edges[i + 1]; ++r) {
      const int64_t at = r * g.view.cols + col0;  // index in the view
      if (locate) {
        for (int j = 0; j < h->width; ++j) {
          LocateRow(
              h->col_edges[j] - col0, h->col_edges[j + 1] - col0,
              g.view.base + at, [&](int64_t c) { return g.At(at + c); },
              row_out + j,
              &h->cell_element[static_cast<size_t>(i) * h->width + j]);
        }
        continue;
      }
      if (g.f64 != nullptr) {
        columns.FoldDoubles(g.f64.get() + at, ncols, simd);
      } else if (columns.FoldFloats(g.f32.get() + at, ncols, simd)) {
        for (int64_t c = 0; c < ncols; ++c) {
          if (g.f32[at + c] != g.f32[at + c]) columns.FoldOne(c, g.At(at + c));
        }
      }
    }
    if (locate) continue;
    for (int j = 0; j < h->width; ++j) {
      MaxKeepingNaN m{row_out[j]};
      columns.FoldInto(h->col_edges[j] - col0, h->col_edges[j + 1] - col0, &m);
      row_out[j] = m.Result();
    }
  }
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
  if (o.locate && o.mode != HeatmapMode::kErrorSteps &&
      o.mode != HeatmapMode::kAbsmax) {
    return absl::InvalidArgumentError(absl::StrCat(
        "locating each cell's element needs error or absmax mode, not mode ",
        static_cast<int>(o.mode)));
  }
  if (o.errors != nullptr && o.mode != HeatmapMode::kErrorSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("an error grid serves error mode, not mode ",
                     static_cast<int>(o.mode)));
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
  TM_ASSIGN_OR_RETURN(const View2D view, ViewOf(t, o.leading));
  const int64_t base = view.base;  // flat offset of the view
  if (o.errors != nullptr &&
      (o.errors->view.base != base || o.errors->view.rows != h.rows ||
       o.errors->view.cols != h.cols ||
       (o.errors->f32 == nullptr && o.errors->f64 == nullptr))) {
    return absl::InvalidArgumentError(
        absl::StrCat("the error grid is of another view (", o.errors->view.rows,
                     " x ", o.errors->view.cols, " from element ",
                     o.errors->view.base, ") than the heatmap's (", h.rows,
                     " x ", h.cols, " from element ", base, ")"));
  }
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
  if (o.locate) h.cell_element.assign(cells, -1);

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
  const bool error = o.mode == HeatmapMode::kErrorSteps;
  const bool with_ref = ref != nullptr && (error || zeros);
  // Plain floats' steps come from their values (a table lookup), rather
  // than from inspecting each element: the F16 error heatmap's cost was
  // nearly all that inspection.
  const FloatStepTable* const float_steps =
      error ? t.encoding->PlainFloatSteps() : nullptr;
  const bool detailed = error && float_steps == nullptr;
  std::optional<PlainFloatErrors> plain;
  if (float_steps != nullptr) plain.emplace(*float_steps, ActiveDecodeSimd());
  // A float32 source of plain floats' errors, without a row map, is read
  // where it is mapped rather than copied (a third of the F16 error
  // heatmap's time was that copy).
  const float* const ref_in_place = plain && !o.locate && o.ref_rows.empty()
                                        ? ref->encoding->StoredF32()
                                        : nullptr;
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
  std::vector<float> x(with_ref && ref_in_place == nullptr ? buf : 0);
  // Column runs of the cells, relative to the region's first column.
  std::vector<int64_t> run(static_cast<size_t>(h.width) + 1);
  for (int j = 0; j <= h.width; ++j) run[j] = h.col_edges[j] - o.col_begin;
  // The mean's partial sums of one band of cells (heatmap.h's lanes), where
  // a band takes more than one batch of rows.
  const bool mean = o.mode == HeatmapMode::kMean;
  const DecodeSimd simd = ActiveDecodeSimd();
  std::vector<double> lanes(mean ? static_cast<size_t>(h.width) * kLanes : 0);
  // Absmax's column maxima of one band (ColumnMax).
  const bool absmax = o.mode == HeatmapMode::kAbsmax;
  std::vector<uint32_t> colmax(absmax ? static_cast<size_t>(ncols) : 0);
  // Plain floats' errors the same way (PlainFloatErrors::FoldColumns).
  const bool column_errors = plain.has_value() && !o.locate;
  ErrorColumns colerr;
  if (o.errors != nullptr) {
    CellsFromGrid(*o.errors, o.locate, &h);
  } else if (o.mode != HeatmapMode::kGroup) {
    for (int i = 0; i < h.height; ++i) {
      double* const row_out =
          h.values.data() + static_cast<size_t>(i) * h.width;
      double* const row_pruned =
          h.pruned.empty() ? nullptr
                           : h.pruned.data() + static_cast<size_t>(i) * h.width;
      std::fill(colmax.begin(), colmax.end(), 0u);
      if (column_errors) colerr.Reset(ncols);
      int64_t* const row_element =
          h.cell_element.empty()
              ? nullptr
              : h.cell_element.data() + static_cast<size_t>(i) * h.width;
      for (int64_t r = h.row_edges[i], nb = 0; r < h.row_edges[i + 1];
           r += nb) {
        if (o.cancelled && o.cancelled()) {
          return absl::CancelledError(
              absl::StrCat("heatmap of '", t.name, "' cancelled at band ", i,
                           " of ", h.height, " (row ", r, ")"));
        }
        nb = std::min(batch_rows, h.row_edges[i + 1] - r);
        const int64_t first = base + r * h.cols + o.col_begin;
        const int64_t count = nb * ncols;  // whole rows when nb > 1
        absl::Status read = GuardedRead([&]() -> absl::Status {
          TM_RETURN_IF_ERROR(
              detailed ? t.encoding->DecodeDetailed(first, count, q.data())
                       : t.encoding->Decode(first, count, v.data()));
          return with_ref && ref_in_place == nullptr
                     ? DecodeMappedRows(*ref, o.ref_rows, first, count,
                                        x.data())
                     : absl::OkStatus();
        });
        if (!read.ok()) return read;
        if (mean) {
          const LaneEnds ends{r == h.row_edges[i],
                              r + nb == h.row_edges[i + 1]};
          AccumulateLanes(v.data(), ncols, nb, run, simd, ends, lanes.data(),
                          row_out);
          continue;
        }
        if (column_errors) {
          // Row k of the batch: the source where it is mapped (h.cols
          // after row k - 1; read under GuardedRead, as a decode is), or
          // as decoded into x.
          TM_RETURN_IF_ERROR(GuardedRead([&]() -> absl::Status {
            for (int64_t k = 0; k < nb; ++k) {
              const float* const xr = ref_in_place != nullptr
                                          ? ref_in_place + first + k * h.cols
                                          : x.data() + k * ncols;
              plain->FoldColumns(xr, v.data() + k * ncols, ncols, &colerr);
            }
            return absl::OkStatus();
          }));
          continue;
        }
        for (int64_t k = 0; k < nb; ++k) {
          const size_t at = static_cast<size_t>(k * ncols);
          const float* const vr = v.empty() ? nullptr : v.data() + at;
          const ElementQuant* const qr = q.empty() ? nullptr : q.data() + at;
          const float* const xr = x.empty() ? nullptr : x.data() + at;
          if (row_element != nullptr) {
            // The row's flat index at the region's first column.
            const int64_t index0 = base + (r + k) * h.cols + o.col_begin;
            for (int j = 0; j < h.width; ++j) {
              if (absmax) {
                LocateRow(
                    run[j], run[j + 1], index0,
                    [vr](int64_t c) { return std::fabs(double{vr[c]}); },
                    row_out + j, row_element + j);
              } else if (float_steps != nullptr) {
                LocateRow(
                    run[j], run[j + 1], index0,
                    [&](int64_t c) {
                      return PlainFloatErrorSteps(xr[c], vr[c], *float_steps);
                    },
                    row_out + j, row_element + j);
              } else {
                LocateRow(
                    run[j], run[j + 1], index0,
                    [&](int64_t c) { return ErrorSteps(xr[c], qr[c]); },
                    row_out + j, row_element + j);
              }
            }
            continue;
          }
          // Per mode, each cell's run folded into a local accumulator in the
          // order the elements come.
          switch (o.mode) {
            case HeatmapMode::kMean:  // above, a band at a time
              break;
            case HeatmapMode::kAbsmax:  // the cells at the band's end
              ColumnMax(vr, ncols, simd, colmax.data());
              break;
            case HeatmapMode::kErrorSteps:
              // Plain floats come by columns (above); these are inspected.
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
      if (column_errors) {
        for (int j = 0; j < h.width; ++j) {
          MaxKeepingNaN m{row_out[j]};
          colerr.FoldInto(run[j], run[j + 1], &m);
          row_out[j] = m.Result();
        }
      }
      if (absmax && row_element == nullptr) {
        for (int j = 0; j < h.width; ++j) {
          uint32_t m = 0;
          for (int64_t c = run[j]; c < run[j + 1]; ++c)
            m = std::max(m, colmax[c]);
          row_out[j] = static_cast<double>(std::bit_cast<float>(m));
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
