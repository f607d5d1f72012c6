// Plain floats and integers: one code per element, no shared parameters.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/quant/block_util.h"
#include "core/quant/codec.h"
#include "core/quant/decode_simd.h"
#include "core/quant/float_formats.h"

namespace tensormorph {
namespace {

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// ---- Integers -------------------------------------------------------------

template <typename T>
void DecodeInt(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = static_cast<float>(Load<T>(src + i * sizeof(T)));
  }
}

template <typename T>
ScalarInfo InspectInt(const uint8_t* src, int) {
  ScalarInfo s;
  const T v = Load<T>(src);
  s.code = static_cast<int64_t>(v);
  s.code_bits_value = static_cast<std::make_unsigned_t<T>>(v);
  s.code_width = sizeof(T) * 8;
  s.level = static_cast<double>(v);
  s.step = s.step_below = s.step_above = 1;
  s.range_min = static_cast<double>(std::numeric_limits<T>::min());
  s.range_max = static_cast<double>(std::numeric_limits<T>::max());
  s.value = static_cast<float>(v);
  return s;
}

void DecodeBool(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i] != 0 ? 1.0f : 0.0f;
}

ScalarInfo InspectBool(const uint8_t* src, int) {
  ScalarInfo s;
  s.code = src[0];
  s.code_bits_value = src[0];
  s.code_width = 8;
  s.level = src[0] != 0 ? 1 : 0;
  s.step = s.step_below = s.step_above = 1;
  s.range_min = 0;
  s.range_max = 1;
  s.value = src[0] != 0 ? 1.0f : 0.0f;
  return s;
}

// ---- Floats ---------------------------------------------------------------

// Fills the steps and range of a sign-magnitude float code whose decoder is
// `dec`; `max_mag` is the largest finite magnitude code, `sign_bit` the mask
// of the sign (0 for unsigned formats).
void FillFloatSteps(float (*dec)(uint32_t), uint32_t code, uint32_t sign_bit,
                    uint32_t max_mag, ScalarInfo* s) {
  const uint32_t mag = code & ~sign_bit;
  const double max_value = dec(max_mag);
  s->range_max = max_value;
  s->range_min = sign_bit != 0 ? -max_value : dec(0);
  if (mag > max_mag) {  // Inf or NaN: no neighbours.
    s->step = s->step_below = s->step_above = std::nan("");
    return;
  }
  const double v = std::fabs(static_cast<double>(dec(mag)));
  const double outward = mag < max_mag ? dec(mag + 1) - v : v - dec(mag - 1);
  const double inward =
      mag > 0 ? v - dec(mag - 1) : (sign_bit != 0 ? dec(1) : outward);
  const bool negative = (code & sign_bit) != 0;
  s->step_above = negative ? inward : outward;
  s->step_below = negative ? outward : inward;
  s->step = 0.5 * (s->step_above + s->step_below);
}

template <float (*kDec)(uint32_t), int kBytes, uint32_t kSignBit,
          uint32_t kMaxMag>
ScalarInfo InspectSmallFloat(const uint8_t* src, int) {
  ScalarInfo s;
  uint32_t code = 0;
  std::memcpy(&code, src, kBytes);
  s.code_bits_value = code;
  s.code = code;
  s.code_width = kBytes * 8;
  s.code_is_float = true;
  s.value = kDec(code);
  s.level = s.value;
  FillFloatSteps(kDec, code, kSignBit, kMaxMag, &s);
  return s;
}

float DecF16(uint32_t c) { return F16ToF32Fast(static_cast<uint16_t>(c)); }
float DecBF16(uint32_t c) { return BF16ToF32(static_cast<uint16_t>(c)); }
float DecE4M3(uint32_t c) { return F8E4M3ToF32Fast(static_cast<uint8_t>(c)); }
float DecE5M2(uint32_t c) { return F8E5M2ToF32(static_cast<uint8_t>(c)); }
float DecE8M0(uint32_t c) { return E8M0ToF32(static_cast<uint8_t>(c)); }
float DecE4M3Fnuz(uint32_t c) {
  return F8E4M3FnuzToF32(static_cast<uint8_t>(c));
}
float DecE5M2Fnuz(uint32_t c) {
  return F8E5M2FnuzToF32(static_cast<uint8_t>(c));
}
float DecF4(uint32_t c) { return kE2M1Values[c & 0xF]; }
float DecF6E2M3(uint32_t c) { return F6E2M3ToF32(static_cast<uint8_t>(c)); }
float DecF6E3M2(uint32_t c) { return F6E3M2ToF32(static_cast<uint8_t>(c)); }

