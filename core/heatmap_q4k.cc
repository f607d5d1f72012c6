#include "core/heatmap_q4k.h"

#include <cstring>
#include <memory>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>

#include "core/quant/kquant_scales_simd.h"
#endif

#include "core/dtype.h"
#include "core/format/stored_tensor.h"
#include "core/heatmap_lanes.h"
#include "core/quant/decode_simd.h"
#include "core/util/lane_sum.h"

namespace tensormorph {
namespace {

constexpr int kLanes = kSumLanes;
// Columns of one kernel call: a chunk of a super-block, the low and the
// high nibbles of 32 bytes, two sub-blocks of 32.
constexpr int kChunkColumns = 64;
constexpr int64_t kQ4KElems = 256, kQ4KBytes = 144;

}  // namespace

const uint8_t* StoredQ4KBlocks(const LogicalTensor& t) {
  const EncodingInfo& info = t.encoding->info();
  if (info.convention != "ggml" || info.scheme != "Q4_K") return nullptr;
  const std::vector<const StoredTensor*> parts = t.encoding->parts();
  if (parts.size() != 1 || parts[0]->dtype != DType::kQ4_K ||
      t.num_elements % kQ4KElems != 0 ||
      parts[0]->data.size() / kQ4KBytes <
          static_cast<uint64_t>(t.num_elements / kQ4KElems)) {
    return nullptr;
  }
  return parts[0]->data.data();
}

bool Q4KMeanLanesApply(DecodeSimd simd, int64_t first, int64_t stride,
                       const std::vector<int64_t>& run) {
#if defined(__x86_64__)
  return simd >= DecodeSimd::kAvx2 && first % kChunkColumns == 0 &&
         stride % kQ4KElems == 0 && CellsInWholeChunks(run, kChunkColumns);
#else
  (void)simd, (void)first, (void)stride, (void)run;
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
  __attribute__((target("avx512f,avx2,f16c"), always_inline)) inline

// A sub-block's 16 levels d1 * q - m1 (d1 and m1 in every lane) in float,
// the decoder's two roundings (core is built with -ffp-contract=off),
// widened into two vectors of doubles: levels 0-7 and 8-15.
struct Levels {
  __m512d lo, hi;
};
TM_AVX512_STEP Levels LevelsOf(__m512 d1, __m512 m1) {
  const __m512 q =
      _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 t = _mm512_sub_ps(_mm512_mul_ps(d1, q), m1);
  return {_mm512_cvtps_pd(_mm512_castps512_ps256(t)),
          _mm512_cvtps_pd(_mm256_castpd_ps(
              _mm512_extractf64x4_pd(_mm512_castps_pd(t), 1)))};
}

// Eight codes' levels: byte i of `word` shifted down by shift[i] leaves the
// code in qword i's low four bits (a low nibble at 8 i, a high one at
// 8 i + 4), and the permute reads only those bits, whatever lies above.
TM_AVX512_STEP __m512d EightLevels(const uint8_t* bytes, __m512i shift,
                                   const Levels& t) {
  uint64_t word;
  std::memcpy(&word, bytes, 8);
  const __m512i idx = _mm512_srlv_epi64(_mm512_set1_epi64(word), shift);
  return _mm512_permutex2var_pd(t.lo, idx, t.hi);
}

// A row's chunk: eight codes G at column offset 8 G go to vector
// 2 (8 G / W) + G % 2, left to right (the lanes' order); G < 4 are the low
// nibbles of bytes 8 G on (the chunk's first sub-block), the rest the high
// nibbles of bytes 8 G - 32 on (its second).
template <int W, int... G>
TM_AVX512_STEP void AddChunkRow(const uint8_t* qs, __m512i low_shift,
                                __m512i high_shift, const Levels& low,
                                const Levels& high, __m512d* a,
                                std::integer_sequence<int, G...>) {
  ((a[2 * (8 * G / W) + G % 2] = _mm512_add_pd(
        a[2 * (8 * G / W) + G % 2],
        EightLevels(qs + 8 * G % 32, G < 4 ? low_shift : high_shift,
                    G < 4 ? low : high))),
   ...);
}

// d1 = d * sc and m1 = dmin * m of every sub-block of `nsb` super-blocks
// from `sb` of each of `nrows` rows `sb_stride` super-blocks apart, into
// params (per row and super-block: d1 of sub-blocks 0-7, then m1), as the
// decoder computes them: once per super-block rather than once per chunk
// that reads them. d and dmin come by F16C rather than LoadF16, whose table
// behind a static guard would put a call in the loop (a NaN's payload may
// differ; no cell keeps one).
__attribute__((target("avx2,f16c"))) void Q4KParams(const uint8_t* blocks,
                                                    int64_t sb,
                                                    int64_t sb_stride,
                                                    int64_t nrows, int64_t nsb,
                                                    float* params) {
  for (int64_t r = 0; r < nrows; ++r) {
    const uint8_t* b = blocks + (sb + r * sb_stride) * kQ4KBytes;
    for (int64_t k = 0; k < nsb; ++k, b += kQ4KBytes, params += 16) {
      uint32_t d_dmin;
      std::memcpy(&d_dmin, b, 4);
      const __m128 dd =
          _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d_dmin)));
      __m256 d1, m1;
      SubBlockParamsK4(b + 4, _mm_cvtss_f32(dd),
                       _mm_cvtss_f32(_mm_movehdup_ps(dd)), &d1, &m1);
      _mm256_storeu_ps(params, d1);
      _mm256_storeu_ps(params + 8, m1);
    }
  }
}

