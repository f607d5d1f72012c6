// The packed sub-block scales of ggml's K-quants, unpacked as ggml does.
// Shared by the scalar reference decoders and the vector paths, which the
// tests hold to them bit for bit.
#ifndef TENSORMORPH_CORE_QUANT_KQUANT_SCALES_H_
#define TENSORMORPH_CORE_QUANT_KQUANT_SCALES_H_

#include <cstdint>
#include <cstring>

namespace tensormorph {

// The sixteen 6-bit scales of a Q3_K block (12 packed bytes).
inline void UnpackQ3Scales(const uint8_t packed[12], int8_t out[16]) {
  constexpr uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  std::memcpy(out, aux, 16);
}

// ggml's get_scale_min_k4: the j-th 6-bit scale and min of the 12 packed
// bytes of a Q4_K or Q5_K block.
inline void ScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_KQUANT_SCALES_H_
