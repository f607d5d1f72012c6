// The arithmetic of HQQ decoding (core/quant/hqq_encoding.h): a code c of a
// group whose scale s and zero z are values of the compute dtype t becomes
//   HqqValue(c, s, z, t) = R(R(c - z) * s),
// R rounding once to t as the reference's float16/bfloat16/float32 tensor
// operations do. Codes are read from packed words, `(word >> shift) & mask`.
// Each kernel has a scalar reference (the definition); the vector paths
// (AVX2+F16C, AVX-512) give the same bits: they compute in float32 only for
// groups where float32 holds c - z exactly and the product's rounding is the
// only one (HqqFloatExact), and take the reference's values for the others.
// Tests hold them to the references on random codes and parameters (NaN,
// infinities, subnormal scales and zeros, ragged group edges included) at
// every vector level the CPU runs.
#ifndef TENSORMORPH_CORE_QUANT_HQQ_KERNELS_H_
#define TENSORMORPH_CORE_QUANT_HQQ_KERNELS_H_

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/quant/affine_kernels.h"
#include "core/quant/float_formats.h"

namespace tensormorph {

// `x` rounded once to the nearest value of `dtype` (F16, BF16, F32; ties to
// even; beyond the largest finite value: infinity).
double RoundToDType(double x, DType dtype);

// The value of code `c` in a group with scale `s` and zero `z`.
// REQUIRES: s and z are values of t (t as RoundToDType).
inline float HqqValue(uint32_t c, float s, float z, DType t) {
  const double level = RoundToDType(static_cast<double>(c) - z, t);
  return static_cast<float>(RoundToDType(level * s, t));
}

// Whether float32 arithmetic (c - z, one rounding to t, times s, one
// rounding to t) gives HqqValue for every code of 8 bits or fewer: c - z
// must be exact in float32 (float16: z is 0 or |z| >= 2^-6; bfloat16: z is
// 0 or 2^-9 <= |z| < 2^23) or round as the reference's double does
// (float32: z is 0 or |z| >= 2^-22), and a bfloat16 product must not lose
// bits below float32's least subnormal (s is 0 or |s| >= 2^-126). NaNs and
// infinities propagate alike on both sides.
bool HqqFloatExact(float s, float z, DType t);

// A group's value of every code c in [0, 2^bits): round(round(c - z) * s),
// each rounding to `dtype` (s and z already in it), into out[c]. The scalar
// reference, and the AVX2 path (four codes at a time) that gives the same
// bits; tests hold them to it.
// REQUIRES: 1 <= bits <= 8; `out` holds 2^bits floats; dtype as RoundToDType.
void HqqGroupValues(double s, double z, int bits, DType dtype, float* out);
void HqqGroupValuesScalar(double s, double z, int bits, DType dtype,
                          float* out);

// Packed codes: element i's code is (word i >> shift) & (2^bits - 1), words
// being bytes (the u8 packings) or little-endian 32-bit words (3-bit).
struct HqqCodes {
  const uint8_t* data = nullptr;  // the first element's word
  int word_bytes = 1;             // 1 or 4
  int shift = 0;                  // word_bytes * 8 - shift >= bits
  int bits = 4;                   // 1 to 8
};

inline uint32_t HqqCodeAt(const HqqCodes& c, int64_t i) {
  uint32_t w;
  if (c.word_bytes == 4) {
    std::memcpy(&w, c.data + 4 * i, 4);
  } else {
    w = c.data[i];
  }
  return (w >> c.shift) & ((1u << c.bits) - 1);
}

// Groups sharing a scale and zero (HQQ's axis 1): out[i] =
// HqqValue(code i, s[g], z[g], t) for element i of group g (groups as Runs).
// REQUIRES: codes.data holds n words; s and z one value of t per group.
void HqqDecodeGroups(const HqqCodes& codes, int64_t n, Runs runs,
                     const float* s, const float* z, DType t, float* out);
void HqqDecodeGroupsScalar(const HqqCodes& codes, int64_t n, Runs runs,
                           const float* s, const float* z, DType t, float* out);

// Scales or zeros side by side as stored: F16, BF16 or F32 values.
struct HqqParamRow {
  const uint8_t* data = nullptr;  // the first element's value
  DType dtype = DType::kF32;      // kF16, kBF16 or kF32
};

inline float HqqParamAt(const HqqParamRow& p, int64_t i) {
  uint16_t h;
  float f;
  switch (p.dtype) {
    case DType::kF16:
      std::memcpy(&h, p.data + 2 * i, 2);
      return F16ToF32Fast(h);
    case DType::kBF16:
      std::memcpy(&h, p.data + 2 * i, 2);
      return BF16ToF32(h);
    default:
      std::memcpy(&f, p.data + 4 * i, 4);
      return f;
  }
}

// Each element with a scale and zero of its own (HQQ's axis 0, where a row
// of the grouped matrix crosses one group per column): out[i] =
// HqqValue(code i, s[i], z[i], t), read where they are stored.
// REQUIRES: codes.data holds n words; s and z n values that t holds
// exactly (stored in t, or F16/BF16 when t is F32). The vector paths want
// s and z in one dtype (else the reference runs).
void HqqDecodeColumns(const HqqCodes& codes, int64_t n, HqqParamRow s,
                      HqqParamRow z, DType t, float* out);
void HqqDecodeColumnsScalar(const HqqCodes& codes, int64_t n, HqqParamRow s,
                            HqqParamRow z, DType t, float* out);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_HQQ_KERNELS_H_
