// The gaps to the neighbouring levels of a plain float format's elements,
// looked up from the decoded float32 value alone: what a pass that needs
// only the steps (the error heatmap) reads instead of inspecting every
// element, which is what kept the F16 error heatmap some 50x slower than
// its value mode.
#ifndef TENSORMORPH_CORE_QUANT_FLOAT_STEPS_H_
#define TENSORMORPH_CORE_QUANT_FLOAT_STEPS_H_

#include <bit>
#include <cstdint>

#include "core/dtype.h"

namespace tensormorph {

// Within one binary exponent a float format's levels are evenly spaced, so
// the steps of a decoded value are a function of its float32 sign, its
// float32 exponent and whether it is a power of two (where the step below
// is the finer one). The table holds them for those 1024 keys.
class FloatStepTable {
 public:
  struct Steps {
    double below = 0, above = 0;  // as ScalarInfo's step_below, step_above
  };

  // The table of `dtype`, built once from the scalar reference
  // (InspectElement) on every code of the format, or nullptr when `dtype`
  // is not F16 or BF16 or when any code's steps differ from its key's
  // (then the caller inspects, as before). Thread-safe.
  static const FloatStepTable* For(DType dtype);

  // The steps of a value the format decodes to, bit for bit those
  // InspectElement gives its code. NaN steps for +/-inf and NaN.
  // REQUIRES: `v` is a value of the format (Decode's output).
  const Steps& Of(float v) const { return table_[KeyOf(v)]; }

  static uint32_t KeyOf(float v) {
    const uint32_t b = std::bit_cast<uint32_t>(v);
    return (b >> 23) << 1 | ((b & 0x7fffffu) == 0 ? 1u : 0u);
  }

 private:
  // Every 16-bit code of `dtype` inspected: the first code of a key fills
  // it, every later one must agree, else nullptr.
  static const FloatStepTable* Build(DType dtype);

  Steps table_[1024];
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_FLOAT_STEPS_H_
