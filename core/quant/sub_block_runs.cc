#include "core/quant/sub_block_runs.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/quant/block_util.h"
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

}  // namespace

SubBlockRunsFn GetSubBlockRuns(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return Q8_0Runs;
    case DType::kQ4_0:
      return Q4_0Runs;
    case DType::kQ4_K:
      return Q45_KRuns<15>;
    case DType::kQ5_K:
      return Q45_KRuns<31>;
    default:
      return nullptr;
  }
}

}  // namespace tensormorph
