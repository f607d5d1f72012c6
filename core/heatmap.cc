#include "core/heatmap.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "core/error_runs.h"
#include "core/error_steps.h"
#include "core/heatmap_lanes.h"
#include "core/heatmap_q4k.h"
#include "core/heatmap_q8.h"
#include "core/heatmap_sq_error.h"
#include "core/io/fault_guard.h"
#include "core/quant/decode_simd.h"
#include "core/quant/float_formats.h"
#include "core/quant/float_steps.h"
#include "core/util/error_reason.h"
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

// Elements a batched read of whole rows decodes at once (256 KiB of
// floats): the mean's lanes read a batch back down its columns, and from a
// quarter of a MiB they did so faster than from a whole one (perf, Q4_K
// 4096 x 4096: lanes 1.64 ms against 1.83, the decode no slower), while a
// batch still holds several of GPTQ's packed rows of codes.
constexpr int64_t kBatchElements = int64_t{1} << 16;
// A pass holds at least one row of its region in each of its buffers
// (values, their details or the reference, column maxima, weights): about
// 50 bytes a column at most, so 4M columns cost ~200 MB of one worker.
constexpr int64_t kMaxRegionColumns = int64_t{1} << 22;

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
    return RequestFieldError(
        what, absl::StrCat("heatmap region ", what, " [", begin, ", ",
                           asked_end, asked_end == 0 ? " (= to the end)" : "",
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

// A stored bfloat16 code, as a type of its own so that the lanes' kernels
// widen it as bfloat16 (EightFloats), not as float16.
struct BF16Code {
  uint16_t bits;
};

#if defined(__x86_64__)
// GCC 12's AVX-512 conversions and extracts pass _mm512_undefined_*(), a
// self-initialised variable that -W(maybe-)uninitialized reports inside the
// intrinsics' header (as decode_simd.cc notes).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// The columns one call of CellBlockAvx512 covers: 128 / W cells of W.
constexpr int kBlockColumns = 128;

// Eight elements as floats: float32 as stored, or F16 codes converted
// exactly (as DecodeF16Simd converts them).
__attribute__((target("avx512f,f16c"), always_inline)) inline __m256
EightFloats(const float* p) {
  return _mm256_loadu_ps(p);
}
__attribute__((target("avx512f,f16c"), always_inline)) inline __m256
EightFloats(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// BF16 codes widened as the decoder widens them: the code in a float's top
// 16 bits.
__attribute__((target("avx512f,f16c"), always_inline)) inline __m256
EightFloats(const BF16Code* p) {
  const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(codes), 16));
}

// 128 / W neighbouring cells of W columns each (W 16, 32 or 64: a row of
// every cell in whole sixteens), their lanes in 2 * 128 / W vectors of
// eight (cell c's lanes 0-7 and 8-15) that stay in registers down the
// band's rows. Each row is one run of 128 elements, read in order, where the
// pair kernels above read 16 rows apart cell by cell; and one call covers
// a band's rows for eight cells of 16 where the pairs pay a call per two.
// The additions are the scalar statement's: the eight floats at column
// offset 8i of the run are cell 8i / W's offsets 8i % W onward, whose lane
// is their offset mod 16, so they go to vector 2 (8i / W) + i % 2, and a
// lane's elements come row by row, left to right. `lanes` and `sums` are
// the first cell's (as CellLanesScalar's), the others' following.
template <int W, typename T>
__attribute__((target("avx512f,f16c"))) void CellBlockAvx512(
    const T* v, int64_t stride, int64_t nrows, LaneEnds ends, double* lanes,
    double* sums) {
  constexpr int kCells = kBlockColumns / W;
  __m512d a[2 * kCells];
  for (int c = 0; c < 2 * kCells; ++c) {
    a[c] = ends.first ? _mm512_setzero_pd() : _mm512_loadu_pd(lanes + 8 * c);
  }
  const __m512d one = _mm512_set1_pd(1.0);
  for (int64_t r = 0; r < nrows; ++r) {
    const T* const p = v + r * stride;
#pragma GCC unroll 16
    for (int i = 0; i < kBlockColumns / 8; ++i) {
      // acc + x rounded once, on the multiply-add units (AddOnFma).
      const int k = 2 * (8 * i / W) + i % 2;
      a[k] =
          _mm512_fmadd_pd(_mm512_cvtps_pd(EightFloats(p + 8 * i)), one, a[k]);
    }
  }
  ::tensormorph::EndLanes(ends.last, a, lanes, sums,
                          std::make_integer_sequence<int, kCells>());
}

// Cells j.. of AccumulateLanes through CellBlockAvx512 when the next
// 128 / w of them all span w columns, w one of its widths: how many cells
// it took, or 0.
template <typename T>
int CellBlockLanes(const T* v, int64_t stride, int64_t nrows,
                   const std::vector<int64_t>& run, size_t j, LaneEnds ends,
                   double* lanes, double* sums) {
  const int64_t w = run[j + 1] - run[j];
  if (w != 16 && w != 32 && w != 64) return 0;
  const size_t cells = static_cast<size_t>(kBlockColumns / w);
  if (j + cells >= run.size()) return 0;
  for (size_t c = j + 1; c < j + cells; ++c) {
    if (run[c + 1] - run[c] != w) return 0;
  }
  const T* const p = v + run[j];
  double* const l = lanes + j * kLanes;
  switch (w) {
    case 16:
      CellBlockAvx512<16, T>(p, stride, nrows, ends, l, sums + j);
      break;
    case 32:
      CellBlockAvx512<32, T>(p, stride, nrows, ends, l, sums + j);
      break;
    default:
      CellBlockAvx512<64, T>(p, stride, nrows, ends, l, sums + j);
      break;
  }
  return static_cast<int>(cells);
}

// Whether CellBlockLanes takes every cell of `run`: all of one width it
// handles, in whole blocks.
bool AllInBlocks(const std::vector<int64_t>& run) {
  return CellsInWholeChunks(run, kBlockColumns);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#define TM_AVX2_STEP \
  __attribute__((target("avx2,fma,f16c"), always_inline)) inline

// Four elements as doubles (EightFloats' conversions, then widened).
TM_AVX2_STEP __m256d FourDoubles(const float* p) {
  return _mm256_cvtps_pd(_mm_loadu_ps(p));
}
TM_AVX2_STEP __m256d FourDoubles(const uint16_t* p) {
  return _mm256_cvtps_pd(
      _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
TM_AVX2_STEP __m256d FourDoubles(const BF16Code* p) {
  const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtps_pd(
      _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(codes), 16)));
}

// CellBlockAvx512 in AVX2's sixteen registers: 32 columns a call for cells
// of 16 or 32 (eight or four vectors of four lanes), 64 for a cell of 64
// (four). The four elements at column offset 4 G go to vector
// 4 (4 G / W) + G % 4, row by row, left to right.
template <int W, typename T, int... G>
TM_AVX2_STEP void AddBlockRowAvx2(const T* p, __m256d* a,
                                  std::integer_sequence<int, G...>) {
  const __m256d one = _mm256_set1_pd(1.0);
  ((a[4 * (4 * G / W) + G % 4] = _mm256_fmadd_pd(FourDoubles(p + 4 * G), one,
                                                 a[4 * (4 * G / W) + G % 4])),
   ...);
}

template <int W, typename T>
__attribute__((target("avx2,fma,f16c"))) void CellBlockAvx2(
    const T* v, int64_t stride, int64_t nrows, LaneEnds ends, double* lanes,
    double* sums) {
  constexpr int kColumns = W == 64 ? 64 : 32;
  constexpr int kCells = kColumns / W;
  __m256d a[4 * kCells];
  ::tensormorph::StartLanes(ends.first, lanes, a,
                            std::make_integer_sequence<int, 4 * kCells>());
  for (int64_t r = 0; r < nrows; ++r) {
    AddBlockRowAvx2<W>(v + r * stride, a,
                       std::make_integer_sequence<int, kColumns / 4>());
  }
  ::tensormorph::EndLanes(ends.last, a, lanes, sums,
                          std::make_integer_sequence<int, kCells>());
}

#undef TM_AVX2_STEP

// AccumulateLanes for float32 values, F16 (uint16_t) or BF16 (BF16Code)
// codes read where they are stored, `stride` elements apart: no staging
// buffer and no decode pass before the lanes, the conversion to double
// being the lanes' own. REQUIRES: AllInBlocks(run), and AVX-512, or AVX2
// with FMA (HasFma).
template <typename Code>
void AccumulateLanesCodes(const Code* v, int64_t stride, int64_t nrows,
                          const std::vector<int64_t>& run, DecodeSimd simd,
                          LaneEnds ends, double* lanes, double* sums) {
  if (simd >= DecodeSimd::kAvx512) {
    for (size_t j = 0; j + 1 < run.size();)
      j += CellBlockLanes(v, stride, nrows, run, j, ends, lanes, sums);
    return;
  }
  const int64_t w = run[1] - run[0];
  const size_t step = static_cast<size_t>(std::max<int64_t>(w, 32) / w);
  for (size_t j = 0; j + 1 < run.size(); j += step) {
    const Code* const p = v + run[j];
    double* const l = lanes + j * kLanes;
    switch (w) {
      case 16:
        CellBlockAvx2<16>(p, stride, nrows, ends, l, sums + j);
        break;
      case 32:
        CellBlockAvx2<32>(p, stride, nrows, ends, l, sums + j);
        break;
      default:
        CellBlockAvx2<64>(p, stride, nrows, ends, l, sums + j);
        break;
    }
  }
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
    if (simd >= DecodeSimd::kAvx512) {
      const int took =
          CellBlockLanes(v, stride, nrows, run, j, ends, lanes, sums);
      if (took > 0) {
        j += took - 1;
        continue;
      }
    }
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

#if defined(__x86_64__)
// The larger of two vectors of codes, lane by lane, unsigned: float32 bits
// (eight to a vector) or F16 codes (sixteen).
template <typename Code>
__attribute__((target("avx2"), always_inline)) inline __m256i MaxCodes(
    __m256i a, __m256i b) {
  if constexpr (sizeof(Code) == 4) {
    return _mm256_max_epu32(a, b);
  } else {
    return _mm256_max_epu16(a, b);
  }
}

// `nrows` rows of `n` columns (`stride` elements apart) into colmax, with
// their sign bits cleared: floats as their bits (colmax of uint32_t) or F16
// codes (of uint16_t). 64 columns at a time down all the rows: their maxima
// stay in registers, so colmax is loaded and stored once per batch of rows
// rather than per row (the store per eight elements bounded absmax at 0.4x a
// Q4_K decode). The last n % 64 columns go row by row.
template <typename In, typename Code>
__attribute__((target("avx2"))) void ColumnMaxRowsOf(const In* v,
                                                     int64_t stride,
                                                     int64_t nrows, int64_t n,
                                                     Code* colmax) {
  static_assert(sizeof(In) == sizeof(Code));
  constexpr int kVectors = 64 * sizeof(Code) / 32;
  const __m256i mask = sizeof(Code) == 4 ? _mm256_set1_epi32(0x7fffffff)
                                         : _mm256_set1_epi16(0x7fff);
  int64_t c = 0;
  for (; c + 64 <= n; c += 64) {
    __m256i m[kVectors];
    for (int i = 0; i < kVectors; ++i) {
      m[i] =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(colmax + c) + i);
    }
    for (int64_t r = 0; r < nrows; ++r) {
      const __m256i* const p =
          reinterpret_cast<const __m256i*>(v + r * stride + c);
      for (int i = 0; i < kVectors; ++i) {
        m[i] = MaxCodes<Code>(
            m[i], _mm256_and_si256(_mm256_loadu_si256(p + i), mask));
      }
    }
    for (int i = 0; i < kVectors; ++i)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(colmax + c) + i, m[i]);
  }
  if (c == n) return;
  for (int64_t r = 0; r < nrows; ++r) {
    if constexpr (std::is_same_v<In, float>) {
      ColumnMaxAvx2(v + r * stride + c, n - c, colmax + c);
    } else {
      for (int64_t k = c; k < n; ++k) {
        colmax[k] = std::max<uint16_t>(colmax[k], v[r * stride + k] & 0x7fff);
      }
    }
  }
}
#endif

// ColumnMaxScalar of each of `nrows` rows (`stride` floats apart), in
// vectors where the CPU has AVX2.
void ColumnMaxRows(const float* v, int64_t stride, int64_t nrows, int64_t n,
                   DecodeSimd simd, uint32_t* colmax) {
#if defined(__x86_64__)
  if (simd >= DecodeSimd::kAvx2) {
    ColumnMaxRowsOf(v, stride, nrows, n, colmax);
    return;
  }
#endif
  for (int64_t r = 0; r < nrows; ++r)
    ColumnMaxScalar(v + r * stride, n, colmax);
}

#if defined(__x86_64__)
// ColumnMaxRows of F16 codes read where they are stored: |x|'s half bits
// (sign cleared) order as |x| does, as a float's do, so each column's
// largest half bits are its largest |x|, +inf or a NaN; converted to float
// once per cell at the band's end (F16ToF32), never per element.
void ColumnMaxRowsF16Avx2(const uint16_t* v, int64_t stride, int64_t nrows,
                          int64_t n, uint16_t* colmax) {
  ColumnMaxRowsOf(v, stride, nrows, n, colmax);
}
#endif

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

// The region a heatmap covers, resolved from its options: view rows
// [row_begin, row_end) and columns [col_begin, col_end) of the view that
// starts at flat element `base`.
struct Region {
  int64_t base = 0;
  int64_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
  int64_t ncols() const { return col_end - col_begin; }
};

// Weights only in squared-error mode, and sized for `t` as MatchImatrix
// sizes them: RegionPass copies the region's columns of its expert's run
// of `columns`, with no bounds of its own.
absl::Status CheckWeights(const LogicalTensor& t, const HeatmapOptions& o) {
  if (o.weights == nullptr) return absl::OkStatus();
  if (o.mode != HeatmapMode::kSqError) {
    return RequestFieldError(
        "weights", absl::StrCat("importance weights serve squared-error mode, "
                                "not mode ",
                                static_cast<int>(o.mode)));
  }
  const std::vector<int64_t>& s = t.shape;
  const TensorWeights& w = *o.weights;
  const bool fits = w.weights != nullptr && (s.size() == 2 || s.size() == 3) &&
                    w.columns == s.back() &&
                    w.expert_elements == s[s.size() - 2] * s.back();
  if (!fits) {
    return RequestFieldError(
        "weights",
        absl::StrCat("importance weights of ", w.columns, " columns and ",
                     w.expert_elements, " elements per expert do not fit '",
                     t.name, "' of shape [", absl::StrJoin(s, ", "), "]"));
  }
  return absl::OkStatus();
}

// The options' combinations no mode takes (heatmap.h's errors).
absl::Status CheckModeOptions(const LogicalTensor& t, const LogicalTensor* ref,
                              const HeatmapOptions& o) {
  if (t.shape.empty())
    return RequestFieldError("tensor", "a rank-0 tensor has no 2-D view");
  if (o.mode == HeatmapMode::kErrorSteps && ref == nullptr) {
    return RequestFieldError("ref", "error mode needs a reference (--ref)");
  }
  if (o.mode == HeatmapMode::kSqError && ref == nullptr) {
    return RequestFieldError("ref",
                             "squared-error mode needs a reference (--ref)");
  }
  TM_RETURN_IF_ERROR(CheckWeights(t, o));
  if (o.locate && o.mode != HeatmapMode::kErrorSteps &&
      o.mode != HeatmapMode::kAbsmax) {
    return RequestFieldError(
        "locate",
        absl::StrCat(
            "locating each cell's element needs error or absmax mode, not "
            "mode ",
            static_cast<int>(o.mode)));
  }
  if (o.errors != nullptr && o.mode != HeatmapMode::kErrorSteps) {
    return RequestFieldError(
        "mode", absl::StrCat("an error grid serves error mode, not mode ",
                             static_cast<int>(o.mode)));
  }
  return CheckReference(t, ref, o.ref_rows);
}

// Resolves the region on a non-empty tensor (h->rows and h->cols set), checks
// an error grid against its view, and lays out the cells: edges, and values,
// groups, pruned and cell_element at their starting values.
absl::StatusOr<Region> LayOutCells(const LogicalTensor& t,
                                   const HeatmapOptions& o, Heatmap* h) {
  Region g;
  g.row_begin = o.row_begin;
  g.col_begin = o.col_begin;
  g.row_end = o.row_end;
  g.col_end = o.col_end;
  TM_RETURN_IF_ERROR(
      ResolveRange("rows", g.row_begin, &g.row_end, h->rows, *h));
  TM_RETURN_IF_ERROR(
      ResolveRange("cols", g.col_begin, &g.col_end, h->cols, *h));
  const int64_t nrows = g.row_end - g.row_begin, ncols = g.ncols();
  TM_ASSIGN_OR_RETURN(const View2D view, ViewOf(t, o.leading));
  g.base = view.base;
  if (o.errors != nullptr &&
      (o.errors->view.base != g.base || o.errors->view.rows != h->rows ||
       o.errors->view.cols != h->cols ||
       (o.errors->f32 == nullptr && o.errors->f64 == nullptr))) {
    return RequestFieldError(
        "errors",
        absl::StrCat("the error grid is of another view (", o.errors->view.rows,
                     " x ", o.errors->view.cols, " from element ",
                     o.errors->view.base, ") than the heatmap's (", h->rows,
                     " x ", h->cols, " from element ", g.base, ")"));
  }
  h->height = static_cast<int>(std::clamp<int64_t>(o.height, 1, nrows));
  h->width = static_cast<int>(std::clamp<int64_t>(o.width, 1, ncols));
  for (int i = 0; i <= h->height; ++i)
    h->row_edges.push_back(Edge(g.row_begin, nrows, h->height, i));
  for (int j = 0; j <= h->width; ++j)
    h->col_edges.push_back(Edge(g.col_begin, ncols, h->width, j));
  const size_t cells = static_cast<size_t>(h->width) * h->height;
  const bool sums = o.mode == HeatmapMode::kMean ||
                    o.mode == HeatmapMode::kZeros ||
                    o.mode == HeatmapMode::kSqError;
  h->values.assign(cells,
                   sums ? 0.0 : -std::numeric_limits<double>::infinity());
  h->groups.assign(cells, -1);
  if (o.locate) h->cell_element.assign(cells, -1);
  return g;
}

// Each cell's group, from its first element: ids alone (Inspect would
// decompose a million scalars to read one field of each), up to 16 Ki cells
// a call: each GuardedRead saves the signal mask (a system call), and a
// million firsts at once would be 8 MB to allocate.
absl::Status CellGroups(const LogicalTensor& t, int64_t base, Heatmap* h) {
  constexpr size_t kChunk = size_t{1} << 14;
  const size_t cells = h->groups.size();
  std::vector<int64_t> firsts(std::min(cells, kChunk));
  for (size_t k0 = 0; k0 < cells; k0 += kChunk) {
    const size_t n = std::min(kChunk, cells - k0);
    // Cell k0's band and column, then on cell by cell.
    int64_t i = static_cast<int64_t>(k0 / h->width);
    int64_t j = static_cast<int64_t>(k0 % h->width);
    for (size_t k = 0; k < n; ++k) {
      firsts[k] = base + h->row_edges[i] * h->cols + h->col_edges[j];
      if (++j == h->width) j = 0, ++i;
    }
    const absl::Span<const int64_t> span(firsts.data(), n);
    int64_t* const out = h->groups.data() + k0;
    TM_RETURN_IF_ERROR(GuardedRead(
        [&]() -> absl::Status { return t.encoding->GroupIds(span, out); }));
  }
  return absl::OkStatus();
}

// The decoded values of this thread's heatmaps, kept from call to call
// (at most kBatchElements floats) rather than allocated, zeroed and
// returned to the kernel by every call. Not zeroed: a pass reads only what
// it decoded.
// Null when n > kBatchElements: a longer row's pass owns its buffer, freed
// with it (a thread keeps its scratch for life, and it once grew to a
// 2^30-element row's 4 GiB).
float* DecodeScratch(size_t n) {
  thread_local std::unique_ptr<float[]> buf;
  if (buf == nullptr) buf.reset(new float[kBatchElements]);
  return n <= static_cast<size_t>(kBatchElements) ? buf.get() : nullptr;
}

// One decode of the region, batch by batch of rows, each batch folded into
// every band of cells (the rows of one row of cells) it meets: the values
// alone, or with their steps for error mode; the reference where it is
// compared. Where the region spans whole rows, a batch is up to
// kBatchElements of them whatever the bands: short bands share a read
// (layouts that pack codes down columns and group them by rows, GPTQ's,
// decode a group's tile once rather than once per band, and every format
// pays one call per batch), and a tall band spans reads,
// its state kept between them (the mean's lanes, absmax's column maxima,
// plain floats' column errors). Else a row at a time.
class RegionPass {
 public:
  RegionPass(const LogicalTensor& t, const LogicalTensor* ref,
             const HeatmapOptions& o, const Region& g, Heatmap* h);
  absl::Status Run();

 private:
  absl::Status Read(int64_t r, int64_t nb);
  void StartBand();
  absl::Status FoldRows(int64_t r, int64_t k0, int64_t nk);
  void FoldRow(int64_t r, int64_t k);
  const float* SourceRow(int64_t r, int64_t k) const;
  void EndBand();
  double* Out(std::vector<double>& cells) const {
    return cells.data() + static_cast<size_t>(band_) * h_.width;
  }

  const LogicalTensor& t_;
  const LogicalTensor* const ref_;
  const HeatmapOptions& o_;
  const Region g_;
  Heatmap& h_;
  const DecodeSimd simd_ = ActiveDecodeSimd();
  const bool mean_, absmax_, error_, zeros_, sq_error_, with_ref_;
  // Plain floats' steps come from their values (a table lookup), rather
  // than from inspecting each element: the F16 error heatmap's cost was
  // nearly all that inspection.
  const FloatStepTable* const float_steps_;
  const bool detailed_;
  std::optional<PlainFloatErrors> plain_;
  // A float32 source of plain floats' errors or of squared errors, without
  // a row map, is read where it is mapped rather than copied (a third of the
  // F16 error heatmap's time was that copy).
  const float* ref_in_place_ = nullptr;
  // F16 codes where they are stored, for the mean's lanes to read without
  // a decode (AccumulateLanesF16); nullptr otherwise.
  const uint16_t* f16_in_place_ = nullptr;
  // The same for the mean of BF16 codes (EightFloats widens them), and of
  // float32 values stored as such (a copy was half of F32's mean at AVX2).
  const BF16Code* bf16_in_place_ = nullptr;
  const float* f32_in_place_ = nullptr;
  // Q4_K blocks where they are stored, for the mean's lanes to sum from
  // their codes (Q4KMeanLanes) and absmax's column maxima to take from them
  // (Q4KColumnMax); nullptr otherwise.
  const uint8_t* q4k_in_place_ = nullptr;
  // Q8_0 blocks where they are stored, the same (Q8MeanLanes, Q8ColumnMax).
  const uint8_t* q8_in_place_ = nullptr;
  // Whether FoldRows reads the values where they are stored (no decode).
  bool InPlace() const {
    return f16_in_place_ != nullptr || bf16_in_place_ != nullptr ||
           f32_in_place_ != nullptr || q4k_in_place_ != nullptr ||
           q8_in_place_ != nullptr;
  }
  bool column_errors_ = false;  // plain floats' errors by columns
  int64_t batch_rows_ = 1;
  int band_ = 0;  // the band being folded
  std::vector<ElementQuant> q_;
  float* v_ = nullptr;       // DecodeScratch or wide_, unless detailed_
  std::vector<float> wide_;  // a row longer than kBatchElements
  std::vector<float> x_;
  // Squared-error mode: the importance of each column of the region, as
  // double (1 unweighted), for AddSqErrorRow.
  std::vector<double> weights_;
  // Column runs of the cells, relative to the region's first column.
  std::vector<int64_t> run_;
  // The mean's and squared errors' partial sums of one band of cells
  // (heatmap.h's lanes), absmax's column maxima (ColumnMaxRows) and plain
  // floats' column errors (PlainFloatErrors::FoldColumns), where a band
  // takes several batches.
  std::vector<double> lanes_;
  std::vector<uint32_t> colmax_;
  std::vector<uint16_t> colmax16_;  // the same of F16 codes in place
  ErrorColumns colerr_;
};

RegionPass::RegionPass(const LogicalTensor& t, const LogicalTensor* ref,
                       const HeatmapOptions& o, const Region& g, Heatmap* h)
    : t_(t),
      ref_(ref),
      o_(o),
      g_(g),
      h_(*h),
      mean_(o.mode == HeatmapMode::kMean),
      absmax_(o.mode == HeatmapMode::kAbsmax),
      error_(o.mode == HeatmapMode::kErrorSteps),
      zeros_(o.mode == HeatmapMode::kZeros),
      sq_error_(o.mode == HeatmapMode::kSqError),
      with_ref_(ref != nullptr && (error_ || zeros_ || sq_error_)),
      float_steps_(error_ ? t.encoding->PlainFloatSteps() : nullptr),
      detailed_(error_ && float_steps_ == nullptr) {
  if (float_steps_ != nullptr) plain_.emplace(*float_steps_, simd_);
  if (((plain_ && !o.locate) || sq_error_) && o.ref_rows.empty())
    ref_in_place_ = ref->encoding->StoredF32();
  column_errors_ = plain_.has_value() && !o.locate;
  const int64_t ncols = g.ncols();
  if (ncols == h->cols) {
    batch_rows_ = std::min(g.row_end - g.row_begin,
                           std::max<int64_t>(1, kBatchElements / ncols));
  }
  run_.resize(static_cast<size_t>(h->width) + 1);
  for (int j = 0; j <= h->width; ++j) run_[j] = h->col_edges[j] - g.col_begin;
#if defined(__x86_64__)
  const bool lanes_in_place = mean_ && AllInBlocks(run_) &&
                              (simd_ >= DecodeSimd::kAvx512 ||
                               (simd_ >= DecodeSimd::kAvx2 && HasFma()));
  if (lanes_in_place || (absmax_ && !o.locate && simd_ >= DecodeSimd::kAvx2)) {
    f16_in_place_ = t.encoding->StoredF16();
  }
  if (lanes_in_place) {
    bf16_in_place_ =
        reinterpret_cast<const BF16Code*>(t.encoding->StoredBF16());
    f32_in_place_ = t.encoding->StoredF32();
  }
#endif
  if ((mean_ &&
       Q4KMeanLanesApply(simd_, g.base + g.col_begin, h->cols, run_)) ||
      (absmax_ && !o.locate &&
       Q4KColumnMaxApply(simd_, g.base + g.col_begin, h->cols, ncols))) {
    q4k_in_place_ = StoredQ4KBlocks(t);
  }
  if ((mean_ && Q8MeanLanesApply(simd_, g.base + g.col_begin, h->cols, run_)) ||
      (absmax_ && !o.locate &&
       Q8ColumnMaxApply(simd_, g.base + g.col_begin, h->cols, ncols))) {
    q8_in_place_ = StoredQ8Blocks(t);
  }
  const size_t buf = static_cast<size_t>(batch_rows_ * ncols);
  q_.resize(detailed_ ? buf : 0);
  if (!detailed_ && !InPlace()) {
    v_ = DecodeScratch(buf);
    if (v_ == nullptr) {
      wide_.resize(buf);
      v_ = wide_.data();
    }
  }
  x_.resize(with_ref_ && ref_in_place_ == nullptr ? buf : 0);
  lanes_.resize(mean_ || sq_error_ ? static_cast<size_t>(h->width) * kLanes
                                   : 0);
  if (sq_error_) {
    // The region lies in one view, so in one expert's weights.
    const TensorWeights* const w = o.weights;
    weights_.assign(static_cast<size_t>(ncols), 1.0);
    if (w != nullptr) {
      const float* const row =
          w->weights + (g.base / w->expert_elements) * w->columns + g.col_begin;
      std::copy(row, row + ncols, weights_.begin());
    }
  }
  const bool f16_max = absmax_ && f16_in_place_ != nullptr;
  colmax_.resize(absmax_ && !f16_max ? static_cast<size_t>(ncols) : 0);
  colmax16_.resize(f16_max ? static_cast<size_t>(ncols) : 0);
}

absl::Status RegionPass::Run() {
  band_ = 0;
  for (int64_t r = g_.row_begin, nb = 0; r < g_.row_end; r += nb) {
    if (o_.cancelled && o_.cancelled()) {
      return absl::CancelledError(
          absl::StrCat("heatmap of '", t_.name, "' cancelled at band ", band_,
                       " of ", h_.height, " (row ", r, ")"));
    }
    nb = std::min(batch_rows_, g_.row_end - r);
    TM_RETURN_IF_ERROR(Read(r, nb));
    while (band_ < h_.height && h_.row_edges[band_] < r + nb) {
      const int64_t top = h_.row_edges[band_], bottom = h_.row_edges[band_ + 1];
      const int64_t lo = std::max(r, top), hi = std::min(r + nb, bottom);
      if (lo == top) StartBand();
      TM_RETURN_IF_ERROR(FoldRows(r, lo - r, hi - lo));
      if (hi < bottom) break;  // the band goes on in the next batch
      EndBand();
      ++band_;
    }
  }
  return absl::OkStatus();
}

// Decodes view rows [r, r + nb) of the region (whole rows when nb > 1).
absl::Status RegionPass::Read(int64_t r, int64_t nb) {
  if (InPlace()) return absl::OkStatus();  // read by FoldRows
  const int64_t first = g_.base + r * h_.cols + g_.col_begin;
  const int64_t count = nb * g_.ncols();
  return GuardedRead([&]() -> absl::Status {
    TM_RETURN_IF_ERROR(
        detailed_ ? t_.encoding->DecodeDetailed(first, count, q_.data())
                  : t_.encoding->Decode(first, count, v_));
    return with_ref_ && ref_in_place_ == nullptr
               ? DecodeMappedRows(*ref_, o_.ref_rows, first, count, x_.data())
               : absl::OkStatus();
  });
}

void RegionPass::StartBand() {
  if (sq_error_) std::fill(lanes_.begin(), lanes_.end(), 0.0);
  std::fill(colmax_.begin(), colmax_.end(), 0u);
  std::fill(colmax16_.begin(), colmax16_.end(), uint16_t{0});
  if (column_errors_) colerr_.Reset(g_.ncols());
}

// Rows [k0, k0 + nk) of the batch that starts at view row r, all in the
// current band.
absl::Status RegionPass::FoldRows(int64_t r, int64_t k0, int64_t nk) {
  const int64_t ncols = g_.ncols();
  if (mean_) {
    const LaneEnds ends{r + k0 == h_.row_edges[band_],
                        r + k0 + nk == h_.row_edges[band_ + 1]};
#if defined(__x86_64__)
    const int64_t at = g_.base + (r + k0) * h_.cols + g_.col_begin;
    if (f16_in_place_ != nullptr) {
      return GuardedRead([&]() -> absl::Status {
        AccumulateLanesCodes(f16_in_place_ + at, h_.cols, nk, run_, simd_, ends,
                             lanes_.data(), Out(h_.values));
        return absl::OkStatus();
      });
    }
    if (bf16_in_place_ != nullptr) {
      return GuardedRead([&]() -> absl::Status {
        AccumulateLanesCodes(bf16_in_place_ + at, h_.cols, nk, run_, simd_,
                             ends, lanes_.data(), Out(h_.values));
        return absl::OkStatus();
      });
    }
    if (f32_in_place_ != nullptr) {
      return GuardedRead([&]() -> absl::Status {
        AccumulateLanesCodes(f32_in_place_ + at, h_.cols, nk, run_, simd_, ends,
                             lanes_.data(), Out(h_.values));
        return absl::OkStatus();
      });
    }
#endif
    if (q4k_in_place_ != nullptr) {
      return GuardedRead([&]() -> absl::Status {
        Q4KMeanLanes(q4k_in_place_, g_.base + (r + k0) * h_.cols + g_.col_begin,
                     h_.cols, nk, run_, ends.first, ends.last, lanes_.data(),
                     Out(h_.values));
        return absl::OkStatus();
      });
    }
    if (q8_in_place_ != nullptr) {
      return GuardedRead([&]() -> absl::Status {
        Q8MeanLanes(q8_in_place_, g_.base + (r + k0) * h_.cols + g_.col_begin,
                    h_.cols, nk, run_, ends.first, ends.last, lanes_.data(),
                    Out(h_.values));
        return absl::OkStatus();
      });
    }
    AccumulateLanes(v_ + k0 * ncols, ncols, nk, run_, simd_, ends,
                    lanes_.data(), Out(h_.values));
    return absl::OkStatus();
  }
  if (column_errors_ || sq_error_) {
    // Under GuardedRead: the source may be read where it is mapped.
    return GuardedRead([&]() -> absl::Status {
      for (int64_t k = k0; k < k0 + nk; ++k) {
        if (sq_error_) {
          AddSqErrorRow(SourceRow(r, k), v_ + k * ncols, weights_.data(), run_,
                        simd_, lanes_.data());
        } else {
          plain_->FoldColumns(SourceRow(r, k), v_ + k * ncols, ncols, &colerr_);
        }
      }
      return absl::OkStatus();
    });
  }
#if defined(__x86_64__)
  if (absmax_ && f16_in_place_ != nullptr) {  // the cells at the band's end
    const uint16_t* const rows =
        f16_in_place_ + g_.base + (r + k0) * h_.cols + g_.col_begin;
    return GuardedRead([&]() -> absl::Status {
      ColumnMaxRowsF16Avx2(rows, h_.cols, nk, ncols, colmax16_.data());
      return absl::OkStatus();
    });
  }
#endif
  if (absmax_ && !o_.locate && q4k_in_place_ != nullptr) {
    return GuardedRead([&]() -> absl::Status {
      Q4KColumnMax(q4k_in_place_, g_.base + (r + k0) * h_.cols + g_.col_begin,
                   h_.cols, nk, ncols, colmax_.data());
      return absl::OkStatus();
    });
  }
  if (absmax_ && !o_.locate && q8_in_place_ != nullptr) {
    return GuardedRead([&]() -> absl::Status {
      Q8ColumnMax(q8_in_place_, g_.base + (r + k0) * h_.cols + g_.col_begin,
                  h_.cols, nk, ncols, colmax_.data());
      return absl::OkStatus();
    });
  }
  if (absmax_ && !o_.locate) {  // the cells at the band's end
    ColumnMaxRows(v_ + k0 * ncols, ncols, nk, ncols, simd_, colmax_.data());
    return absl::OkStatus();
  }
  for (int64_t k = k0; k < k0 + nk; ++k) FoldRow(r, k);
  return absl::OkStatus();
}

// The source of row k of the batch that starts at view row r: where it is
// mapped (read under GuardedRead, as a decode is), or as decoded into x.
const float* RegionPass::SourceRow(int64_t r, int64_t k) const {
  return ref_in_place_ != nullptr
             ? ref_in_place_ + g_.base + (r + k) * h_.cols + g_.col_begin
             : x_.data() + k * g_.ncols();
}

// Row k of the batch that starts at view row r, per mode: each cell's run
// folded into its cell in the order the elements come.
void RegionPass::FoldRow(int64_t r, int64_t k) {
  const size_t at = static_cast<size_t>(k * g_.ncols());
  const float* const vr = v_ == nullptr ? nullptr : v_ + at;
  const ElementQuant* const qr = q_.empty() ? nullptr : q_.data() + at;
  const float* const xr = x_.empty() ? nullptr : x_.data() + at;
  double* const row_out = Out(h_.values);
  const int width = h_.width;
  if (o_.locate) {
    int64_t* const row_element =
        h_.cell_element.data() + static_cast<size_t>(band_) * width;
    // The row's flat index at the region's first column.
    const int64_t index0 = g_.base + (r + k) * h_.cols + g_.col_begin;
    for (int j = 0; j < width; ++j) {
      const int64_t b = run_[j], e = run_[j + 1];
      if (absmax_) {
        LocateRow(
            b, e, index0, [vr](int64_t c) { return std::fabs(double{vr[c]}); },
            row_out + j, row_element + j);
      } else if (float_steps_ != nullptr) {
        LocateRow(
            b, e, index0,
            [&](int64_t c) {
              return PlainFloatErrorSteps(xr[c], vr[c], *float_steps_);
            },
            row_out + j, row_element + j);
      } else {
        LocateRow(
            b, e, index0, [&](int64_t c) { return ErrorSteps(xr[c], qr[c]); },
            row_out + j, row_element + j);
      }
    }
    return;
  }
  if (error_) {
    // Plain floats come by columns (FoldRows); these are inspected.
    for (int j = 0; j < width; ++j) {
      MaxKeepingNaN m{row_out[j]};
      for (int64_t c = run_[j]; c < run_[j + 1]; ++c)
        m.Add(ErrorSteps(xr[c], qr[c]));
      row_out[j] = m.Result();
    }
  } else if (zeros_) {
    double* const row_pruned = h_.pruned.empty() ? nullptr : Out(h_.pruned);
    for (int j = 0; j < width; ++j) {
      // Counts below 2^53 are exact in double, so counting in integers and
      // adding once gives the same sum.
      int64_t made = 0, pruned = 0;
      for (int64_t c = run_[j]; c < run_[j + 1]; ++c) {
        if (vr[c] != 0) continue;
        if (!with_ref_ || xr[c] != 0) {
          ++made;
        } else {
          ++pruned;
        }
      }
      row_out[j] += static_cast<double>(made);
      if (row_pruned != nullptr) row_pruned[j] += static_cast<double>(pruned);
    }
  }
}

// The band's cells from the state its rows left: squared errors' lanes,
// column errors and column maxima.
void RegionPass::EndBand() {
  double* const row_out = Out(h_.values);
  if (sq_error_) {
    for (int j = 0; j < h_.width; ++j)
      row_out[j] = SumOfLanes(lanes_.data() + static_cast<size_t>(j) * kLanes);
    return;
  }
  if (column_errors_) {
    for (int j = 0; j < h_.width; ++j) {
      MaxKeepingNaN m{row_out[j]};
      colerr_.FoldInto(run_[j], run_[j + 1], &m);
      row_out[j] = m.Result();
    }
  }
  if (!colmax16_.empty()) {
    for (int j = 0; j < h_.width; ++j) {
      uint16_t m = 0;
      for (int64_t c = run_[j]; c < run_[j + 1]; ++c)
        m = std::max(m, colmax16_[c]);
      row_out[j] = static_cast<double>(F16ToF32(m));
    }
    return;
  }
  if (absmax_ && !o_.locate) {
    for (int j = 0; j < h_.width; ++j) {
      uint32_t m = 0;
      for (int64_t c = run_[j]; c < run_[j + 1]; ++c)
        m = std::max(m, colmax_[c]);
      row_out[j] = static_cast<double>(std::bit_cast<float>(m));
    }
  }
}

// Sums into means and fractions, group ids into group mode's values, one
// NaN for every NaN cell, and the finite range.
void FinishCells(HeatmapMode mode, Heatmap* h) {
  const bool sums = mode == HeatmapMode::kMean || mode == HeatmapMode::kZeros;
  // A cell holds at most max_heatmap_cells-th of the region, but the region
  // can be large: the count in double, as the mean's sum is, the product of
  // the cell's rows and columns (exact below 2^53).
  std::vector<double> widths(static_cast<size_t>(h->width));
  for (int j = 0; j < h->width; ++j)
    widths[j] = static_cast<double>(h->col_edges[j + 1] - h->col_edges[j]);
  for (int i = 0; i < h->height; ++i) {
    const double rows =
        static_cast<double>(h->row_edges[i + 1] - h->row_edges[i]);
    double* const v = h->values.data() + static_cast<size_t>(i) * h->width;
    double* const p = h->pruned.empty() ? nullptr
                                        : h->pruned.data() +
                                              static_cast<size_t>(i) * h->width;
    const int64_t* const g =
        h->groups.data() + static_cast<size_t>(i) * h->width;
    // Loops of one statement each, so that they run in vectors.
    if (sums) {
      for (int j = 0; j < h->width; ++j) v[j] /= rows * widths[j];
    }
    if (p != nullptr) {
      for (int j = 0; j < h->width; ++j) p[j] /= rows * widths[j];
    }
    if (mode == HeatmapMode::kGroup) {
      for (int j = 0; j < h->width; ++j) v[j] = static_cast<double>(g[j]);
    }
    // One NaN for every NaN cell: payloads and signs (x86's default NaN is
    // negative) depend on which operand carried it.
    for (int j = 0; j < h->width; ++j) {
      v[j] = v[j] != v[j] ? std::numeric_limits<double>::quiet_NaN() : v[j];
    }
  }
  // The finite range, chosen as std::minmax_element chooses among equals
  // (the first smallest, the last largest: +0 and -0 keep their bits).
  bool any_finite = false;
  for (const double v : h->values) {
    if (!std::isfinite(v)) continue;
    if (!any_finite) {
      h->min = h->max = v;
      any_finite = true;
      continue;
    }
    if (v < h->min) h->min = v;
    if (!(v < h->max)) h->max = v;
  }
}

}  // namespace

