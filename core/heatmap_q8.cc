#include "core/heatmap_q8.h"

#include <algorithm>
#include <cstring>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/dtype.h"
#include "core/format/stored_tensor.h"
#include "core/heatmap_lanes.h"
#include "core/quant/float_formats.h"
#include "core/util/lane_sum.h"

namespace tensormorph {
namespace {

constexpr int kLanes = kSumLanes;
// Columns of one mean kernel call: two blocks, so that cells of 64 columns
// still keep two vectors of lanes each down the rows.
constexpr int kChunkColumns = 64;
constexpr int64_t kQ8Elems = 32, kQ8Bytes = 34;

#if defined(__x86_64__)
// The kernels convert int64 codes to double (AVX512DQ), which the decoders'
// AVX-512 level (F, BW, VL) does not promise, though every CPU with it has
// DQ too.
bool Avx512At(DecodeSimd simd) {
  static const bool dq = __builtin_cpu_supports("avx512dq");
  return simd >= DecodeSimd::kAvx512 && dq;
}

// The AVX2 kernels add by multiply-adds (FMA), which the decoders' AVX2
// level does not promise.
bool Avx2At(DecodeSimd simd) {
  static const bool fma = __builtin_cpu_supports("fma");
  return simd >= DecodeSimd::kAvx2 && fma;
}
#endif

}  // namespace

const uint8_t* StoredQ8Blocks(const LogicalTensor& t) {
  const EncodingInfo& info = t.encoding->info();
  if (info.convention != "ggml" || info.scheme != "Q8_0") return nullptr;
  const std::vector<const StoredTensor*> parts = t.encoding->parts();
  if (parts.size() != 1 || parts[0]->dtype != DType::kQ8_0 ||
      t.num_elements % kQ8Elems != 0 ||
      parts[0]->data.size() / kQ8Bytes <
          static_cast<uint64_t>(t.num_elements / kQ8Elems)) {
    return nullptr;
  }
  return parts[0]->data.data();
}

bool Q8MeanLanesApply(DecodeSimd simd, int64_t first, int64_t stride,
                      const std::vector<int64_t>& run) {
#if defined(__x86_64__)
  return Avx2At(simd) && first % kQ8Elems == 0 && stride % kQ8Elems == 0 &&
         CellsInWholeChunks(run, kChunkColumns);
#else
  (void)simd, (void)first, (void)stride, (void)run;
  return false;
#endif
}

bool Q8ColumnMaxApply(DecodeSimd simd, int64_t first, int64_t stride,
                      int64_t ncols) {
#if defined(__x86_64__)
  return Avx2At(simd) && first % kQ8Elems == 0 && stride % kQ8Elems == 0 &&
         ncols % kQ8Elems == 0 && ncols > 0;
#else
  (void)simd, (void)first, (void)stride, (void)ncols;
  return false;
#endif
}

#if defined(__x86_64__)
// GCC 12's AVX-512 conversions and extracts pass _mm512_undefined_*(), a
// self-initialised variable that -W(maybe-)uninitialized reports inside the
// intrinsics' header (as decode_simd.cc notes).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
namespace {

#define TM_AVX512_STEP \
  __attribute__((target("avx512f,avx512dq,avx2"), always_inline)) inline

// A block's d as the decoder converts it, from `table` (F16Table, LoadF16's
// own: a NaN keeps its payload), broadcast: loads only, where F16C's
// conversion would take the two vector ports the codes' conversions and
// the additions share (the bound).
TM_AVX512_STEP __m512 BlockD(const uint8_t* block, const float* table) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return _mm512_set1_ps(table[h]);
}

// Eight codes as doubles, exactly. They widen to int64 and convert in place
// (an instruction on each of the two vector ports) rather than to int32
// and across lanes to double (two, one of them on the port the widening
// takes too).
TM_AVX512_STEP __m512d EightCodes(const uint8_t* q) {
  return _mm512_cvtepi64_pd(_mm512_cvtepi8_epi64(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
}

// A row's chunk: the eight codes G at column offset 8 G (block G / 4, its
// codes from 8 (G % 4)) go to vector 2 (8 G / W) + G % 2, left to right
// (the lanes' order). q * d is exact in double (see Q8MeanLanes), so the
// multiply-add rounds lane + x once, as the contract's addition does.
template <int W, int... G>
TM_AVX512_STEP void AddChunkRow(const uint8_t* qs, __m512d d0, __m512d d1,
                                __m512d* a, std::integer_sequence<int, G...>) {
  ((a[2 * (8 * G / W) + G % 2] =
        _mm512_fmadd_pd(EightCodes(qs + G / 4 * kQ8Bytes + 8 * (G % 4)),
                        G < 4 ? d0 : d1, a[2 * (8 * G / W) + G % 2])),
   ...);
}

// 64 / W cells of W columns: a chunk's two blocks from element `first` of
// each of `nrows` rows `stride` apart, their lanes in registers down the
// rows, as heatmap.cc's CellBlockAvx512 keeps them.
template <int W>
__attribute__((target("avx512f,avx512dq,avx2"))) void Q8ChunkLanes(
    const uint8_t* blocks, int64_t first, int64_t stride, int64_t nrows,
    const float* table, bool start, bool finish, double* lanes, double* sums) {
  constexpr int kCells = kChunkColumns / W;
  __m512d a[2 * kCells];
  StartLanes(start, lanes, a, std::make_integer_sequence<int, 2 * kCells>());
  const uint8_t* b = blocks + first / kQ8Elems * kQ8Bytes;
  const int64_t b_stride = stride / kQ8Elems * kQ8Bytes;
  for (int64_t r = 0; r < nrows; ++r, b += b_stride) {
    const __m512d d0 =
        _mm512_cvtps_pd(_mm512_castps512_ps256(BlockD(b, table)));
    const __m512d d1 =
        _mm512_cvtps_pd(_mm512_castps512_ps256(BlockD(b + kQ8Bytes, table)));
    AddChunkRow<W>(b + 2, d0, d1, a, std::make_integer_sequence<int, 8>());
  }
  EndLanes(finish, a, lanes, sums, std::make_integer_sequence<int, kCells>());
}

// Q8ColumnMax over one block's 32 columns of `nrows` rows: their maxima in
// two vectors down the rows. |x|'s bits (the sign cleared, so that bits
// order as |x| does and NaN sorts above +inf, as ColumnMaxRows reads them)
// of the decoder's float(q) * d.
__attribute__((target("avx512f,avx512dq,avx2"))) void Q8BlockColumnMax(
    const uint8_t* b, int64_t b_stride, int64_t nrows, const float* table,
    uint32_t* colmax) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  __m512i m0 = _mm512_loadu_si512(colmax);
  __m512i m1 = _mm512_loadu_si512(colmax + 16);
  for (int64_t r = 0; r < nrows; ++r, b += b_stride) {
    const __m512 s = BlockD(b, table);
    const __m512 x0 = _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)))),
        s);
    const __m512 x1 = _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18)))),
        s);
    m0 = _mm512_max_epu32(m0,
                          _mm512_and_si512(_mm512_castps_si512(x0), abs_mask));
    m1 = _mm512_max_epu32(m1,
                          _mm512_and_si512(_mm512_castps_si512(x1), abs_mask));
  }
  _mm512_storeu_si512(colmax, m0);
  _mm512_storeu_si512(colmax + 16, m1);
}

