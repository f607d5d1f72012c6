// The heatmap's mean (core/heatmap.h's lanes) and absmax (its column
// maxima) read straight from ggml Q4_K blocks: each element's level is looked
// up in a table of its sub-block's 16, with no float32 buffer between a
// decode and the reduction. Decoding a band to floats and reading it back
// kept the whole-tensor mean and absmax of Q4_K at 0.46-0.47x a decode pass
// (issue 35; with AVX2 alone the mean computes each code's value instead).
#ifndef TENSORMORPH_CORE_HEATMAP_Q4K_H_
#define TENSORMORPH_CORE_HEATMAP_Q4K_H_

#include <cstdint>
#include <vector>

#include "core/quant/decode_simd.h"
#include "core/tensor.h"

namespace tensormorph {

// The ggml Q4_K blocks of `t` where they are stored (one stored tensor, its
// elements in order, 144 bytes per 256), as the check's value pass finds
// them (core/check/value_scan.cc); nullptr for any other tensor.
const uint8_t* StoredQ4KBlocks(const LogicalTensor& t);

// Whether Q4KMeanLanes takes a region at SIMD level `simd`: AVX-512 or
// AVX2 (whose kernels convert each code's float value, as the decoder
// computes it, rather than look its level up); row
// 0's first element of the region (`first`) at a multiple of 64 and the
// rows `stride` elements apart a multiple of 256 (whole super-blocks, as
// every ggml row of Q4_K is), so that every 64 columns are a chunk of a
// super-block (two sub-blocks); and the cells (`run`: their column edges
// relative to the region's first column, run[0] = 0) all of one width 16,
// 32 or 64, in whole chunks.
bool Q4KMeanLanesApply(DecodeSimd simd, int64_t first, int64_t stride,
                       const std::vector<int64_t>& run);

// Adds `nrows` rows of the region into the mean's lanes, as
// CellLanesScalar (core/heatmap.cc) adds the decoded values: row r is
// elements [first + r * stride, first + r * stride + run.back()) of the Q4_K
// tensor whose blocks start at `blocks`; cell j's lanes are
// lanes[16 j, 16 j + 16). `start` starts them at +0.0 rather than loading
// them; `finish` combines each cell's into sums[j] (SumOfLanes' tree) rather
// than storing them. The levels are computed as DecodeQ4_K computes them
// (d1 * q - m1: a product and a difference, each rounded once), so the
// values added are the decoder's bits, NaN and infinities included.
// REQUIRES: Q4KMeanLanesApply(simd, first, stride, run) at the active
// level; the blocks hold every element read; called inside GuardedRead (the
// blocks are mapped file bytes).
void Q4KMeanLanes(const uint8_t* blocks, int64_t first, int64_t stride,
                  int64_t nrows, const std::vector<int64_t>& run, bool start,
                  bool finish, double* lanes, double* sums);

// Whether Q4KColumnMax takes a region at SIMD level `simd`: AVX-512, row
// 0's first element (`first`) at a multiple of 64, rows `stride` elements
// apart a multiple of 256, and `ncols` a multiple of 64.
bool Q4KColumnMaxApply(DecodeSimd simd, int64_t first, int64_t stride,
                       int64_t ncols);

// The absmax heatmap's column maxima (heatmap.cc's ColumnMaxRows) from the
// blocks: colmax[c] = max(colmax[c], bits of |x| with the sign cleared) for
// each element x of column c of `nrows` rows (row r: elements
// [first + r * stride, first + r * stride + ncols) of the Q4_K tensor at
// `blocks`), each x the decoder's value, its level looked up in a table of
// its sub-block's 16 (computed as the decoder computes them), with no
// float32 buffer between. A NaN's payload may differ from the decoder's (d
// and dmin by F16C); a NaN cell's value is canonical whatever it is.
// REQUIRES: Q4KColumnMaxApply(simd, first, stride, ncols) at the active
// level; colmax holds ncols; called inside GuardedRead.
void Q4KColumnMax(const uint8_t* blocks, int64_t first, int64_t stride,
                  int64_t nrows, int64_t ncols, uint32_t* colmax);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_HEATMAP_Q4K_H_
