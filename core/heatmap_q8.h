// The heatmap's mean (core/heatmap.h's lanes) and absmax (its column
// maxima) read straight from ggml Q8_0 blocks: each element's code times
// its block's d, with no float32 buffer between a decode and the
// reduction. Decoding a band to floats and reading it back kept the
// whole-tensor mean of Q8_0 at 0.45x a decode pass and absmax at 0.50x
// (issue 35; at AVX2 on an AMD EPYC, 0.38x and 0.51x). core/heatmap_q4k.h does
// the same for Q4_K.
#ifndef TENSORMORPH_CORE_HEATMAP_Q8_H_
#define TENSORMORPH_CORE_HEATMAP_Q8_H_

#include <cstdint>
#include <vector>

#include "core/quant/decode_simd.h"
#include "core/tensor.h"

namespace tensormorph {

// The ggml Q8_0 blocks of `t` where they are stored (one stored tensor, its
// elements in order, 34 bytes per 32); nullptr for any other tensor.
const uint8_t* StoredQ8Blocks(const LogicalTensor& t);

// Whether Q8MeanLanes takes a region at SIMD level `simd`: AVX-512 (with
// the CPU's AVX512DQ) or AVX2 (with its FMA); row 0's first element of the
// region (`first`) and the rows `stride` elements apart at multiples of 32
// (whole blocks, as every ggml row of Q8_0 is), so that every 64 columns are
// two blocks; the cells (`run`: their column edges relative to the region's
// first column, run[0] = 0) all of one width 16, 32 or 64, in whole chunks of
// 64 columns.
bool Q8MeanLanesApply(DecodeSimd simd, int64_t first, int64_t stride,
                      const std::vector<int64_t>& run);

// Adds `nrows` rows of the region into the mean's lanes, as
// CellLanesScalar (core/heatmap.cc) adds the decoded values: row r is
// elements [first + r * stride, first + r * stride + run.back()) of the
// Q8_0 tensor whose blocks start at `blocks`; cell j's lanes are
// lanes[16 j, 16 j + 16). `start` starts them at +0.0 rather than loading
// them; `finish` combines each cell's into sums[j] (SumOfLanes' tree)
// rather than storing them. The values added are the decoder's bits, NaN
// and infinities included: the decoder's float q * d is exact (8
// significant bits times binary16's 11, within float's range), so it equals
// q * d in double, and a multiply-add of the code and d onto a lane rounds
// once, as adding that value does.
// REQUIRES: Q8MeanLanesApply(simd, first, stride, run) at the active
// level; the blocks hold every element read; called inside GuardedRead (the
// blocks are mapped file bytes).
void Q8MeanLanes(const uint8_t* blocks, int64_t first, int64_t stride,
                 int64_t nrows, const std::vector<int64_t>& run, bool start,
                 bool finish, double* lanes, double* sums);

// Whether Q8ColumnMax takes a region at SIMD level `simd`: AVX-512 (with
// AVX512DQ) or AVX2 (with FMA), row 0's first element (`first`) and the rows
// `stride` elements apart at multiples of 32, and `ncols` a multiple of 32.
bool Q8ColumnMaxApply(DecodeSimd simd, int64_t first, int64_t stride,
                      int64_t ncols);

// The absmax heatmap's column maxima (heatmap.cc's ColumnMaxRows) from the
// blocks: colmax[c] = max(colmax[c], bits of |x| with the sign cleared) for
// each element x of column c of `nrows` rows (row r: elements
// [first + r * stride, first + r * stride + ncols) of the Q8_0 tensor at
// `blocks`), x = float(q) * d as the decoder computes it (d from its
// binary16 table), with no float32 buffer between.
// REQUIRES: Q8ColumnMaxApply(simd, first, stride, ncols) at the active
// level; colmax holds ncols; called inside GuardedRead.
void Q8ColumnMax(const uint8_t* blocks, int64_t first, int64_t stride,
                 int64_t nrows, int64_t ncols, uint32_t* colmax);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_HEATMAP_Q8_H_
