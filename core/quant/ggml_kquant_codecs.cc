// ggml's K-quants: 256-element super-blocks with quantized sub-block scales
// (and mins). Arithmetic order follows dequantize_row_* in ggml-quants.c.
#include <cstring>

#include "core/quant/block_util.h"
#include "core/quant/codec.h"
#include "core/quant/decode_simd.h"
#include "core/quant/kquant_scales.h"

namespace tensormorph {
namespace {

constexpr int kQKK = 256;

struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// ---- Q2_K -----------------------------------------------------------------

TM_MULTIVERSION void DecodeQ2_KScalar(const uint8_t* src, int64_t nb,
                                      float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    BlockQ2_K x;
    std::memcpy(&x, src + i * sizeof(x), sizeof(x));
    const float d = F16ToF32Fast(x.d);
    const float min = F16ToF32Fast(x.dmin);
    const uint8_t* q = x.qs;
    int is = 0;
    for (int n = 0; n < kQKK; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        uint8_t sc = x.scales[is++];
        float dl = d * (sc & 0xF), ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * static_cast<int8_t>((q[l] >> shift) & 3) - ml;
        }
        sc = x.scales[is++];
        dl = d * (sc & 0xF);
        ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * static_cast<int8_t>((q[l + 16] >> shift) & 3) - ml;
        }
        shift += 2;
      }
      q += 32;
    }
  }
}

void DecodeQ2_K(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeQ2_KSimd(src, nb, y)) DecodeQ2_KScalar(src, nb, y);
}

ScalarInfo InspectQ2_K(const uint8_t* p, int e) {
  BlockQ2_K x;
  std::memcpy(&x, p, sizeof(x));
  const int half = e / 128, j = (e % 128) / 32, w = e % 32;
  const int sub = half * 8 + 2 * j + (w >= 16 ? 1 : 0);
  const float d = F16ToF32Fast(x.d);
  const float min = F16ToF32Fast(x.dmin);
  const int sc = x.scales[sub] & 0xF, m = x.scales[sub] >> 4;
  const float dl = d * sc, ml = min * m;
  ScalarInfo s;
  s.code = (x.qs[half * 32 + w] >> (2 * j)) & 3;
  s.code_bits_value = s.code;
  s.code_width = 2;
  s.sub_block = sub;
  s.scale = dl;
  s.offset = -static_cast<double>(ml);
  s.level = s.code;
  s.value = dl * static_cast<int8_t>(s.code) - ml;
  FillUniformSteps(dl, 0, 3, -static_cast<double>(ml), &s);
  s.AddParam("d", d);
  s.AddParam("dmin", min);
  s.AddParam("sc", sc);
  s.AddParam("m", m);
  return s;
}

// ---- Q3_K -----------------------------------------------------------------

TM_MULTIVERSION void DecodeQ3_KScalar(const uint8_t* src, int64_t nb,
                                      float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    BlockQ3_K x;
    std::memcpy(&x, src + i * sizeof(x), sizeof(x));
    const float d_all = F16ToF32Fast(x.d);
    int8_t scales[16];
    UnpackQ3Scales(x.scales, scales);
    const uint8_t* q = x.qs;
    const uint8_t* hm = x.hmask;
    uint8_t m = 1;
    int is = 0;
    for (int n = 0; n < kQKK; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        float dl = d_all * (scales[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * (static_cast<int8_t>((q[l + 0] >> shift) & 3) -
                       ((hm[l + 0] & m) ? 0 : 4));
        }
        dl = d_all * (scales[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * (static_cast<int8_t>((q[l + 16] >> shift) & 3) -
                       ((hm[l + 16] & m) ? 0 : 4));
        }
        shift += 2;
        m <<= 1;
      }
      q += 32;
    }
  }
}

void DecodeQ3_K(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeQ3_KSimd(src, nb, y)) DecodeQ3_KScalar(src, nb, y);
}

