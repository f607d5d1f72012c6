#include "core/quant/levels.h"

#include <algorithm>
#include <cmath>

namespace tensormorph {
namespace {

// One level as the decoders produce it: float products and sums, rounded one
// at a time (-ffp-contract=off for this file too, see CMakeLists.txt).
float LevelValue(float scale, float level, float offset) {
  const float product = scale * level;
  return offset != 0 ? product + offset : product;
}

}  // namespace

std::vector<double> GroupLevels(const ScalarInfo& s) {
  std::vector<double> out;
  const float scale = static_cast<float>(s.grid_scale);
  const float offset = static_cast<float>(s.grid_offset);
  switch (s.grid) {
    case ScalarInfo::Grid::kNone:
      return out;
    case ScalarInfo::Grid::kUniform: {
      // Infinite bounds (a zero-point of +-Inf, HQQ's float zero) pass
      // the compare and make the difference NaN: no level of them is
      // finite, and counting up to infinity never ends.
      if (!std::isfinite(s.grid_min) || !std::isfinite(s.grid_max) ||
          !(s.grid_min <= s.grid_max) ||
          s.grid_max - s.grid_min >= double{1 << kMaxListedLevelBits}) {
        return out;
      }
      for (double l = s.grid_min; l <= s.grid_max; l += 1) {
        out.push_back(LevelValue(scale, static_cast<float>(l), offset));
      }
      break;
    }
    case ScalarInfo::Grid::kCodebook: {
      if (s.codebook == nullptr || s.codebook_size <= 0 ||
          s.codebook_size > (1 << kMaxListedLevelBits)) {
        return out;
      }
      for (int32_t i = 0; i < s.codebook_size; ++i) {
        const float entry = static_cast<float>(s.codebook[i]);
        if (!std::isfinite(entry)) continue;
        out.push_back(LevelValue(scale, entry, offset));
      }
      break;
    }
  }
  // A non-finite scale makes non-finite "levels": no value lands on them.
  out.erase(std::remove_if(out.begin(), out.end(),
                           [](double v) { return !std::isfinite(v); }),
            out.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  for (double& v : out) v = v == 0 ? 0.0 : v;  // -0 reads as 0
  return out;
}

}  // namespace tensormorph
