// ggml's 32-element blocks with one fp16 scale: Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q8_1. Arithmetic order follows dequantize_row_* in ggml-quants.c.
#include <cstring>

#include "core/quant/block_util.h"
#include "core/quant/codec.h"
#include "core/quant/decode_simd.h"

namespace tensormorph {
namespace {

constexpr int kQK = 32;

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
struct BlockQ8_1 {
  uint16_t d, s;
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);

template <typename B>
B LoadBlock(const uint8_t* p) {
  B b;
  std::memcpy(&b, p, sizeof(B));
  return b;
}

// The 4-bit code of element i: low nibbles hold elements 0..15, high
// nibbles 16..31.
inline int Nibble(const uint8_t* qs, int i) {
  return i < kQK / 2 ? (qs[i] & 0x0F) : (qs[i - kQK / 2] >> 4);
}
// The 5th bit of element i sits at bit i of the 32-bit qh.
inline int HighBit(const uint8_t qh[4], int i) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return (h >> i) & 1;
}

TM_MULTIVERSION void DecodeQ4_0Scalar(const uint8_t* src, int64_t nb,
                                      float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = src + i * sizeof(BlockQ4_0);
    uint16_t dh;
    std::memcpy(&dh, p, 2);
    const float d = F16ToF32Fast(dh);
    const uint8_t* qs = p + 2;
    float* out = y + i * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      const int x0 = (qs[j] & 0x0F) - 8;
      const int x1 = (qs[j] >> 4) - 8;
      out[j] = x0 * d;
      out[j + kQK / 2] = x1 * d;
    }
  }
}

void DecodeQ4_0(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeQ4_0Simd(src, nb, y)) DecodeQ4_0Scalar(src, nb, y);
}

ScalarInfo InspectQ4_0(const uint8_t* p, int i) {
  const auto b = LoadBlock<BlockQ4_0>(p);
  const float d = F16ToF32Fast(b.d);
  ScalarInfo s;
  s.code = Nibble(b.qs, i);
  s.code_bits_value = s.code;
  s.code_width = 4;
  s.scale = d;
  s.zero_point = 8;
  s.level = s.code - 8;
  s.value = static_cast<int>(s.code - 8) * d;
  FillUniformSteps(d, -8, 7, 0, &s);
  s.AddParam("d", d);
  return s;
}

TM_MULTIVERSION void DecodeQ4_1Scalar(const uint8_t* src, int64_t nb,
                                      float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = src + i * sizeof(BlockQ4_1);
    uint16_t dh, mh;
    std::memcpy(&dh, p, 2);
    std::memcpy(&mh, p + 2, 2);
    const float d = F16ToF32Fast(dh);
    const float m = F16ToF32Fast(mh);
    const uint8_t* qs = p + 4;
    float* out = y + i * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      const int x0 = qs[j] & 0x0F;
      const int x1 = qs[j] >> 4;
      out[j] = x0 * d + m;
      out[j + kQK / 2] = x1 * d + m;
    }
  }
}

void DecodeQ4_1(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeQ4_1Simd(src, nb, y)) DecodeQ4_1Scalar(src, nb, y);
}

ScalarInfo InspectQ4_1(const uint8_t* p, int i) {
  const auto b = LoadBlock<BlockQ4_1>(p);
  const float d = F16ToF32Fast(b.d);
  const float m = F16ToF32Fast(b.m);
  ScalarInfo s;
  s.code = Nibble(b.qs, i);
  s.code_bits_value = s.code;
  s.code_width = 4;
  s.scale = d;
  s.offset = m;
  s.level = s.code;
  s.value = static_cast<int>(s.code) * d + m;
  FillUniformSteps(d, 0, 15, m, &s);
  s.AddParam("d", d);
  s.AddParam("m", m);
  return s;
}

TM_MULTIVERSION void DecodeQ5_0Scalar(const uint8_t* src, int64_t nb,
                                      float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = LoadBlock<BlockQ5_0>(src + i * sizeof(BlockQ5_0));
    const float d = F16ToF32Fast(b.d);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t xh0 = ((qh >> (j + 0)) << 4) & 0x10;
      const uint8_t xh1 = ((qh >> (j + 12))) & 0x10;
      const int32_t x0 = ((b.qs[j] & 0x0F) | xh0) - 16;
      const int32_t x1 = ((b.qs[j] >> 4) | xh1) - 16;
      y[i * kQK + j] = x0 * d;
      y[i * kQK + j + kQK / 2] = x1 * d;
    }
  }
}

void DecodeQ5_0(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeQ5_0Simd(src, nb, y)) DecodeQ5_0Scalar(src, nb, y);
}