ScalarInfo InspectQ3_K(const uint8_t* p, int e) {
  BlockQ3_K x;
  std::memcpy(&x, p, sizeof(x));
  const int half = e / 128, j = (e % 128) / 32, w = e % 32;
  const int sub = half * 8 + 2 * j + (w >= 16 ? 1 : 0);
  int8_t scales[16];
  UnpackQ3Scales(x.scales, scales);
  const float d_all = F16ToF32Fast(x.d);
  const int sc = scales[sub] - 32;
  const float dl = d_all * sc;
  const int low = (x.qs[half * 32 + w] >> (2 * j)) & 3;
  const int high = (x.hmask[w] >> (half * 4 + j)) & 1;
  ScalarInfo s;
  // The 3-bit code is low | high << 2; a clear high bit means "minus 4".
  s.code = low | (high << 2);
  s.code_bits_value = s.code;
  s.code_width = 3;
  s.sub_block = sub;
  s.scale = dl;
  s.zero_point = 4;
  s.level = s.code - 4;
  s.value = dl * (low - (high ? 0 : 4));
  FillUniformSteps(dl, -4, 3, 0, &s);
  s.AddParam("d", d_all);
  s.AddParam("sc", sc);
  return s;
}

// ---- Q4_K and Q5_K ---------------------------------------------------------