#undef TM_AVX512_STEP

#define TM_AVX2_STEP __attribute__((target("avx2,fma"), always_inline)) inline

// Four codes as doubles, exactly.
TM_AVX2_STEP __m256d FourCodes(const uint8_t* q) {
  int32_t w;
  std::memcpy(&w, q, 4);
  return _mm256_cvtepi32_pd(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(w)));
}

// A row of an AVX2 chunk: the four codes G at column offset 4 G (block
// G / 8, its codes from 4 (G % 8)) go to vector 4 (4 G / W) + G % 4, left
// to right; a multiply-add as AddChunkRow's.
template <int W, int... G>
TM_AVX2_STEP void AddChunkRowAvx2(const uint8_t* qs, __m256d d0, __m256d d1,
                                  __m256d* a,
                                  std::integer_sequence<int, G...>) {
  ((a[4 * (4 * G / W) + G % 4] =
        _mm256_fmadd_pd(FourCodes(qs + G / 8 * kQ8Bytes + 4 * (G % 8)),
                        G < 8 ? d0 : d1, a[4 * (4 * G / W) + G % 4])),
   ...);
}

// Q8ChunkLanes in AVX2's sixteen registers: a chunk of one block (cells of
// 16 or 32 columns: eight or four vectors of lanes) or of two (a cell of
// 64: four).
template <int W>
__attribute__((target("avx2,fma"))) void Q8ChunkLanesAvx2(
    const uint8_t* blocks, int64_t first, int64_t stride, int64_t nrows,
    const float* table, bool start, bool finish, double* lanes, double* sums) {
  constexpr int kColumns = W == 64 ? 64 : 32;
  constexpr int kCells = kColumns / W;
  __m256d a[4 * kCells];
  StartLanes(start, lanes, a, std::make_integer_sequence<int, 4 * kCells>());
  const uint8_t* b = blocks + first / kQ8Elems * kQ8Bytes;
  const int64_t b_stride = stride / kQ8Elems * kQ8Bytes;
  for (int64_t r = 0; r < nrows; ++r, b += b_stride) {
    uint16_t h0, h1 = 0;
    std::memcpy(&h0, b, 2);
    if (kColumns == 64) std::memcpy(&h1, b + kQ8Bytes, 2);
    const __m256d d0 = _mm256_set1_pd(table[h0]);
    const __m256d d1 = _mm256_set1_pd(table[h1]);
    AddChunkRowAvx2<W>(b + 2, d0, d1, a,
                       std::make_integer_sequence<int, kColumns / 4>());
  }
  EndLanes(finish, a, lanes, sums, std::make_integer_sequence<int, kCells>());
}

