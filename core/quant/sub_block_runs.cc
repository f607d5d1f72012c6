#include "core/quant/sub_block_runs.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/quant/block_util.h"
#include "core/quant/float_formats.h"
#include "core/quant/kquant_scales.h"

namespace tensormorph {
namespace {

// FillUniformSteps' arithmetic, into a run.
inline void UniformRun(int64_t count, int64_t group, double scale,
                       double level_min, double level_max, double offset,
                       QuantRun* r) {
  const double a = scale * level_min + offset;
  const double b = scale * level_max + offset;
  r->count = count;
  r->group = group;
  r->range_min = std::min(a, b);
  r->range_max = std::max(a, b);
  r->step_below = r->step_above = std::fabs(scale);
}

// Q8_0: an f16 scale and 32 signed bytes (InspectQ8).
void Q8_0Runs(const uint8_t* p, int64_t group, QuantRun* out) {
  UniformRun(32, group, LoadF16(p), -128, 127, 0, out);
}

// Q4_0: an f16 scale and 32 nibbles, code - 8 (InspectQ4_0).
void Q4_0Runs(const uint8_t* p, int64_t group, QuantRun* out) {
  UniformRun(32, group, LoadF16(p), -8, 7, 0, out);
}

// Q4_1: an f16 scale d and offset m, and 32 nibbles, d * code + m
// (InspectQ4_1).
void Q4_1Runs(const uint8_t* p, int64_t group, QuantRun* out) {
  UniformRun(32, group, LoadF16(p), 0, 15, LoadF16(p + 2), out);
}

// TQ2_0: 256 2-bit codes, then an f16 scale; code - 1, three levels
// (InspectTq2_0's FillTernary).
void Tq2_0Runs(const uint8_t* p, int64_t group, QuantRun* out) {
  UniformRun(256, group, LoadF16(p + 64), -1, 1, 0, out);
}

// Q2_K: sixteen sub-blocks of 16, each scale byte's low four bits a
// multiple of d and its high four of dmin (d and dmin after the codes):
// dl * code - ml, codes 0..3 (InspectQ2_K).
void Q2_KRuns(const uint8_t* p, int64_t group, QuantRun* out) {
  const float d = LoadF16(p + 80), min = LoadF16(p + 82);
  for (int sub = 0; sub < 16; ++sub) {
    const float dl = d * (p[sub] & 0xF), ml = min * (p[sub] >> 4);
    UniformRun(16, group + sub, dl, 0, 3, -static_cast<double>(ml), out + sub);
  }
}

// Q3_K: sixteen sub-blocks of 16, each a 6-bit scale (unpacked from the
// 12 bytes at 96) less 32 times d (at 108): dl * (code - 4), codes 0..7
// (InspectQ3_K).
void Q3_KRuns(const uint8_t* p, int64_t group, QuantRun* out) {
  const float d = LoadF16(p + 108);
  int8_t scales[16];
  UnpackQ3Scales(p + 96, scales);
  for (int sub = 0; sub < 16; ++sub) {
    const float dl = d * (scales[sub] - 32);
    UniformRun(16, group + sub, dl, -4, 3, 0, out + sub);
  }
}

// Q4_K and Q5_K: f16 d and dmin, then 6-bit scales and mins of eight
// sub-blocks of 32 (InspectQ45_K).
template <int kMaxLevel>
void Q45_KRuns(const uint8_t* p, int64_t group, QuantRun* out) {
  const float d = LoadF16(p);
  const float min = LoadF16(p + 2);
  for (int sub = 0; sub < 8; ++sub) {
    uint8_t sc, m;
    ScaleMinK4(sub, p + 4, &sc, &m);
    const float d1 = d * sc;
    const float m1 = min * m;
    UniformRun(32, group + sub, d1, 0, kMaxLevel, -static_cast<double>(m1),
               out + sub);
  }
}

// FillCodebookSteps' range, into a run: scale times the codebook's least
// and greatest level, in double, in its order.
inline void CodebookRange(int64_t count, int64_t group, double scale,
                          double level_min, double level_max, QuantRun* r) {
  r->count = count;
  r->group = group;
  r->range_min = std::min(scale * level_min, scale * level_max);
  r->range_max = std::max(scale * level_min, scale * level_max);
}

// IQ4_NL: an f16 d, levels kvalues_iq4nl, -127 to 113 (InspectIq4Nl).
void Iq4NlRanges(const uint8_t* p, int64_t group, QuantRun* out) {
  CodebookRange(32, group, LoadF16(p), -127, 113, out);
}

// IQ4_XS: an f16 d, the 6-bit scales of eight sub-blocks of 32 (low four
// bits in scales_l at byte 4, high two in scales_h at byte 2), each
// sub-block's scale d * (ls - 32) in float (InspectIq4Xs).
void Iq4XsRanges(const uint8_t* p, int64_t group, QuantRun* out) {
  const float d = LoadF16(p);
  for (int ib = 0; ib < 8; ++ib) {
    const float dl = d * (Iq4XsSubScale(p, ib) - 32);
    CodebookRange(32, group + ib, dl, -127, 113, out + ib);
  }
}

// MXFP4: an E8M0 scale byte; the true scale (twice ggml's halved one)
// times E2M1's levels, -6 to 6 (InspectMxfp4's FillFp4).
void Mxfp4Ranges(const uint8_t* p, int64_t group, QuantRun* out) {
  CodebookRange(32, group, 2.0 * E8M0ToF32Half(p[0]), -6, 6, out);
}

}  // namespace

SubBlockRunsFn GetSubBlockRanges(DType dtype) {
  switch (dtype) {
    case DType::kIQ4_NL:
      return Iq4NlRanges;
    case DType::kIQ4_XS:
      return Iq4XsRanges;
    case DType::kMXFP4:
      return Mxfp4Ranges;
    default:
      return GetSubBlockRuns(dtype);
  }
}

SubBlockRunsFn GetSubBlockRuns(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return Q8_0Runs;
    case DType::kQ4_0:
      return Q4_0Runs;
    case DType::kQ4_1:
      return Q4_1Runs;
    case DType::kTQ2_0:
      return Tq2_0Runs;
    case DType::kQ2_K:
      return Q2_KRuns;
    case DType::kQ3_K:
      return Q3_KRuns;
    case DType::kQ4_K:
      return Q45_KRuns<15>;
    case DType::kQ5_K:
      return Q45_KRuns<31>;
    default:
      return nullptr;
  }
}

}  // namespace tensormorph
