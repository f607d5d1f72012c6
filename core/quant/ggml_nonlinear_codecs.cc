// ggml's codebook and ternary types: IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4 and
// NVFP4. Arithmetic order follows dequantize_row_* in ggml-quants.c.
#include <cstring>

#include "core/quant/block_util.h"
#include "core/quant/codec.h"
#include "core/quant/decode_simd.h"

namespace tensormorph {
namespace {

constexpr int kQK = 32;
constexpr int kQKK = 256;

struct BlockIq4Nl {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
struct BlockIq4Xs {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};
struct BlockTq1_0 {
  uint8_t qs[(kQKK - 4 * kQKK / 64) / 5];
  uint8_t qh[kQKK / 64];
  uint16_t d;
};
struct BlockTq2_0 {
  uint8_t qs[kQKK / 4];
  uint16_t d;
};
struct BlockMxfp4 {
  uint8_t e;
  uint8_t qs[kQK / 2];
};
constexpr int kQKNvfp4 = 64;
constexpr int kNvfp4Sub = 16;
struct BlockNvfp4 {
  uint8_t d[kQKNvfp4 / kNvfp4Sub];
  uint8_t qs[kQKNvfp4 / 2];
};
static_assert(sizeof(BlockIq4Nl) == 18);
static_assert(sizeof(BlockIq4Xs) == 136);
static_assert(sizeof(BlockTq1_0) == 54);
static_assert(sizeof(BlockTq2_0) == 66);
static_assert(sizeof(BlockMxfp4) == 17);
static_assert(sizeof(BlockNvfp4) == 36);

template <typename B>
B LoadBlock(const uint8_t* p) {
  B b;
  std::memcpy(&b, p, sizeof(B));
  return b;
}

inline int Nibble32(const uint8_t* qs, int i) {
  return i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
}

struct Codebooks {
  double iq4nl[16];
  double e2m1[16];
  Codebooks() {
    for (int i = 0; i < 16; ++i) {
      iq4nl[i] = kIq4NlValues[i];
      e2m1[i] = kMxfp4Doubled[i] / 2.0;
    }
  }
};
const Codebooks& Books() {
  static const Codebooks books;
  return books;
}

// ---- IQ4_NL / IQ4_XS -------------------------------------------------------

TM_MULTIVERSION void DecodeIq4NlScalar(const uint8_t* src, int64_t nb,
                                       float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto x = LoadBlock<BlockIq4Nl>(src + i * sizeof(BlockIq4Nl));
    const float d = F16ToF32Fast(x.d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * kIq4NlValues[x.qs[j] & 0xf];
      y[j + kQK / 2] = d * kIq4NlValues[x.qs[j] >> 4];
    }
    y += kQK;
  }
}

void DecodeIq4Nl(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeIq4NlSimd(src, nb, y)) DecodeIq4NlScalar(src, nb, y);
}

void FillIq4(ScalarInfo* s, int code, float dl) {
  s->code = code;
  s->code_bits_value = code;
  s->code_width = 4;
  s->scale = dl;
  s->level = kIq4NlValues[code];
  s->value = dl * kIq4NlValues[code];
  FillCodebookSteps(dl, Books().iq4nl, 16, s->level, s);
}

ScalarInfo InspectIq4Nl(const uint8_t* p, int i) {
  const auto x = LoadBlock<BlockIq4Nl>(p);
  const float d = F16ToF32Fast(x.d);
  ScalarInfo s;
  FillIq4(&s, Nibble32(x.qs, i), d);
  s.AddParam("d", d);
  return s;
}

TM_MULTIVERSION void DecodeIq4XsScalar(const uint8_t* src, int64_t nb,
                                       float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* block = src + i * sizeof(BlockIq4Xs);
    const auto x = LoadBlock<BlockIq4Xs>(block);
    const uint8_t* qs = x.qs;
    const float d = F16ToF32Fast(x.d);
    for (int ib = 0; ib < kQKK / 32; ++ib) {
      const int ls = Iq4XsSubScale(block, ib);
      const float dl = d * (ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j + 0] = dl * kIq4NlValues[qs[j] & 0xf];
        y[j + 16] = dl * kIq4NlValues[qs[j] >> 4];
      }
      y += 32;
      qs += 16;
    }
  }
}

void DecodeIq4Xs(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeIq4XsSimd(src, nb, y)) DecodeIq4XsScalar(src, nb, y);
}

