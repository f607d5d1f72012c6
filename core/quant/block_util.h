// Helpers shared by the ggml block decoders.
#ifndef TENSORMORPH_CORE_QUANT_BLOCK_UTIL_H_
#define TENSORMORPH_CORE_QUANT_BLOCK_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/quant/float_formats.h"
#include "core/quant/scalar_info.h"

// Builds a decoder for AVX2 and for the baseline ISA, dispatched at load
// time (portable binaries: no -march=native). The arithmetic is the same
// in both; -ffp-contract=off keeps multiply and add rounded separately.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TM_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define TM_MULTIVERSION
#endif

namespace tensormorph {

inline float LoadF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32Fast(h);
}

// IQ4_XS's 6-bit scale of sub-block ib (< 8) of the block at `p`: its low
// four bits from scales_l (byte 4 on, two a byte), its high two from
// scales_h (bytes 2-3), as ggml's dequantize_row_iq4_xs assembles them; the
// sub-block's scale is then d * (ls - 32) in float.
inline int Iq4XsSubScale(const uint8_t* p, int ib) {
  uint16_t scales_h;
  std::memcpy(&scales_h, p + 2, 2);
  return ((p[4 + ib / 2] >> 4 * (ib % 2)) & 0xf) |
         (((scales_h >> 2 * ib) & 3) << 4);
}

// Fills step and range for a uniform grid: value = scale * level + offset
// with integer levels in [level_min, level_max].
inline void FillUniformSteps(double scale, double level_min, double level_max,
                             double offset, ScalarInfo* s) {
  const double a = scale * level_min + offset;
  const double b = scale * level_max + offset;
  s->range_min = std::min(a, b);
  s->range_max = std::max(a, b);
  s->step = s->step_below = s->step_above = std::fabs(scale);
  s->grid = ScalarInfo::Grid::kUniform;
  s->grid_scale = scale;
  s->grid_offset = offset;
  s->grid_min = level_min;
  s->grid_max = level_max;
}

// Fills step and range for a codebook grid: value = scale * levels[code].
// `levels` need not be sorted; duplicate levels (e.g. +0 and -0) collapse.
// REQUIRES: `levels` outlives `s` (GroupLevels reads it).
inline void FillCodebookSteps(double scale, const double* levels, int n,
                              double level, ScalarInfo* s) {
  double lo = levels[0], hi = levels[0];
  double below = -INFINITY, above = INFINITY;  // neighbouring levels
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, levels[i]);
    hi = std::max(hi, levels[i]);
    if (levels[i] < level) below = std::max(below, levels[i]);
    if (levels[i] > level) above = std::min(above, levels[i]);
  }
  double gap_below = level - below;
  double gap_above = above - level;
  if (std::isinf(gap_below)) gap_below = gap_above;
  if (std::isinf(gap_above)) gap_above = gap_below;
  const double a = std::fabs(scale);
  // A negative scale mirrors the grid: what was above is now below.
  s->step_below = a * (scale < 0 ? gap_above : gap_below);
  s->step_above = a * (scale < 0 ? gap_below : gap_above);
  s->step = 0.5 * (s->step_below + s->step_above);
  s->range_min = std::min(scale * lo, scale * hi);
  s->range_max = std::max(scale * lo, scale * hi);
  s->grid = ScalarInfo::Grid::kCodebook;
  s->grid_scale = scale;
  s->grid_offset = 0;
  s->codebook = levels;
  s->codebook_size = n;
}

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_BLOCK_UTIL_H_