template <float (*kDec)(uint32_t), typename T>
TM_MULTIVERSION void DecodeSmallFloat(const uint8_t* src, int64_t n,
                                      float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = kDec(Load<T>(src + i * sizeof(T)));
}

// F16 and BF16: the vector conversions when the CPU has them, else the
// scalar reference above.
void DecodeF16(const uint8_t* src, int64_t n, float* dst) {
  if (!DecodeF16Simd(src, n, dst))
    DecodeSmallFloat<DecF16, uint16_t>(src, n, dst);
}
void DecodeBF16(const uint8_t* src, int64_t n, float* dst) {
  if (!DecodeBF16Simd(src, n, dst)) {
    DecodeSmallFloat<DecBF16, uint16_t>(src, n, dst);
  }
}

void DecodeF32(const uint8_t* src, int64_t n, float* dst) {
  std::memcpy(dst, src, n * sizeof(float));
}

ScalarInfo InspectF32(const uint8_t* src, int) {
  ScalarInfo s;
  const uint32_t bits = Load<uint32_t>(src);
  const float v = BitsToF32(bits);
  s.code_bits_value = bits;
  s.code = bits;
  s.code_width = 32;
  s.code_is_float = true;
  s.value = v;
  s.level = v;
  s.range_min = -FLT_MAX;
  s.range_max = FLT_MAX;
  if (std::isfinite(v)) {
    s.step_above = static_cast<double>(std::nextafter(v, INFINITY)) - v;
    s.step_below = v - static_cast<double>(std::nextafter(v, -INFINITY));
    if (std::isinf(s.step_above)) s.step_above = s.step_below;
    if (std::isinf(s.step_below)) s.step_below = s.step_above;
    s.step = 0.5 * (s.step_above + s.step_below);
  } else {
    s.step = s.step_below = s.step_above = std::nan("");
  }
  return s;
}

void DecodeF64(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = static_cast<float>(Load<double>(src + i * 8));
  }
}

ScalarInfo InspectF64(const uint8_t* src, int) {
  ScalarInfo s;
  const double v = Load<double>(src);
  s.code_bits_value = Load<uint64_t>(src);
  s.code = static_cast<int64_t>(s.code_bits_value);
  s.code_width = 64;
  s.code_is_float = true;
  s.value = static_cast<float>(v);
  s.level = v;
  s.range_min = -DBL_MAX;
  s.range_max = DBL_MAX;
  if (std::isfinite(v)) {
    s.step_above = std::nextafter(v, INFINITY) - v;
    s.step_below = v - std::nextafter(v, -INFINITY);
    s.step = 0.5 * (s.step_above + s.step_below);
  } else {
    s.step = s.step_below = s.step_above = std::nan("");
  }
  return s;
}

// FP4 E2M1: two codes per byte, the first element in the low nibble.
void DecodeF4(const uint8_t* src, int64_t nblocks, float* dst) {
  for (int64_t i = 0; i < nblocks; ++i) {
    dst[2 * i] = kE2M1Values[src[i] & 0xF];
    dst[2 * i + 1] = kE2M1Values[src[i] >> 4];
  }
}

ScalarInfo InspectF4(const uint8_t* block, int i) {
  const uint32_t code = (i == 0 ? block[0] : block[0] >> 4) & 0xF;
  ScalarInfo s;
  s.code_bits_value = code;
  s.code = code;
  s.code_width = 4;
  s.code_is_float = true;
  s.value = kE2M1Values[code];
  s.level = s.value;
  FillFloatSteps(DecF4, code, 0x8, 0x7, &s);
  return s;
}

// FP6: four 6-bit codes in 3 bytes, read as one little-endian 24-bit word
// with element k in bits [6k, 6k + 6).
uint32_t F6Code(const uint8_t* block, int k) {
  const uint32_t word = block[0] | (block[1] << 8) | (block[2] << 16);
  return (word >> (6 * k)) & 0x3F;
}

template <float (*kDec)(uint32_t)>
void DecodeF6(const uint8_t* src, int64_t nblocks, float* dst) {
  for (int64_t i = 0; i < nblocks; ++i) {
    for (int k = 0; k < 4; ++k) dst[4 * i + k] = kDec(F6Code(src + 3 * i, k));
  }
}