ScalarInfo InspectIq4Xs(const uint8_t* p, int e) {
  const auto x = LoadBlock<BlockIq4Xs>(p);
  const int ib = e / 32;
  const float d = F16ToF32Fast(x.d);
  const int ls = Iq4XsSubScale(p, ib);
  const float dl = d * (ls - 32);
  ScalarInfo s;
  s.sub_block = ib;
  FillIq4(&s, Nibble32(x.qs + ib * 16, e % 32), dl);
  s.AddParam("d", d);
  s.AddParam("ls", ls - 32);
  return s;
}

// ---- TQ1_0 / TQ2_0 ---------------------------------------------------------

constexpr uint8_t kPow3[6] = {1, 3, 9, 27, 81, 243};

// The ternary digit n of a base-3 packed byte, as ggml extracts it.
inline int Trit(uint8_t byte, int n) {
  const uint8_t q = static_cast<uint8_t>(byte * kPow3[n]);
  return (static_cast<uint16_t>(q) * 3) >> 8;
}

TM_MULTIVERSION void DecodeTq1_0Scalar(const uint8_t* src, int64_t nb,
                                       float* y) {
  constexpr int kQs = sizeof(BlockTq1_0::qs);
  constexpr int kQh = sizeof(BlockTq1_0::qh);
  for (int64_t i = 0; i < nb; ++i) {
    const auto x = LoadBlock<BlockTq1_0>(src + i * sizeof(BlockTq1_0));
    const float d = F16ToF32Fast(x.d);
    for (int j = 0; j < kQs - kQs % 32; j += 32) {
      for (int n = 0; n < 5; ++n) {
        for (int m = 0; m < 32; ++m) {
          *y++ = static_cast<float>(Trit(x.qs[j + m], n) - 1) * d;
        }
      }
    }
    for (int j = kQs - kQs % 32; j < kQs; j += 16) {
      for (int n = 0; n < 5; ++n) {
        for (int m = 0; m < 16; ++m) {
          *y++ = static_cast<float>(Trit(x.qs[j + m], n) - 1) * d;
        }
      }
    }
    for (int n = 0; n < 4; ++n) {
      for (int j = 0; j < kQh; ++j) {
        *y++ = static_cast<float>(Trit(x.qh[j], n) - 1) * d;
      }
    }
  }
}

void DecodeTq1_0(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeTq1_0Simd(src, nb, y)) DecodeTq1_0Scalar(src, nb, y);
}

ScalarInfo FillTernary(int trit, float d) {
  ScalarInfo s;
  s.code = trit;
  s.code_bits_value = trit;
  s.code_width = 2;
  s.scale = d;
  s.zero_point = 1;
  s.level = trit - 1;
  s.value = static_cast<float>(trit - 1) * d;
  FillUniformSteps(d, -1, 1, 0, &s);
  s.AddParam("d", d);
  return s;
}

ScalarInfo InspectTq1_0(const uint8_t* p, int e) {
  const auto x = LoadBlock<BlockTq1_0>(p);
  int trit;
  if (e < 160) {  // qs[0..32), five trits each, 32 apart
    trit = Trit(x.qs[e % 32], e / 32);
  } else if (e < 240) {  // qs[32..48), five trits each, 16 apart
    trit = Trit(x.qs[32 + (e - 160) % 16], (e - 160) / 16);
  } else {  // qh[0..4), four trits each, 4 apart
    trit = Trit(x.qh[(e - 240) % 4], (e - 240) / 4);
  }
  return FillTernary(trit, F16ToF32Fast(x.d));
}

TM_MULTIVERSION void DecodeTq2_0(const uint8_t* src, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto x = LoadBlock<BlockTq2_0>(src + i * sizeof(BlockTq2_0));
    const float d = F16ToF32Fast(x.d);
    for (size_t j = 0; j < sizeof(x.qs); j += 32) {
      for (int l = 0; l < 4; ++l) {
        for (int m = 0; m < 32; ++m) {
          const int8_t q = (x.qs[j + m] >> (l * 2)) & 3;
          *y++ = static_cast<float>(q - 1) * d;
        }
      }
    }
  }
}

ScalarInfo InspectTq2_0(const uint8_t* p, int e) {
  const auto x = LoadBlock<BlockTq2_0>(p);
  const int j = (e / 128) * 32, l = (e % 128) / 32, m = e % 32;
  return FillTernary((x.qs[j + m] >> (l * 2)) & 3, F16ToF32Fast(x.d));
}

// ---- MXFP4 / NVFP4 ---------------------------------------------------------