absl::StatusOr<Heatmap> ComputeHeatmap(const LogicalTensor& t,
                                       const LogicalTensor* ref,
                                       const HeatmapOptions& o) {
  TM_RETURN_IF_ERROR(CheckModeOptions(t, ref, o));
  const size_t rank = t.shape.size();
  Heatmap h;
  h.cols = t.shape.back();
  h.rows = rank >= 2 ? t.shape[rank - 2] : 1;
  if (t.num_elements == 0) {
    // An empty tensor (a zero dimension): a view of no cells, rather than
    // cells that cover nothing (and minima of -inf).
    if (o.row_begin != 0 || o.row_end != 0 || o.col_begin != 0 ||
        o.col_end != 0) {
      return RequestFieldError(
          "region",
          absl::StrCat("tensor '", t.name, "' is empty (a view of ", h.rows,
                       " rows x ", h.cols, " cols), so it has no region rows [",
                       o.row_begin, ", ", o.row_end, ") x cols [", o.col_begin,
                       ", ", o.col_end, ")"));
    }
    h.width = h.height = 0;
    h.row_edges = {0};
    h.col_edges = {0};
    return h;
  }
  TM_ASSIGN_OR_RETURN(const Region g, LayOutCells(t, o, &h));
  if (o.errors == nullptr && o.mode != HeatmapMode::kGroup &&
      g.ncols() > kMaxRegionColumns) {
    return LimitExceededError(
        absl::StrCat("a heatmap region of ", g.ncols(),
                     " columns is more than the ", kMaxRegionColumns,
                     " a pass holds a row of: narrow its columns (--cols, "
                     "or zoom on the page)"),
        "heatmap_region_columns", kMaxRegionColumns, g.ncols());
  }
  if (o.mode == HeatmapMode::kZeros && ref != nullptr)
    h.pruned.assign(h.values.size(), 0.0);
  TM_RETURN_IF_ERROR(CellGroups(t, g.base, &h));
  if (o.errors != nullptr) {
    CellsFromGrid(*o.errors, o.locate, &h);
  } else if (o.mode != HeatmapMode::kGroup) {
    RegionPass pass(t, ref, o, g, &h);
    TM_RETURN_IF_ERROR(pass.Run());
  }
  FinishCells(o.mode, &h);
  return h;
}

}  // namespace tensormorph
