// ggml's 1- and 2-bit blocks with one fp16 scale: Q1_0 (ggml type 41, 128
// sign bits: value +d or -d) and Q2_0 (ggml type 42, 64 2-bit codes: value
// (q - 1) * d, levels -1..2). Layouts and arithmetic as dequantize_row_q1_0
// and dequantize_row_q2_0 of the pinned ggml (tests/oracle holds them to it).
#include <cstring>

#include "core/quant/block_util.h"
#include "core/quant/codec.h"

namespace tensormorph {
namespace {

constexpr int kQK1_0 = 128;
constexpr int kQK2_0 = 64;

struct BlockQ1_0 {
  uint16_t d;
  uint8_t qs[kQK1_0 / 8];  // bit j % 8 of qs[j / 8] is element j's sign
};
struct BlockQ2_0 {
  uint16_t d;
  uint8_t qs[kQK2_0 / 4];  // bits 2 * (j % 4) of qs[j / 4] are element j's
};
static_assert(sizeof(BlockQ1_0) == 18);
static_assert(sizeof(BlockQ2_0) == 18);

// Element j of a Q1_0 block: 1 for +d, 0 for -d.
inline int SignBit(const uint8_t* qs, int j) {
  return (qs[j / 8] >> (j % 8)) & 1;
}
inline int Code2(const uint8_t* qs, int j) {
  return (qs[j / 4] >> (2 * (j % 4))) & 3;
}

// The product (2b - 1) * d, as ggml forms it: the sign of a zero or NaN d
// follows the multiplication, not a negation.
TM_MULTIVERSION void DecodeQ1_0(const uint8_t* src, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = src + i * sizeof(BlockQ1_0);
    const float d = LoadF16(p);
    const uint8_t* qs = p + 2;
    for (int j = 0; j < kQK1_0; ++j) {
      y[j] = static_cast<float>(2 * SignBit(qs, j) - 1) * d;
    }
    y += kQK1_0;
  }
}

// The two levels -1 and +1 are value = 2d * b - d: one step of 2d.
ScalarInfo InspectQ1_0(const uint8_t* p, int j) {
  const float d = LoadF16(p);
  ScalarInfo s;
  s.code = SignBit(p + 2, j);
  s.code_bits_value = s.code;
  s.code_width = 1;
  s.scale = 2.0 * d;
  s.offset = -static_cast<double>(d);
  s.level = s.code;
  s.value = static_cast<float>(2 * s.code - 1) * d;
  FillUniformSteps(s.scale, 0, 1, s.offset, &s);
  s.AddParam("d", d);
  return s;
}

TM_MULTIVERSION void DecodeQ2_0(const uint8_t* src, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = src + i * sizeof(BlockQ2_0);
    const float d = LoadF16(p);
    const uint8_t* qs = p + 2;
    for (int j = 0; j < kQK2_0; ++j) {
      y[j] = static_cast<float>(Code2(qs, j) - 1) * d;
    }
    y += kQK2_0;
  }
}

// The fast path: each code byte's four levels (q - 1) as floats from a
// table, times d 4 wide: the reference's one product per element.
struct Q2Levels {
  float v[256][4];
  Q2Levels() {
    for (int b = 0; b < 256; ++b) {
      const uint8_t byte = static_cast<uint8_t>(b);
      for (int k = 0; k < 4; ++k) {
        v[b][k] = static_cast<float>(Code2(&byte, k) - 1);
      }
    }
  }
};

TM_MULTIVERSION void DecodeQ2_0Fast(const uint8_t* src, int64_t nb, float* y) {
  static const Q2Levels levels;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = src + i * sizeof(BlockQ2_0);
    const float d = LoadF16(p);
    for (int b = 0; b < kQK2_0 / 4; ++b) {
      const float* l = levels.v[p[2 + b]];
      for (int k = 0; k < 4; ++k) y[4 * b + k] = l[k] * d;
    }
    y += kQK2_0;
  }
}

ScalarInfo InspectQ2_0(const uint8_t* p, int j) {
  const float d = LoadF16(p);
  ScalarInfo s;
  s.code = Code2(p + 2, j);
  s.code_bits_value = s.code;
  s.code_width = 2;
  s.scale = d;
  s.zero_point = 1;
  s.level = s.code - 1;
  s.value = static_cast<float>(s.code - 1) * d;
  FillUniformSteps(d, -1, 2, 0, &s);
  s.AddParam("d", d);
  return s;
}

constexpr Codec kQ1_0 = {DecodeQ1_0, InspectQ1_0};
constexpr Codec kQ2_0 = {DecodeQ2_0, InspectQ2_0};
constexpr Codec kQ2_0Fast = {DecodeQ2_0Fast, InspectQ2_0};

}  // namespace

const Codec* GgmlLowBitReferenceCodec(DType dtype) {
  return dtype == DType::kQ2_0 ? &kQ2_0 : nullptr;
}

const Codec* GgmlLowBitCodec(DType dtype) {
  switch (dtype) {
    case DType::kQ1_0:
      return &kQ1_0;
    case DType::kQ2_0:
      return &kQ2_0Fast;
    default:
      return nullptr;
  }
}

}  // namespace tensormorph
