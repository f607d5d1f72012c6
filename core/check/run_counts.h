// What one run of decoded values holds, for the value rules of `tensormorph
// check` (value_scan.h): NaN, Inf, values past fp16's range, zeros, values
// that differ from the group's first, and values on the group's end levels.
// Counted at decode speed: an AVX2 pass where the CPU has one, whose counts
// are the scalar reference's exactly (tests hold them to it).
#ifndef TENSORMORPH_CORE_CHECK_RUN_COUNTS_H_
#define TENSORMORPH_CORE_CHECK_RUN_COUNTS_H_

#include <cstdint>

#include "core/quant/encoding.h"

namespace tensormorph {

struct RunCounts {
  int64_t nan = 0, inf = 0, zeros = 0, differ = 0, at_low = 0, at_high = 0,
          over = 0;
};

// Over v[0, n): nan (x != x), inf (|x| == Inf), zeros (x == 0), differ
// (x != first), at_low / at_high (x == lo / x == hi, x neither zero nor
// infinite: a zero on an end level is exact, not clipped) and over (finite
// |x| > 65504, the largest float16).
RunCounts CountRun(const float* v, int64_t n, float first, float lo, float hi);

// For each of runs[0, n) (consecutive in v, from v[0]): ordinary[i] = 1 when
// the run is a whole group (count == len) and CountRun over it (first its
// v value, lo and hi its range_min and range_max as float) would show
// nothing a value rule fires on: no NaN, Inf or value past fp16, not every
// value zero, not every value its first, at most a quarter of the values on
// the end levels (4 * (at_low + at_high) <= len), the levels finite and
// distinct. 0 says only "count it" (CountRun). One call per piece: a call
// per run of 32 values cost more than the counting.
void MarkOrdinaryRuns(const float* v, const QuantRun* runs, int64_t n,
                      int64_t len, uint8_t* ordinary);

// The same counts, one element at a time: the reference CountRun is held to.
RunCounts CountRunScalar(const float* v, int64_t n, float first, float lo,
                         float hi);

// Only nan, inf and over of CountRun (the rest 0): what a plain tensor's
// values are checked for.
RunCounts CountSpecials(const float* v, int64_t n);

// Whether any of n 16-bit float codes at `codes` (F16 or BF16 bits, little
// endian, any alignment) has a magnitude code (its low 15 bits) of at least
// `limit`: with F16's 0x7c00 a NaN or Inf, with BF16's 0x4780 a NaN, an Inf
// or a finite value past 65504. What CountSpecials of their decoded values
// would count anything for, read from the stored bytes without decoding
// them (a plain F16 or BF16 tensor: value_scan.h).
bool AnyFloat16Special(const uint8_t* codes, int64_t n, uint16_t limit);
inline constexpr uint16_t kF16SpecialLimit = 0x7c00;   // Inf, NaN
inline constexpr uint16_t kBF16SpecialLimit = 0x4780;  // 65536 and past

// The same, one code at a time: the reference AnyFloat16Special is held to.
bool AnyFloat16SpecialScalar(const uint8_t* codes, int64_t n, uint16_t limit);

// Whether CountRun, CountSpecials and AnyFloat16Special take the AVX2 pass on
// this CPU; false makes them take the scalar one (tests compare the two).
bool RunCountsSimd();
void SetRunCountsSimd(bool on);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_CHECK_RUN_COUNTS_H_
