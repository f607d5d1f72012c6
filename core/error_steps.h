// One element's error in steps, as every view that compares a decoded value
// with its source states it (the error heatmap, the Scalar Inspector): the
// step measures on the source's side of the decoded value.
#ifndef TENSORMORPH_CORE_ERROR_STEPS_H_
#define TENSORMORPH_CORE_ERROR_STEPS_H_

#include <cmath>
#include <limits>

namespace tensormorph {

// |source - decoded| / the step towards the source (step_above when the
// source lies above the decoded value, else step_below). NaN when either is
// NaN; 0 when they are equal (same-signed infinities too: inf - inf would
// be NaN); +inf when that step is not above 0 or the difference is infinite.
inline double ElementErrorSteps(double source, double decoded,
                                double step_below, double step_above) {
  if (std::isnan(source) || std::isnan(decoded))
    return std::numeric_limits<double>::quiet_NaN();
  if (source == decoded) return 0;
  const double err = std::fabs(source - decoded);
  const double step = source > decoded ? step_above : step_below;
  return step > 0 && std::isfinite(err) ? err / step : INFINITY;
}

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_ERROR_STEPS_H_
