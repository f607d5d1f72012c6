#include "core/quant/float_steps.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/quant/codec.h"

namespace tensormorph {
namespace {

bool SameBits(double a, double b) {
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

}  // namespace

const FloatStepTable* FloatStepTable::Build(DType dtype) {
  auto table = std::make_unique<FloatStepTable>();
  bool seen[1024] = {};
  for (uint32_t code = 0; code < 65536; ++code) {
    const uint8_t bytes[2] = {static_cast<uint8_t>(code & 0xff),
                              static_cast<uint8_t>(code >> 8)};
    ScalarInfo s;
    if (!InspectElement(dtype, absl::MakeConstSpan(bytes, 2), 0, &s).ok()) {
      return nullptr;
    }
    Steps& steps = table->table_[KeyOf(s.value)];
    if (!seen[KeyOf(s.value)]) {
      seen[KeyOf(s.value)] = true;
      steps = {s.step_below, s.step_above};
      continue;
    }
    if (!SameBits(steps.below, s.step_below) ||
        !SameBits(steps.above, s.step_above)) {
      return nullptr;
    }
  }
  return table.release();  // lives as long as the process
}

const FloatStepTable* FloatStepTable::For(DType dtype) {
  static const FloatStepTable* const f16 = Build(DType::kF16);
  static const FloatStepTable* const bf16 = Build(DType::kBF16);
  switch (dtype) {
    case DType::kF16:
      return f16;
    case DType::kBF16:
      return bf16;
    default:
      return nullptr;
  }
}

}  // namespace tensormorph