TM_MULTIVERSION void DecodeMxfp4Scalar(const uint8_t* src, int64_t nb,
                                       float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto x = LoadBlock<BlockMxfp4>(src + i * sizeof(BlockMxfp4));
    const float d = E8M0ToF32Half(x.e);
    for (int j = 0; j < kQK / 2; ++j) {
      const int8_t x0 = kMxfp4Doubled[x.qs[j] & 0x0F];
      const int8_t x1 = kMxfp4Doubled[x.qs[j] >> 4];
      y[i * kQK + j + 0] = x0 * d;
      y[i * kQK + j + kQK / 2] = x1 * d;
    }
  }
}

void DecodeMxfp4(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeMxfp4Simd(src, nb, y)) DecodeMxfp4Scalar(src, nb, y);
}

// FP4 codes report their true E2M1 level and the true scale; ggml's doubled
// codebook times its halved scale gives the same product exactly.
void FillFp4(ScalarInfo* s, int code, float half_scale) {
  s->code = code;
  s->code_bits_value = code;
  s->code_width = 4;
  s->code_is_float = true;
  s->scale = 2.0 * half_scale;
  s->level = Books().e2m1[code];
  s->value = kMxfp4Doubled[code] * half_scale;
  FillCodebookSteps(s->scale, Books().e2m1, 16, s->level, s);
}

ScalarInfo InspectMxfp4(const uint8_t* p, int i) {
  const auto x = LoadBlock<BlockMxfp4>(p);
  ScalarInfo s;
  FillFp4(&s, Nibble32(x.qs, i), E8M0ToF32Half(x.e));
  s.AddParam("e", x.e);
  return s;
}

TM_MULTIVERSION void DecodeNvfp4Scalar(const uint8_t* src, int64_t nb,
                                       float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto x = LoadBlock<BlockNvfp4>(src + i * sizeof(BlockNvfp4));
    for (int s = 0; s < kQKNvfp4 / kNvfp4Sub; ++s) {
      const float d = Ue4m3HalfTable()[x.d[s]];
      float* yb = y + i * kQKNvfp4 + s * kNvfp4Sub;
      for (int j = 0; j < kNvfp4Sub / 2; ++j) {
        const int8_t v0 = kMxfp4Doubled[x.qs[s * (kNvfp4Sub / 2) + j] & 0x0F];
        const int8_t v1 = kMxfp4Doubled[x.qs[s * (kNvfp4Sub / 2) + j] >> 4];
        yb[j + 0] = v0 * d;
        yb[j + kNvfp4Sub / 2] = v1 * d;
      }
    }
  }
}

void DecodeNvfp4(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeNvfp4Simd(src, nb, y)) DecodeNvfp4Scalar(src, nb, y);
}

ScalarInfo InspectNvfp4(const uint8_t* p, int e) {
  const auto x = LoadBlock<BlockNvfp4>(p);
  const int sub = e / kNvfp4Sub, w = e % kNvfp4Sub;
  const uint8_t byte = x.qs[sub * (kNvfp4Sub / 2) + w % (kNvfp4Sub / 2)];
  const int code = w < kNvfp4Sub / 2 ? (byte & 0x0F) : (byte >> 4);
  ScalarInfo s;
  s.sub_block = sub;
  FillFp4(&s, code, Ue4m3ToF32Half(x.d[sub]));
  s.AddParam("d_ue4m3", x.d[sub]);
  return s;
}

constexpr Codec kIq4Nl = {DecodeIq4Nl, InspectIq4Nl};
constexpr Codec kIq4Xs = {DecodeIq4Xs, InspectIq4Xs};
constexpr Codec kTq1_0 = {DecodeTq1_0, InspectTq1_0};
constexpr Codec kTq2_0 = {DecodeTq2_0, InspectTq2_0};
constexpr Codec kMxfp4 = {DecodeMxfp4, InspectMxfp4};
constexpr Codec kNvfp4 = {DecodeNvfp4, InspectNvfp4};

}  // namespace

const Codec* GgmlNonlinearCodec(DType dtype) {
  switch (dtype) {
    case DType::kIQ4_NL:
      return &kIq4Nl;
    case DType::kIQ4_XS:
      return &kIq4Xs;
    case DType::kTQ1_0:
      return &kTq1_0;
    case DType::kTQ2_0:
      return &kTq2_0;
    case DType::kMXFP4:
      return &kMxfp4;
    case DType::kNVFP4:
      return &kNvfp4;
    default:
      return nullptr;
  }
}

}  // namespace tensormorph
