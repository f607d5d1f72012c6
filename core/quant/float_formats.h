// Exact conversions of the small float formats to float32, and the level
// tables the block formats share.
#ifndef TENSORMORPH_CORE_QUANT_FLOAT_FORMATS_H_
#define TENSORMORPH_CORE_QUANT_FLOAT_FORMATS_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tensormorph {

inline float BitsToF32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint32_t F32ToBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// IEEE binary16 to binary32, exact for every input (NaN payloads kept).
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) return BitsToF32(sign | 0x7F800000 | (mant << 13));
  if (exp != 0) return BitsToF32(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return BitsToF32(sign);
  // Subnormal: normalise the mantissa.
  int e = -1;
  do {
    ++e;
    mant <<= 1;
  } while ((mant & 0x400) == 0);
  mant &= 0x3FF;
  return BitsToF32(sign | (static_cast<uint32_t>(112 - e) << 23) |
                   (mant << 13));
}

// All 65536 binary16 values as float32 (built once from F16ToF32): decoders
// look scales up here instead of converting bit by bit.
const float* F16Table();
inline float F16ToF32Fast(uint16_t h) {
  static const float* const table = F16Table();
  return table[h];
}

inline float BF16ToF32(uint16_t b) {
  return BitsToF32(static_cast<uint32_t>(b) << 16);
}

// OCP FP8 E4M3 "fn": bias 7, no infinities, S.1111.111 is NaN.
inline float F8E4M3ToF32(uint8_t b) {
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  const int exp = (b >> 3) & 0xF;
  const int mant = b & 0x7;
  if (exp == 0xF && mant == 0x7) return std::nanf("");
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);
  return sign * std::ldexp(1.0f + mant / 8.0f, exp - 7);
}

// All 256 of F8E4M3ToF32's values (built once from it): decoders look
// codes and scales up here instead of calling ldexp per value.
const float* F8E4M3Table();
inline float F8E4M3ToF32Fast(uint8_t b) {
  static const float* const table = F8E4M3Table();
  return table[b];
}

// OCP FP8 E5M2: the top byte of a binary16.
inline float F8E5M2ToF32(uint8_t b) {
  return F16ToF32(static_cast<uint16_t>(b) << 8);
}

// E4M3 "fnuz" (AMD): bias 8, no negative zero, 0x80 is the only NaN.
inline float F8E4M3FnuzToF32(uint8_t b) {
  if (b == 0x80) return std::nanf("");
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  const int exp = (b >> 3) & 0xF;
  const int mant = b & 0x7;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -10);
  return sign * std::ldexp(1.0f + mant / 8.0f, exp - 8);
}

// E5M2 "fnuz": bias 16, no infinities, 0x80 is the only NaN.
inline float F8E5M2FnuzToF32(uint8_t b) {
  if (b == 0x80) return std::nanf("");
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  const int exp = (b >> 2) & 0x1F;
  const int mant = b & 0x3;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -17);
  return sign * std::ldexp(1.0f + mant / 4.0f, exp - 16);
}

// E8M0: an unsigned power of two 2^(e-127); 0xFF is NaN.
inline float E8M0ToF32(uint8_t e) {
  if (e == 0xFF) return std::nanf("");
  if (e == 0) return BitsToF32(0x00400000);  // 2^-127, subnormal
  return BitsToF32(static_cast<uint32_t>(e) << 23);
}

// ggml's E8M0 helper for MXFP4 blocks: half of E8M0ToF32 (its FP4 codebook
// is doubled). NaN is not special-cased, exactly as in ggml.
inline float E8M0ToF32Half(uint8_t e) {
  const uint32_t bits =
      e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  return BitsToF32(bits);
}

// FP4 E2M1 magnitudes; bit 3 of a code is the sign.
inline constexpr float kE2M1Values[16] = {
    0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// ggml's doubled E2M1 codebook (kvalues_mxfp4).
inline constexpr int8_t kMxfp4Doubled[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                             0, -1, -2, -3, -4, -6, -8, -12};

// ggml's IQ4_NL / IQ4_XS codebook (kvalues_iq4nl).
inline constexpr int8_t kIq4NlValues[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// UE4M3 (unsigned E4M3) sub-block scale of NVFP4, halved as ggml does to
// match its doubled codebook; 0 and 0x7F decode to 0.
inline float Ue4m3ToF32Half(uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const int exp = (x >> 3) & 0xF;
  const int man = x & 0x7;
  const float raw =
      exp == 0 ? std::ldexp(static_cast<float>(man), -9)
               : std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
  return raw * 0.5f;
}
// All 256 of Ue4m3ToF32Half's values (built once from it), for decoders.
const float* Ue4m3HalfTable();

// FP6 E2M3 (bias 1) and E3M2 (bias 3), no infinities or NaNs (OCP MX spec).
inline float F6E2M3ToF32(uint8_t c) {
  const float sign = (c & 0x20) ? -1.0f : 1.0f;
  const int exp = (c >> 3) & 0x3;
  const int mant = c & 0x7;
  if (exp == 0) return sign * (mant / 8.0f);
  return sign * std::ldexp(1.0f + mant / 8.0f, exp - 1);
}
inline float F6E3M2ToF32(uint8_t c) {
  const float sign = (c & 0x20) ? -1.0f : 1.0f;
  const int exp = (c >> 2) & 0x7;
  const int mant = c & 0x3;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -4);
  return sign * std::ldexp(1.0f + mant / 4.0f, exp - 3);
}

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_FLOAT_FORMATS_H_
