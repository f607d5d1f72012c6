#include "core/stats_code_blocks.h"

#include <cstring>
#include <vector>

#include "core/format/stored_tensor.h"
#include "core/quant/block_util.h"
#include "core/quant/float_formats.h"
#include "core/quant/kquant_scales.h"

namespace tensormorph {
namespace {

float LowLevel(const QuantRun& r) { return AsFloatOrNaN(r.range_min); }
float HighLevel(const QuantRun& r) { return AsFloatOrNaN(r.range_max); }

// ---- Counting ---------------------------------------------------------------

void CountQ4K(const uint8_t* p, bool avx2, uint32_t count[][16]) {
  CountQ4KBlock(p + 16, avx2, count);
}

// One sub-block of 32 codes in 16 bytes from byte kAt (Q4_0's layout).
template <int kAt>
void Count32(const uint8_t* p, bool avx2, uint32_t count[][16]) {
  CountQ4_0Block(p + kAt, avx2, count[0]);
}

// IQ4_XS: eight sub-blocks of 32, each Q4_0's layout, from byte 8.
void CountIq4Xs(const uint8_t* p, bool avx2, uint32_t count[][16]) {
  for (int s = 0; s < 8; ++s) CountQ4_0Block(p + 8 + 16 * s, avx2, count[s]);
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
    ComputeOffsetLevels(d1, m1, LowLevel(runs[sub]), HighLevel(runs[sub]),
                        avx2, out + sub);
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
  uint16_t scales_h;
  std::memcpy(&scales_h, p + 2, 2);
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = ((p[4 + ib / 2] >> 4 * (ib % 2)) & 0xf) |
                   (((scales_h >> 2 * ib) & 3) << 4);
    const float dl = d * (ls - 32);
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

std::vector<CodeBlockType> MakeRows() {
  // dtype, elements, bytes, sub-blocks, codes at, pairs, width.
  auto row = [](DType dtype, int64_t elements, int64_t bytes, int subs,
                int at, int pairs, int width, auto count, auto levels) {
    return CodeBlockType{dtype,  elements, bytes, subs,
                         at,     pairs,    width, GetSubBlockRanges(dtype),
                         count,  levels};
  };
  return {
      row(DType::kQ4_K, 256, 144, 8, 16, 4, 32, CountQ4K, LevelsQ4K),
      row(DType::kQ4_0, 32, 18, 1, 2, 1, 16, Count32<2>, LevelsQ4_0),
      row(DType::kQ4_1, 32, 20, 1, 4, 1, 16, Count32<4>, LevelsQ4_1),
      row(DType::kIQ4_NL, 32, 18, 1, 2, 1, 16, Count32<2>, LevelsIq4Nl),
      row(DType::kIQ4_XS, 256, 136, 8, 8, 8, 16, CountIq4Xs, LevelsIq4Xs),
      row(DType::kMXFP4, 32, 17, 1, 1, 1, 16, Count32<1>, LevelsMxfp4),
  };
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

int FirstHighCode(const CodeBlockType& type, const uint8_t* block) {
  const uint8_t* qs = block + type.codes_at;
  const int w = type.code_width;
  for (int j = 0; j < type.code_pairs; ++j) {
    for (int half = 0; half < 2; ++half) {
      for (int l = 0; l < w; ++l) {
        const uint8_t q = qs[w * j + l];
        if (((half == 0 ? q & 0xf : q >> 4) & 8) != 0) {
          return 2 * w * j + w * half + l;
        }
      }
    }
  }
  return -1;
}

}  // namespace tensormorph