// 64 / W cells of W columns: a chunk's 64 columns from element `first` of
// each of `nrows` rows `stride` apart, their lanes in registers down the
// rows, as heatmap.cc's CellBlockAvx512 keeps them. Each row's chunk is 32
// bytes whose low nibbles are one sub-block's codes (columns 0-31) and high
// nibbles the next's (32-63); their parameters are at `params` (Q4KParams'
// of the chunk's super-block), `params_stride` floats apart row by row.
template <int W>
__attribute__((target("avx512f,avx2,f16c"))) void Q4KChunkLanes(
    const uint8_t* blocks, int64_t first, int64_t stride, int64_t nrows,
    const float* params, int64_t params_stride, bool start, bool finish,
    double* lanes, double* sums) {
  constexpr int kCells = kChunkColumns / W;
  __m512d a[2 * kCells];
  StartLanes(start, lanes, a, std::make_integer_sequence<int, 2 * kCells>());
  const __m512i low_shift = _mm512_setr_epi64(0, 8, 16, 24, 32, 40, 48, 56);
  const __m512i high_shift = _mm512_setr_epi64(4, 12, 20, 28, 36, 44, 52, 60);
  const int chunk = static_cast<int>(first % kQ4KElems / kChunkColumns);
  const uint8_t* b = blocks + first / kQ4KElems * kQ4KBytes + 16 + 32 * chunk;
  const int64_t b_stride = stride / kQ4KElems * kQ4KBytes;
  const float* p = params + 2 * chunk;
  for (int64_t r = 0; r < nrows; ++r, b += b_stride, p += params_stride) {
    const Levels low = LevelsOf(_mm512_set1_ps(p[0]), _mm512_set1_ps(p[8]));
    const Levels high = LevelsOf(_mm512_set1_ps(p[1]), _mm512_set1_ps(p[9]));
    AddChunkRow<W>(b, low_shift, high_shift, low, high, a,
                   std::make_integer_sequence<int, 8>());
  }
  EndLanes(finish, a, lanes, sums, std::make_integer_sequence<int, kCells>());
}

// This thread's Q4KParams, kept from call to call (at most a batch's
// super-blocks: 16 floats per 256 elements) rather than allocated by each.
float* ParamsScratch(size_t n) {
  thread_local std::unique_ptr<float[]> buf;
  thread_local size_t size = 0;
  if (size < n) {
    buf.reset(new float[n]);
    size = n;
  }
  return buf.get();
}

// Q4KColumnMax over one chunk's 64 columns of `nrows` rows: their maxima in
// four vectors down the rows. A sub-block's table is its 16 levels' |x|
// bits (the sign cleared, so that bits order as |x| does and NaN sorts
// above +inf, as ColumnMaxRows reads them); each 16 codes pick theirs with
// one permute that reads an index's low four bits.
__attribute__((target("avx512f,avx2,f16c"))) void Q4KChunkColumnMax(
    const uint8_t* blocks, int64_t first, int64_t stride, int64_t nrows,
    const float* params, int64_t params_stride, uint32_t* colmax) {
  const __m512 q =
      _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  __m512i m[4];
  for (int k = 0; k < 4; ++k) m[k] = _mm512_loadu_si512(colmax + 16 * k);
  const int chunk = static_cast<int>(first % kQ4KElems / kChunkColumns);
  const uint8_t* b = blocks + first / kQ4KElems * kQ4KBytes + 16 + 32 * chunk;
  const int64_t b_stride = stride / kQ4KElems * kQ4KBytes;
  const float* p = params + 2 * chunk;
  for (int64_t r = 0; r < nrows; ++r, b += b_stride, p += params_stride) {
    __m512i t[2];
    for (int h = 0; h < 2; ++h) {
      const __m512 v = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(p[h]), q),
                                     _mm512_set1_ps(p[8 + h]));
      t[h] = _mm512_and_si512(_mm512_castps_si512(v), abs_mask);
    }
    const __m256i codes =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    const __m256i high = _mm256_srli_epi16(codes, 4);
    const __m128i idx[4] = {
        _mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1),
        _mm256_castsi256_si128(high), _mm256_extracti128_si256(high, 1)};
    for (int k = 0; k < 4; ++k) {
      m[k] = _mm512_max_epu32(
          m[k],
          _mm512_permutexvar_epi32(_mm512_cvtepu8_epi32(idx[k]), t[k / 2]));
    }
  }
  for (int k = 0; k < 4; ++k) _mm512_storeu_si512(colmax + 16 * k, m[k]);
}