ScalarInfo InspectQ5_0(const uint8_t* p, int i) {
  const auto b = LoadBlock<BlockQ5_0>(p);
  const float d = F16ToF32Fast(b.d);
  ScalarInfo s;
  s.code = Nibble(b.qs, i) | (HighBit(b.qh, i) << 4);
  s.code_bits_value = s.code;
  s.code_width = 5;
  s.scale = d;
  s.zero_point = 16;
  s.level = s.code - 16;
  s.value = static_cast<int>(s.code - 16) * d;
  FillUniformSteps(d, -16, 15, 0, &s);
  s.AddParam("d", d);
  return s;
}

TM_MULTIVERSION void DecodeQ5_1Scalar(const uint8_t* src, int64_t nb,
                                      float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = LoadBlock<BlockQ5_1>(src + i * sizeof(BlockQ5_1));
    const float d = F16ToF32Fast(b.d);
    const float m = F16ToF32Fast(b.m);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t xh0 = ((qh >> (j + 0)) << 4) & 0x10;
      const uint8_t xh1 = ((qh >> (j + 12))) & 0x10;
      const int x0 = (b.qs[j] & 0x0F) | xh0;
      const int x1 = (b.qs[j] >> 4) | xh1;
      y[i * kQK + j] = x0 * d + m;
      y[i * kQK + j + kQK / 2] = x1 * d + m;
    }
  }
}

void DecodeQ5_1(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeQ5_1Simd(src, nb, y)) DecodeQ5_1Scalar(src, nb, y);
}

ScalarInfo InspectQ5_1(const uint8_t* p, int i) {
  const auto b = LoadBlock<BlockQ5_1>(p);
  const float d = F16ToF32Fast(b.d);
  const float m = F16ToF32Fast(b.m);
  ScalarInfo s;
  s.code = Nibble(b.qs, i) | (HighBit(b.qh, i) << 4);
  s.code_bits_value = s.code;
  s.code_width = 5;
  s.scale = d;
  s.offset = m;
  s.level = s.code;
  s.value = static_cast<int>(s.code) * d + m;
  FillUniformSteps(d, 0, 31, m, &s);
  s.AddParam("d", d);
  s.AddParam("m", m);
  return s;
}

// Reads the codes in place (no block copy) so the compiler vectorises the
// int8 -> float conversion; built for AVX2 and baseline, chosen at run time.
template <typename B>
TM_MULTIVERSION void DecodeQ8(const uint8_t* src, int64_t nb, float* y) {
  constexpr size_t kCodes = sizeof(B) - kQK;  // offset of qs
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = src + i * sizeof(B);
    uint16_t dh;
    std::memcpy(&dh, p, 2);
    const float d = F16ToF32Fast(dh);
    const int8_t* qs = reinterpret_cast<const int8_t*>(p + kCodes);
    float* out = y + i * kQK;
    for (int j = 0; j < kQK; ++j) out[j] = qs[j] * d;
  }
}

void DecodeQ8_0(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeQ8_0Simd(src, nb, y)) DecodeQ8<BlockQ8_0>(src, nb, y);
}
void DecodeQ8_1(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeQ8_1Simd(src, nb, y)) DecodeQ8<BlockQ8_1>(src, nb, y);
}

template <typename B>
ScalarInfo InspectQ8(const uint8_t* p, int i) {
  const auto b = LoadBlock<B>(p);
  const float d = F16ToF32Fast(b.d);
  ScalarInfo s;
  s.code = b.qs[i];
  s.code_bits_value = static_cast<uint8_t>(b.qs[i]);
  s.code_width = 8;
  s.scale = d;
  s.level = s.code;
  s.value = b.qs[i] * d;
  FillUniformSteps(d, -128, 127, 0, &s);
  s.AddParam("d", d);
  if constexpr (std::is_same_v<B, BlockQ8_1>)
    s.AddParam("s", F16ToF32Fast(b.s));
  return s;
}

constexpr Codec kQ4_0 = {DecodeQ4_0, InspectQ4_0};
constexpr Codec kQ4_1 = {DecodeQ4_1, InspectQ4_1};
constexpr Codec kQ5_0 = {DecodeQ5_0, InspectQ5_0};
constexpr Codec kQ5_1 = {DecodeQ5_1, InspectQ5_1};
constexpr Codec kQ8_0 = {DecodeQ8_0, InspectQ8<BlockQ8_0>};
constexpr Codec kQ8_1 = {DecodeQ8_1, InspectQ8<BlockQ8_1>};

}  // namespace

const Codec* GgmlLegacyCodec(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0:
      return &kQ4_0;
    case DType::kQ4_1:
      return &kQ4_1;
    case DType::kQ5_0:
      return &kQ5_0;
    case DType::kQ5_1:
      return &kQ5_1;
    case DType::kQ8_0:
      return &kQ8_0;
    case DType::kQ8_1:
      return &kQ8_1;
    default:
      return nullptr;
  }
}

}  // namespace tensormorph
