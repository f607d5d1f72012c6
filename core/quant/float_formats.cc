#include "core/quant/float_formats.h"

namespace tensormorph {

const float* F16Table() {
  static const float* const table = [] {
    auto* t = new float[65536];
    for (uint32_t h = 0; h < 65536; ++h)
      t[h] = F16ToF32(static_cast<uint16_t>(h));
    return t;
  }();
  return table;
}

const float* F8E4M3Table() {
  static const float* const table = [] {
    auto* t = new float[256];
    for (uint32_t x = 0; x < 256; ++x)
      t[x] = F8E4M3ToF32(static_cast<uint8_t>(x));
    return t;
  }();
  return table;
}

const float* Ue4m3HalfTable() {
  static const float* const table = [] {
    auto* t = new float[256];
    for (uint32_t x = 0; x < 256; ++x)
      t[x] = Ue4m3ToF32Half(static_cast<uint8_t>(x));
    return t;
  }();
  return table;
}

}  // namespace tensormorph