#undef TM_AVX512_STEP

#define TM_AVX2_STEP __attribute__((target("avx2,f16c"), always_inline)) inline

// Eight codes' values d1 * q - m1 in float, as the decoder computes them:
// the low nibbles of bytes[0, 8) (kHigh false) or their high nibbles.
template <bool kHigh>
TM_AVX2_STEP __m256 EightValues(const uint8_t* bytes, __m256 d1, __m256 m1) {
  __m256i q = _mm256_cvtepu8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes)));
  q = kHigh ? _mm256_srli_epi32(q, 4)
            : _mm256_and_si256(q, _mm256_set1_epi32(0x0f));
  return _mm256_sub_ps(_mm256_mul_ps(d1, _mm256_cvtepi32_ps(q)), m1);
}

// The column offset `col` of a kernel's cells of W: its lanes' vector
// (cell col / W, lanes from col % 16).
template <int W>
constexpr int LaneVector(int col) {
  return 4 * (col / W) + col / 4 % 4;
}

// Eight codes of a row at column offset kCol onto the lanes: values
// kCol..kCol + 3, then kCol + 4..kCol + 7.
template <int W, int kCol, bool kHigh>
TM_AVX2_STEP void AddEight(const uint8_t* bytes, __m256 d1, __m256 m1,
                           __m256d* a) {
  const __m256 v = EightValues<kHigh>(bytes, d1, m1);
  a[LaneVector<W>(kCol)] = _mm256_add_pd(
      a[LaneVector<W>(kCol)], _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  a[LaneVector<W>(kCol + 4)] = _mm256_add_pd(
      a[LaneVector<W>(kCol + 4)], _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

// One sub-block's 32 codes of a row (the low or high nibbles of `qs`'s 32
// bytes) onto the lanes, from column offset kFirst, left to right.
template <int W, int kFirst, bool kHigh, int... g>
TM_AVX2_STEP void AddSubBlockRow(const uint8_t* qs, __m256 d1, __m256 m1,
                                 __m256d* a, std::integer_sequence<int, g...>) {
  (AddEight<W, kFirst + 8 * g, kHigh>(qs + 8 * g, d1, m1, a), ...);
}

// Q4KChunkLanes in AVX2's sixteen registers: cells of 16 or 32 columns a
// sub-block at a time (kHigh: the chunk's second, columns 32-63), a cell of
// 64 both sub-blocks of each row in turn.
template <int W, bool kHigh>
__attribute__((target("avx2,f16c"))) void Q4KChunkLanesAvx2(
    const uint8_t* blocks, int64_t first, int64_t stride, int64_t nrows,
    const float* params, int64_t params_stride, bool start, bool finish,
    double* lanes, double* sums) {
  constexpr int kCells = W == 64 ? 1 : 32 / W;
  __m256d a[4 * kCells];
  StartLanes(start, lanes, a, std::make_integer_sequence<int, 4 * kCells>());
  const int chunk = static_cast<int>(first % kQ4KElems / kChunkColumns);
  const uint8_t* b = blocks + first / kQ4KElems * kQ4KBytes + 16 + 32 * chunk;
  const int64_t b_stride = stride / kQ4KElems * kQ4KBytes;
  const float* p = params + 2 * chunk;
  constexpr auto four = std::make_integer_sequence<int, 4>();
  for (int64_t r = 0; r < nrows; ++r, b += b_stride, p += params_stride) {
    if constexpr (W == 64) {
      AddSubBlockRow<W, 0, false>(b, _mm256_set1_ps(p[0]), _mm256_set1_ps(p[8]),
                                  a, four);
      AddSubBlockRow<W, 32, true>(b, _mm256_set1_ps(p[1]), _mm256_set1_ps(p[9]),
                                  a, four);
    } else {
      AddSubBlockRow<W, 0, kHigh>(b, _mm256_set1_ps(p[kHigh]),
                                  _mm256_set1_ps(p[8 + kHigh]), a, four);
    }
  }
  EndLanes(finish, a, lanes, sums, std::make_integer_sequence<int, kCells>());
}

// A chunk's cells of 16 or 32 columns, a sub-block at a time: the second
// sub-block's cells are 32 / W on.
template <int W>
void Q4KSubBlocksAvx2(const uint8_t* blocks, int64_t first, int64_t stride,
                      int64_t nrows, const float* params, int64_t params_stride,
                      bool start, bool finish, double* lanes, double* sums) {
  constexpr int kCells = 32 / W;
  Q4KChunkLanesAvx2<W, false>(blocks, first, stride, nrows, params,
                              params_stride, start, finish, lanes, sums);
  Q4KChunkLanesAvx2<W, true>(blocks, first, stride, nrows, params,
                             params_stride, start, finish,
                             lanes + kCells * kLanes, sums + kCells);
}

// A chunk's cells of width w (16, 32 or 64) at AVX2.
void Q4KChunkAvx2(int64_t w, const uint8_t* blocks, int64_t first,
                  int64_t stride, int64_t nrows, const float* params,
                  int64_t params_stride, bool start, bool finish, double* lanes,
                  double* sums) {
  switch (w) {
    case 16:
      return Q4KSubBlocksAvx2<16>(blocks, first, stride, nrows, params,
                                  params_stride, start, finish, lanes, sums);
    case 32:
      return Q4KSubBlocksAvx2<32>(blocks, first, stride, nrows, params,
                                  params_stride, start, finish, lanes, sums);
    default:
      return Q4KChunkLanesAvx2<64, false>(blocks, first, stride, nrows, params,
                                          params_stride, start, finish, lanes,
                                          sums);
  }
}

#undef TM_AVX2_STEP
}  // namespace
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

void Q4KMeanLanes(const uint8_t* blocks, int64_t first, int64_t stride,
                  int64_t nrows, const std::vector<int64_t>& run, bool start,
                  bool finish, double* lanes, double* sums) {
#if defined(__x86_64__)
  // The super-blocks a row of the region meets, from row 0's first.
  const int64_t offset = first % kQ4KElems;
  const int64_t nsb = (offset + run.back() + kQ4KElems - 1) / kQ4KElems;
  float* const params = ParamsScratch(static_cast<size_t>(nrows * nsb * 16));
  Q4KParams(blocks, first / kQ4KElems, stride / kQ4KElems, nrows, nsb, params);
  const int64_t w = run[1] - run[0];
  const size_t step = static_cast<size_t>(kChunkColumns / w);
  const bool avx512 = ActiveDecodeSimd() >= DecodeSimd::kAvx512;
  for (size_t j = 0; j + 1 < run.size(); j += step) {
    double* const l = lanes + j * kLanes;
    const int64_t at = first + run[j];
    const float* const p = params + (offset + run[j]) / kQ4KElems * 16;
    if (!avx512) {
      Q4KChunkAvx2(w, blocks, at, stride, nrows, p, nsb * 16, start, finish, l,
                   sums + j);
      continue;
    }
    switch (w) {
      case 16:
        Q4KChunkLanes<16>(blocks, at, stride, nrows, p, nsb * 16, start, finish,
                          l, sums + j);
        break;
      case 32:
        Q4KChunkLanes<32>(blocks, at, stride, nrows, p, nsb * 16, start, finish,
                          l, sums + j);
        break;
      default:
        Q4KChunkLanes<64>(blocks, at, stride, nrows, p, nsb * 16, start, finish,
                          l, sums + j);
        break;
    }
  }
#else
  (void)blocks, (void)first, (void)stride, (void)nrows, (void)run, (void)start,
      (void)finish, (void)lanes, (void)sums;
#endif
}

bool Q4KColumnMaxApply(DecodeSimd simd, int64_t first, int64_t stride,
                       int64_t ncols) {
#if defined(__x86_64__)
  return simd >= DecodeSimd::kAvx512 && first % kChunkColumns == 0 &&
         stride % kQ4KElems == 0 && ncols % kChunkColumns == 0 && ncols > 0;
#else
  (void)simd, (void)first, (void)stride, (void)ncols;
  return false;
#endif
}

void Q4KColumnMax(const uint8_t* blocks, int64_t first, int64_t stride,
                  int64_t nrows, int64_t ncols, uint32_t* colmax) {
#if defined(__x86_64__)
  const int64_t offset = first % kQ4KElems;
  const int64_t nsb = (offset + ncols + kQ4KElems - 1) / kQ4KElems;
  float* const params = ParamsScratch(static_cast<size_t>(nrows * nsb * 16));
  Q4KParams(blocks, first / kQ4KElems, stride / kQ4KElems, nrows, nsb, params);
  for (int64_t c = 0; c < ncols; c += kChunkColumns) {
    Q4KChunkColumnMax(blocks, first + c, stride, nrows,
                      params + (offset + c) / kQ4KElems * 16, nsb * 16,
                      colmax + c);
  }
#else
  (void)blocks, (void)first, (void)stride, (void)nrows, (void)ncols,
      (void)colmax;
#endif
}

}  // namespace tensormorph
