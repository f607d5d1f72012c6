// The fixed tree that combines partial sums kept in lanes, shared by
// ComputeStats' moments (core/stats.h) and the heatmap's cell means
// (core/heatmap.h), whose contracts both name it: the same bits wherever a
// sum is split into lanes, whatever the SIMD level.
#ifndef TENSORMORPH_CORE_UTIL_LANE_SUM_H_
#define TENSORMORPH_CORE_UTIL_LANE_SUM_H_

namespace tensormorph {

// Partial sums per summed value: element k of a run goes to lane k % 16.
inline constexpr int kSumLanes = 16;

// s[k] + s[k + 8] for k < 8, those eight as q[k] + q[k + 4], then
// r[k] + r[k + 2], then the two; every addition rounded on its own.
inline double SumOfLanes(const double* s) {
  const double a0 = s[0] + s[8], a1 = s[1] + s[9], a2 = s[2] + s[10],
               a3 = s[3] + s[11], a4 = s[4] + s[12], a5 = s[5] + s[13],
               a6 = s[6] + s[14], a7 = s[7] + s[15];
  const double b0 = a0 + a4, b1 = a1 + a5, b2 = a2 + a6, b3 = a3 + a7;
  const double c0 = b0 + b2, c1 = b1 + b3;
  return c0 + c1;
}

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_UTIL_LANE_SUM_H_