TM_MULTIVERSION void DecodeQ4_KScalar(const uint8_t* src, int64_t nb,
                                      float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    BlockQ4_K x;
    std::memcpy(&x, src + i * sizeof(x), sizeof(x));
    const uint8_t* q = x.qs;
    const float d = F16ToF32Fast(x.d);
    const float min = F16ToF32Fast(x.dmin);
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < kQKK; j += 64) {
      ScaleMinK4(is + 0, x.scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      ScaleMinK4(is + 1, x.scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

void DecodeQ4_K(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeQ4_KSimd(src, nb, y)) DecodeQ4_KScalar(src, nb, y);
}

template <bool kFiveBit>
ScalarInfo InspectQ45_K(const uint8_t* p, int e) {
  const int chunk = e / 64, r = e % 64, l = r % 32;
  const int sub = 2 * chunk + (r >= 32 ? 1 : 0);
  uint16_t dh, dminh;
  std::memcpy(&dh, p, 2);
  std::memcpy(&dminh, p + 2, 2);
  const uint8_t* scales = p + 4;
  const uint8_t* qh = p + 16;
  const uint8_t* qs = kFiveBit ? p + 48 : p + 16;
  const float d = F16ToF32Fast(dh);
  const float min = F16ToF32Fast(dminh);
  uint8_t sc, m;
  ScaleMinK4(sub, scales, &sc, &m);
  const float d1 = d * sc;
  const float m1 = min * m;
  const uint8_t byte = qs[chunk * 32 + l];
  int code = r < 32 ? (byte & 0xF) : (byte >> 4);
  if (kFiveBit) {
    const uint8_t u = (r < 32 ? 1 : 2) << (2 * chunk);
    if (qh[l] & u) code += 16;
  }
  ScalarInfo s;
  s.code = code;
  s.code_bits_value = code;
  s.code_width = kFiveBit ? 5 : 4;
  s.sub_block = sub;
  s.scale = d1;
  s.offset = -static_cast<double>(m1);
  s.level = code;
  s.value = d1 * code - m1;
  FillUniformSteps(d1, 0, kFiveBit ? 31 : 15, -static_cast<double>(m1), &s);
  s.AddParam("d", d);
  s.AddParam("dmin", min);
  s.AddParam("sc", sc);
  s.AddParam("m", m);
  return s;
}

TM_MULTIVERSION void DecodeQ5_KScalar(const uint8_t* src, int64_t nb,
                                      float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    BlockQ5_K x;
    std::memcpy(&x, src + i * sizeof(x), sizeof(x));
    const uint8_t* ql = x.qs;
    const uint8_t* qh = x.qh;
    const float d = F16ToF32Fast(x.d);
    const float min = F16ToF32Fast(x.dmin);
    int is = 0;
    uint8_t sc, m;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < kQKK; j += 64) {
      ScaleMinK4(is + 0, x.scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      ScaleMinK4(is + 1, x.scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      }
      ql += 32;
      is += 2;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}

void DecodeQ5_K(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeQ5_KSimd(src, nb, y)) DecodeQ5_KScalar(src, nb, y);
}

// ---- Q6_K -----------------------------------------------------------------

TM_MULTIVERSION void DecodeQ6_KScalar(const uint8_t* src, int64_t nb,
                                      float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = src + i * sizeof(BlockQ6_K);
    const uint8_t* ql = p;
    const uint8_t* qh = p + kQKK / 2;
    const int8_t* sc = reinterpret_cast<const int8_t*>(p + kQKK / 2 + kQKK / 4);
    uint16_t dh;
    std::memcpy(&dh, p + sizeof(BlockQ6_K) - 2, 2);
    const float d = F16ToF32Fast(dh);
    for (int n = 0; n < kQKK; n += 128) {
      // The reference's four interleaved outputs per l, as four contiguous
      // passes of 32 (each two sub-blocks of 16): the same products
      // (d * sc) * q, in an order the compiler vectorises.
      for (int quarter = 0; quarter < 4; ++quarter) {
        const uint8_t* lo = ql + (quarter % 2) * 32;
        const int shift_lo = quarter < 2 ? 0 : 4;
        const int shift_hi = 2 * quarter;
        float* out = y + quarter * 32;
        for (int half = 0; half < 2; ++half) {
          const float ds = d * sc[half + 2 * quarter];
          for (int l = half * 16; l < half * 16 + 16; ++l) {
            const int8_t q =
                static_cast<int8_t>(((lo[l] >> shift_lo) & 0xF) |
                                    (((qh[l] >> shift_hi) & 3) << 4)) -
                32;
            out[l] = ds * q;
          }
        }
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void DecodeQ6_K(const uint8_t* src, int64_t nb, float* y) {
  if (!DecodeQ6_KSimd(src, nb, y)) DecodeQ6_KScalar(src, nb, y);
}

ScalarInfo InspectQ6_K(const uint8_t* p, int e) {
  BlockQ6_K x;
  std::memcpy(&x, p, sizeof(x));
  const int half = e / 128, quarter = (e % 128) / 32, l = e % 32;
  const uint8_t* ql = x.ql + half * 64;
  const uint8_t qh = x.qh[half * 32 + l];
  const uint8_t low = quarter % 2 == 0 ? ql[l] : ql[l + 32];
  const int lowbits = quarter < 2 ? (low & 0xF) : (low >> 4);
  const int code = lowbits | (((qh >> (2 * quarter)) & 3) << 4);
  const int sub = half * 8 + l / 16 + 2 * quarter;
  const float d = F16ToF32Fast(x.d);
  const int8_t sc = x.scales[sub];
  ScalarInfo s;
  s.code = code;
  s.code_bits_value = code;
  s.code_width = 6;
  s.sub_block = sub;
  s.scale = static_cast<double>(d * sc);
  s.zero_point = 32;
  s.level = code - 32;
  s.value = d * sc * static_cast<int8_t>(code - 32);
  FillUniformSteps(s.scale, -32, 31, 0, &s);
  s.AddParam("d", d);
  s.AddParam("sc", sc);
  return s;
}

// ---- Q8_K -----------------------------------------------------------------

TM_MULTIVERSION void DecodeQ8_K(const uint8_t* src, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    BlockQ8_K x;
    std::memcpy(&x, src + i * sizeof(x), sizeof(x));
    for (int j = 0; j < kQKK; ++j) *y++ = x.d * x.qs[j];
  }
}

ScalarInfo InspectQ8_K(const uint8_t* p, int e) {
  float d;
  std::memcpy(&d, p, 4);
  const int8_t q = static_cast<int8_t>(p[4 + e]);
  ScalarInfo s;
  s.code = q;
  s.code_bits_value = static_cast<uint8_t>(q);
  s.code_width = 8;
  s.scale = d;
  s.level = q;
  s.value = d * q;
  FillUniformSteps(d, -128, 127, 0, &s);
  s.AddParam("d", d);
  return s;
}

constexpr Codec kQ2_K = {DecodeQ2_K, InspectQ2_K};
constexpr Codec kQ3_K = {DecodeQ3_K, InspectQ3_K};
constexpr Codec kQ4_K = {DecodeQ4_K, InspectQ45_K<false>};
constexpr Codec kQ5_K = {DecodeQ5_K, InspectQ45_K<true>};
constexpr Codec kQ6_K = {DecodeQ6_K, InspectQ6_K};
constexpr Codec kQ8_K = {DecodeQ8_K, InspectQ8_K};

}  // namespace

const Codec* GgmlKQuantCodec(DType dtype) {
  switch (dtype) {
    case DType::kQ2_K:
      return &kQ2_K;
    case DType::kQ3_K:
      return &kQ3_K;
    case DType::kQ4_K:
      return &kQ4_K;
    case DType::kQ5_K:
      return &kQ5_K;
    case DType::kQ6_K:
      return &kQ6_K;
    case DType::kQ8_K:
      return &kQ8_K;
    default:
      return nullptr;
  }
}

}  // namespace tensormorph
