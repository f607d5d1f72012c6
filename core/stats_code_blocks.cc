#include "core/stats_code_blocks.h"

#include <cassert>
#include <cstring>
#include <vector>

#include "core/format/stored_tensor.h"
#include "core/quant/block_util.h"
#include "core/quant/codec.h"
#include "core/quant/float_formats.h"
#include "core/quant/kquant_scales.h"

namespace tensormorph {
namespace {

float LowLevel(const QuantRun& r) { return AsFloatOrNaN(r.range_min); }
float HighLevel(const QuantRun& r) { return AsFloatOrNaN(r.range_max); }

// ---- Counting ---------------------------------------------------------------

void CountQ4K(const uint8_t* p, DecodeSimd simd, uint32_t count[][16]) {
  CountQ4KBlock(p + 16, simd, count);
}

// One sub-block of 32 codes in 16 bytes from byte kAt (Q4_0's layout).
template <int kAt>
void Count32(const uint8_t* p, DecodeSimd simd, uint32_t count[][16]) {
  const bool avx2 = simd >= DecodeSimd::kAvx2;
  CountQ4_0Block(p + kAt, avx2, count[0]);
}

// IQ4_XS: eight sub-blocks of 32, each Q4_0's layout, from byte 8.
void CountIq4Xs(const uint8_t* p, DecodeSimd simd, uint32_t count[][16]) {
  const bool avx2 = simd >= DecodeSimd::kAvx2;
  for (int s = 0; s < 8; ++s) CountQ4_0Block(p + 8 + 16 * s, avx2, count[s]);
}

// TQ2_0: one run of 256 2-bit codes in 64 bytes, then d.
void CountTq2_0(const uint8_t* p, DecodeSimd simd, uint32_t count[][16]) {
  const bool avx2 = simd >= DecodeSimd::kAvx2;
  CountTq2_0Block(p, avx2, count[0]);
}

// Q2_K: sixteen sub-blocks of 16 2-bit codes in 64 bytes from byte 16.
void CountQ2K(const uint8_t* p, DecodeSimd simd, uint32_t count[][16]) {
  const bool avx2 = simd >= DecodeSimd::kAvx2;
  CountQ2KBlock(p + 16, avx2, count);
}

// Q3_K: sixteen sub-blocks of 16 3-bit codes, the hmask bits (32 bytes
// from byte 0) above the qs bits (64 from byte 32).
void CountQ3K(const uint8_t* p, DecodeSimd simd, uint32_t count[][16]) {
  const bool avx2 = simd >= DecodeSimd::kAvx2;
  CountQ3KBlock(p, p + 32, avx2, count);
}

// ---- Levels, each as its decoder's float expression ------------------------

// DecodeQ4_K: d1 * q - m1, with d1 = d * sc and m1 = dmin * m.
void LevelsQ4K(const uint8_t* p, const QuantRun* runs, bool avx2,
               AffineLevels* out) {
  const float d = LoadF16(p), dmin = LoadF16(p + 2);
  for (int sub = 0; sub < 8; ++sub) {
    uint8_t sc, m;
    ScaleMinK4(sub, p + 4, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    ComputeOffsetLevels(d1, m1, LowLevel(runs[sub]), HighLevel(runs[sub]), avx2,
                        out + sub);
  }
}

// DecodeQ4_0's int(q - 8) * d: the same product as d * float(q - 8).
void LevelsQ4_0(const uint8_t* p, const QuantRun* runs, bool avx2,
                AffineLevels* out) {
  ComputeAffineLevels(LoadF16(p), 8, 0, LowLevel(runs[0]), HighLevel(runs[0]),
                      avx2, out);
}

// DecodeQ4_1's q * d + m: d * float(q) - (-m), a subtraction being the
// addition of the negated operand in IEEE arithmetic, bit for bit.
void LevelsQ4_1(const uint8_t* p, const QuantRun* runs, bool avx2,
                AffineLevels* out) {
  ComputeOffsetLevels(LoadF16(p), -LoadF16(p + 2), LowLevel(runs[0]),
                      HighLevel(runs[0]), avx2, out);
}

// DecodeIq4Nl: d * kvalues_iq4nl[q].
void LevelsIq4Nl(const uint8_t* p, const QuantRun* runs, bool avx2,
                 AffineLevels* out) {
  ComputeTableLevels(LoadF16(p), kIq4NlValues, LowLevel(runs[0]),
                     HighLevel(runs[0]), avx2, out);
}

// DecodeIq4Xs: per sub-block dl = d * (ls - 32), then dl * kvalues[q].
void LevelsIq4Xs(const uint8_t* p, const QuantRun* runs, bool avx2,
                 AffineLevels* out) {
  const float d = LoadF16(p);
  for (int ib = 0; ib < 8; ++ib) {
    const float dl = d * (Iq4XsSubScale(p, ib) - 32);
    ComputeTableLevels(dl, kIq4NlValues, LowLevel(runs[ib]),
                       HighLevel(runs[ib]), avx2, out + ib);
  }
}

// DecodeMxfp4: the doubled E2M1 level times the halved E8M0 scale.
void LevelsMxfp4(const uint8_t* p, const QuantRun* runs, bool avx2,
                 AffineLevels* out) {
  ComputeTableLevels(E8M0ToF32Half(p[0]), kMxfp4Doubled, LowLevel(runs[0]),
                     HighLevel(runs[0]), avx2, out);
}

// DecodeTq2_0: float(q - 1) * d, the same product as d * float(q - 1).
void LevelsTq2_0(const uint8_t* p, const QuantRun* runs, bool avx2,
                 AffineLevels* out) {
  ComputeAffineLevels(LoadF16(p + 64), 1, 0, LowLevel(runs[0]),
                      HighLevel(runs[0]), avx2, out);
}

// DecodeQ2_K: dl * q - ml, with dl = d * (sc & 15) and ml = dmin * (sc >>
// 4) of sub-block s's scale byte sc (d and dmin after the codes).
void LevelsQ2K(const uint8_t* p, const QuantRun* runs, bool avx2,
               AffineLevels* out) {
  const float d = LoadF16(p + 80), min = LoadF16(p + 82);
  for (int sub = 0; sub < 16; ++sub) {
    const uint8_t sc = p[sub];
    const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
    ComputeOffsetLevels(dl, ml, LowLevel(runs[sub]), HighLevel(runs[sub]), avx2,
                        out + sub);
  }
}

// DecodeQ3_K: dl * (low - (high ? 0 : 4)), the integer code - 4, with dl
// = d * (scale - 32) of the sub-block's unpacked 6-bit scale (scales at
// byte 96, d at 108): the same product as ComputeAffineLevels' dl *
// float(code - 4).
void LevelsQ3K(const uint8_t* p, const QuantRun* runs, bool avx2,
               AffineLevels* out) {
  const float d = LoadF16(p + 108);
  int8_t scales[16];
  UnpackQ3Scales(p + 96, scales);
  for (int sub = 0; sub < 16; ++sub) {
    const float dl = d * (scales[sub] - 32);
    ComputeAffineLevels(dl, 4, 0, LowLevel(runs[sub]), HighLevel(runs[sub]),
                        avx2, out + sub);
  }
}

// ---- The first code with its top bit set -----------------------------------

// 4-bit codes in kPairs pairs of kWidth bytes from byte kAt, each pair's
// low nibbles the elements before its high nibbles.
template <int kAt, int kPairs, int kWidth>
int FirstHighNibble(const uint8_t* p) {
  const uint8_t* qs = p + kAt;
  for (int j = 0; j < kPairs; ++j) {
    for (int half = 0; half < 2; ++half) {
      for (int l = 0; l < kWidth; ++l) {
        const uint8_t q = qs[kWidth * j + l];
        if (((half == 0 ? q & 0xf : q >> 4) & 8) != 0) {
          return 2 * kWidth * j + kWidth * half + l;
        }
      }
    }
  }
  return -1;
}

// 2-bit codes in 64 bytes from byte kAt: element e is bits
// 2 * ((e % 128) / 32) of byte (e / 128) * 32 + e % 32 (InspectTq2_0,
// InspectQ2_K).
template <int kAt>
int FirstHighCrumb(const uint8_t* p) {
  const uint8_t* qs = p + kAt;
  for (int e = 0; e < 256; ++e) {
    const uint8_t q = qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32));
    if ((q & 2) != 0) return e;
  }
  return -1;
}

// Q3_K: a code's top bit is its hmask bit, bit (e / 128) * 4 + (e % 128)
// / 32 of hmask[e % 32] (InspectQ3_K).
int FirstHighQ3K(const uint8_t* p) {
  for (int e = 0; e < 256; ++e) {
    if (((p[e % 32] >> ((e / 128) * 4 + (e % 128) / 32)) & 1) != 0) return e;
  }
  return -1;
}

std::vector<CodeBlockType> MakeRows() {
  // A type's block size and sub-blocks are the codec's; the functions say
  // the rest.
  auto row = [](DType dtype, auto count, auto levels, auto first_high) {
    const DTypeInfo& info = GetDTypeInfo(dtype);
    return CodeBlockType{dtype,
                         info.block_elems,
                         info.block_bytes,
                         SubBlocksPerBlock(dtype),
                         GetSubBlockRanges(dtype),
                         count,
                         levels,
                         first_high};
  };
  std::vector<CodeBlockType> rows = {
      row(DType::kQ4_K, CountQ4K, LevelsQ4K, FirstHighNibble<16, 4, 32>),
      row(DType::kQ4_0, Count32<2>, LevelsQ4_0, FirstHighNibble<2, 1, 16>),
      row(DType::kQ4_1, Count32<4>, LevelsQ4_1, FirstHighNibble<4, 1, 16>),
      row(DType::kIQ4_NL, Count32<2>, LevelsIq4Nl, FirstHighNibble<2, 1, 16>),
      row(DType::kIQ4_XS, CountIq4Xs, LevelsIq4Xs, FirstHighNibble<8, 8, 16>),
      row(DType::kMXFP4, Count32<1>, LevelsMxfp4, FirstHighNibble<1, 1, 16>),
      row(DType::kTQ2_0, CountTq2_0, LevelsTq2_0, FirstHighCrumb<0>),
      row(DType::kQ2_K, CountQ2K, LevelsQ2K, FirstHighCrumb<16>),
      row(DType::kQ3_K, CountQ3K, LevelsQ3K, FirstHighQ3K),
  };
  for (const CodeBlockType& r : rows) {
    assert(r.sub_blocks <= kMaxCodeSubBlocks && r.runs != nullptr);
    (void)r;
  }
  return rows;
}

const std::vector<CodeBlockType>& Rows() {
  static const std::vector<CodeBlockType> rows = MakeRows();
  return rows;
}

}  // namespace

const CodeBlockType* StoredCodeBlocks(const LogicalTensor& t,
                                      const uint8_t** blocks) {
  *blocks = nullptr;
  const EncodingInfo& info = t.encoding->info();
  if (info.convention != "ggml") return nullptr;
  const std::vector<const StoredTensor*> parts = t.encoding->parts();
  if (parts.size() != 1) return nullptr;
  for (const CodeBlockType& type : Rows()) {
    if (parts[0]->dtype != type.dtype) continue;
    if (info.scheme != GetDTypeInfo(type.dtype).name ||
        t.num_elements % type.elements != 0 ||
        parts[0]->data.size() / static_cast<uint64_t>(type.bytes) <
            static_cast<uint64_t>(t.num_elements / type.elements)) {
      return nullptr;
    }
    *blocks = parts[0]->data.data();
    return &type;
  }
  return nullptr;
}

}  // namespace tensormorph