// Q8BlockColumnMax with eight columns a vector.
__attribute__((target("avx2"))) void Q8BlockColumnMaxAvx2(const uint8_t* b,
                                                          int64_t b_stride,
                                                          int64_t nrows,
                                                          const float* table,
                                                          uint32_t* colmax) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  __m256i m[4];
  for (int k = 0; k < 4; ++k) {
    m[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(colmax + 8 * k));
  }
  for (int64_t r = 0; r < nrows; ++r, b += b_stride) {
    uint16_t h;
    std::memcpy(&h, b, 2);
    const __m256 s = _mm256_set1_ps(table[h]);
    for (int k = 0; k < 4; ++k) {
      const __m256 x =
          _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                            reinterpret_cast<const __m128i*>(b + 2 + 8 * k)))),
                        s);
      m[k] = _mm256_max_epu32(
          m[k], _mm256_and_si256(_mm256_castps_si256(x), abs_mask));
    }
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(colmax + 8 * k), m[k]);
  }
}

#undef TM_AVX2_STEP
}  // namespace
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

void Q8MeanLanes(const uint8_t* blocks, int64_t first, int64_t stride,
                 int64_t nrows, const std::vector<int64_t>& run, bool start,
                 bool finish, double* lanes, double* sums) {
#if defined(__x86_64__)
  const float* const table = F16Table();
  const int64_t w = run[1] - run[0];
  if (!Avx512At(ActiveDecodeSimd())) {
    // A block a call for cells of 16 or 32 columns, two for 64.
    const size_t step = static_cast<size_t>(std::max<int64_t>(w, 32) / w);
    for (size_t j = 0; j + 1 < run.size(); j += step) {
      double* const l = lanes + j * kLanes;
      const int64_t at = first + run[j];
      switch (w) {
        case 16:
          Q8ChunkLanesAvx2<16>(blocks, at, stride, nrows, table, start, finish,
                               l, sums + j);
          break;
        case 32:
          Q8ChunkLanesAvx2<32>(blocks, at, stride, nrows, table, start, finish,
                               l, sums + j);
          break;
        default:
          Q8ChunkLanesAvx2<64>(blocks, at, stride, nrows, table, start, finish,
                               l, sums + j);
          break;
      }
    }
    return;
  }
  const size_t step = static_cast<size_t>(kChunkColumns / w);
  for (size_t j = 0; j + 1 < run.size(); j += step) {
    double* const l = lanes + j * kLanes;
    const int64_t at = first + run[j];
    switch (w) {
      case 16:
        Q8ChunkLanes<16>(blocks, at, stride, nrows, table, start, finish, l,
                         sums + j);
        break;
      case 32:
        Q8ChunkLanes<32>(blocks, at, stride, nrows, table, start, finish, l,
                         sums + j);
        break;
      default:
        Q8ChunkLanes<64>(blocks, at, stride, nrows, table, start, finish, l,
                         sums + j);
        break;
    }
  }
#else
  (void)blocks, (void)first, (void)stride, (void)nrows, (void)run, (void)start,
      (void)finish, (void)lanes, (void)sums;
#endif
}

void Q8ColumnMax(const uint8_t* blocks, int64_t first, int64_t stride,
                 int64_t nrows, int64_t ncols, uint32_t* colmax) {
#if defined(__x86_64__)
  const float* const table = F16Table();
  const uint8_t* const b = blocks + first / kQ8Elems * kQ8Bytes;
  const int64_t b_stride = stride / kQ8Elems * kQ8Bytes;
  const bool avx512 = Avx512At(ActiveDecodeSimd());
  for (int64_t c = 0; c < ncols; c += kQ8Elems) {
    (avx512 ? Q8BlockColumnMax : Q8BlockColumnMaxAvx2)(
        b + c / kQ8Elems * kQ8Bytes, b_stride, nrows, table, colmax + c);
  }
#else
  (void)blocks, (void)first, (void)stride, (void)nrows, (void)ncols,
      (void)colmax;
#endif
}

}  // namespace tensormorph