template <float (*kDec)(uint32_t)>
ScalarInfo InspectF6(const uint8_t* block, int i) {
  const uint32_t code = F6Code(block, i);
  ScalarInfo s;
  s.code_bits_value = code;
  s.code = code;
  s.code_width = 6;
  s.code_is_float = true;
  s.value = kDec(code);
  s.level = s.value;
  FillFloatSteps(kDec, code, 0x20, 0x1F, &s);
  return s;
}

constexpr Codec kF64 = {DecodeF64, InspectF64};
constexpr Codec kF32 = {DecodeF32, InspectF32};
constexpr Codec kF16 = {DecodeF16,
                        InspectSmallFloat<DecF16, 2, 0x8000, 0x7BFF>};
constexpr Codec kBF16 = {DecodeBF16,
                         InspectSmallFloat<DecBF16, 2, 0x8000, 0x7F7F>};
constexpr Codec kE4M3 = {DecodeSmallFloat<DecE4M3, uint8_t>,
                         InspectSmallFloat<DecE4M3, 1, 0x80, 0x7E>};
constexpr Codec kE5M2 = {DecodeSmallFloat<DecE5M2, uint8_t>,
                         InspectSmallFloat<DecE5M2, 1, 0x80, 0x7B>};
constexpr Codec kE8M0 = {DecodeSmallFloat<DecE8M0, uint8_t>,
                         InspectSmallFloat<DecE8M0, 1, 0, 0xFE>};
constexpr Codec kE4M3Fnuz = {DecodeSmallFloat<DecE4M3Fnuz, uint8_t>,
                             InspectSmallFloat<DecE4M3Fnuz, 1, 0x80, 0x7F>};
constexpr Codec kE5M2Fnuz = {DecodeSmallFloat<DecE5M2Fnuz, uint8_t>,
                             InspectSmallFloat<DecE5M2Fnuz, 1, 0x80, 0x7F>};
constexpr Codec kF6E2M3 = {DecodeF6<DecF6E2M3>, InspectF6<DecF6E2M3>};
constexpr Codec kF6E3M2 = {DecodeF6<DecF6E3M2>, InspectF6<DecF6E3M2>};
constexpr Codec kF4 = {DecodeF4, InspectF4};
constexpr Codec kI64 = {DecodeInt<int64_t>, InspectInt<int64_t>};
constexpr Codec kI32 = {DecodeInt<int32_t>, InspectInt<int32_t>};
constexpr Codec kI16 = {DecodeInt<int16_t>, InspectInt<int16_t>};
constexpr Codec kI8 = {DecodeInt<int8_t>, InspectInt<int8_t>};
constexpr Codec kU64 = {DecodeInt<uint64_t>, InspectInt<uint64_t>};
constexpr Codec kU32 = {DecodeInt<uint32_t>, InspectInt<uint32_t>};
constexpr Codec kU16 = {DecodeInt<uint16_t>, InspectInt<uint16_t>};
constexpr Codec kU8 = {DecodeInt<uint8_t>, InspectInt<uint8_t>};
constexpr Codec kBool = {DecodeBool, InspectBool};

}  // namespace

const Codec* PlainCodec(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return &kF64;
    case DType::kF32:
      return &kF32;
    case DType::kF16:
      return &kF16;
    case DType::kBF16:
      return &kBF16;
    case DType::kF8E4M3:
      return &kE4M3;
    case DType::kF8E5M2:
      return &kE5M2;
    case DType::kF8E8M0:
      return &kE8M0;
    case DType::kF8E4M3Fnuz:
      return &kE4M3Fnuz;
    case DType::kF8E5M2Fnuz:
      return &kE5M2Fnuz;
    case DType::kF6E2M3:
      return &kF6E2M3;
    case DType::kF6E3M2:
      return &kF6E3M2;
    case DType::kF4:
      return &kF4;
    case DType::kI64:
      return &kI64;
    case DType::kI32:
      return &kI32;
    case DType::kI16:
      return &kI16;
    case DType::kI8:
      return &kI8;
    case DType::kU64:
      return &kU64;
    case DType::kU32:
      return &kU32;
    case DType::kU16:
      return &kU16;
    case DType::kU8:
      return &kU8;
    case DType::kBool:
      return &kBool;
    default:
      return nullptr;
  }
}

}  // namespace tensormorph
