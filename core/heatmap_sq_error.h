// The squared-error heatmap's sums (core/heatmap.h's sq-error): each cell's
// terms w * (x - x̂)^2 added into 16 partial sums by column offset, a row of
// the region at a time, in vectors where the CPU has them. One sum in
// element order per cell, a dependent addition per element, kept the map
// at 0.31-0.41x a decode of the tensor and of its source (issue 35).
#ifndef TENSORMORPH_CORE_HEATMAP_SQ_ERROR_H_
#define TENSORMORPH_CORE_HEATMAP_SQ_ERROR_H_

#include <cstdint>
#include <vector>

#include "core/quant/decode_simd.h"

namespace tensormorph {

// Adds one row of the region into its cells' lanes: for cell j, covering
// the row's columns [run[j], run[j + 1]) (run[0] = 0), and each column c
// there, lanes[16 j + (c - run[j]) % 16] += w[c] * (e * e), where e =
// double(x[c]) - double(v[c]); the difference, the square, the product and
// the sum each rounded on its own in double, never fused. Every SIMD level
// gives the same bits (the lane of a term depends on its column alone, and
// a lane's terms come in column order), NaN payloads aside: a caller makes
// NaN cells canonical. Unweighted is w of 1 (exact products).
// REQUIRES: x, v and w hold run.back() elements, lanes 16 * (run.size() -
// 1); no lane is -0.0, as none is when lanes start at +0.0 (a row's last,
// partial vector adds +0.0 to the lanes it does not reach: that leaves the
// bits of anything but -0.0).
void AddSqErrorRow(const float* x, const float* v, const double* w,
                   const std::vector<int64_t>& run, DecodeSimd simd,
                   double* lanes);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_HEATMAP_SQ_ERROR_H_
