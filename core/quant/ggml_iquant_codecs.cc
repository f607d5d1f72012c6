// ggml's lattice codebook types: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ1_S and IQ1_M. Each group of 8 (IQ3: 4) elements selects a grid entry
// (core/quant/ggml_iquant_grids.h); signs (IQ2, IQ3) or a delta (IQ1) and a
// sub-block scale finish the value. Layouts and arithmetic order follow
// dequantize_row_* of the pinned ggml (tests/oracle holds them to it bit for
// bit); levels and steps are the marginal codebooks of scalar_info.h.
//
// Every type is decoded through one description of where element e's
// parameters live (a Codeword below), so the decoder and the Inspector
// cannot disagree; the decoder walks it group by group.
#include <array>
#include <cstring>
#include <vector>

#include "core/quant/block_util.h"
#include "core/quant/codec.h"
#include "core/quant/ggml_iquant_grids.h"

namespace tensormorph {
namespace {

constexpr int kQKK = 256;

struct BlockIq2Xxs {
  uint16_t d;
  uint16_t qs[kQKK / 8];
};
struct BlockIq2Xs {
  uint16_t d;
  uint16_t qs[kQKK / 8];
  uint8_t scales[kQKK / 32];
};
struct BlockIq2S {
  uint16_t d;
  uint8_t qs[kQKK / 4];  // 32 grid index bytes, then 32 sign bytes
  uint8_t qh[kQKK / 32];
  uint8_t scales[kQKK / 32];
};
struct BlockIq3Xxs {
  uint16_t d;
  uint8_t qs[3 * kQKK / 8];  // 64 grid indices, then 8 scale+sign words
};
struct BlockIq3S {
  uint16_t d;
  uint8_t qs[kQKK / 4];
  uint8_t qh[kQKK / 32];
  uint8_t signs[kQKK / 8];
  uint8_t scales[kQKK / 64];
};
struct BlockIq1S {
  uint16_t d;
  uint8_t qs[kQKK / 8];
  uint16_t qh[kQKK / 32];
};
struct BlockIq1M {
  uint8_t qs[kQKK / 8];
  uint8_t qh[kQKK / 16];
  uint8_t scales[kQKK / 32];  // 3-bit scales; top nibbles form the fp16 d
};
static_assert(sizeof(BlockIq2Xxs) == 66);
static_assert(sizeof(BlockIq2Xs) == 74);
static_assert(sizeof(BlockIq2S) == 82);
static_assert(sizeof(BlockIq3Xxs) == 98);
static_assert(sizeof(BlockIq3S) == 110);
static_assert(sizeof(BlockIq1S) == 50);
static_assert(sizeof(BlockIq1M) == 56);

// The per-group readers are inlined into each decoder, AVX2 clones
// included: called out of line from a VEX-encoded clone they cost an
// SSE/AVX transition each (measured: 20x slower for IQ1_M and IQ3_S).
#define TM_INLINE [[gnu::always_inline]] inline

inline uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// One group of 8 elements (IQ3: the two 4-element entries one sign byte
// covers): its sub-block scale, grid entries, signs or deltas.
struct Group8 {
  float scale = 0;        // ggml's db / dl, rounded as ggml rounds it
  int sub_block = 0;      // the scale's sub-block within the block
  int index[2] = {0, 0};  // grid entries (the second: IQ3's upper 4)
  uint8_t signs = 0;      // bit k: element k negated (IQ2, IQ3)
  float delta = 0;        // IQ1's shift
};

// ---- IQ2_XXS: 8 sub-blocks of 32; per 32, 4 one-byte indices, 4x7 sign
// bits and a 4-bit scale in two 32-bit words.
TM_INLINE Group8 GroupIq2Xxs(const uint8_t* p, float d, int g) {
  const int ib = g / 4, l = g % 4;
  const uint8_t* w = p + 2 + 8 * ib;
  const uint32_t aux1 = Load32(w + 4);
  Group8 r;
  r.sub_block = ib;
  r.scale = d * (0.5f + (aux1 >> 28)) * 0.25f;
  r.index[0] = w[l];
  r.signs = kIq2SignsOfIndex[(aux1 >> 7 * l) & 127];
  return r;
}

// ---- IQ2_XS: per 8 elements a 16-bit word (9-bit index, 7-bit sign
// index); 4-bit scales per 16.
TM_INLINE Group8 GroupIq2Xs(const uint8_t* p, float d, int g) {
  const int ib = g / 4, l = g % 4;
  uint16_t q;
  std::memcpy(&q, p + 2 + 2 * g, 2);
  const uint8_t sc = p[2 + 64 + ib];
  Group8 r;
  r.sub_block = 2 * ib + l / 2;
  r.scale = d * (0.5f + (l < 2 ? (sc & 0xf) : (sc >> 4))) * 0.25f;
  r.index[0] = q & 511;
  r.signs = kIq2SignsOfIndex[q >> 9];
  return r;
}

// ---- IQ2_S: 10-bit indices (8 low bits in qs, 2 in qh), raw sign bytes.
TM_INLINE Group8 GroupIq2S(const uint8_t* p, float d, int g) {
  const int ib = g / 4, l = g % 4;
  const uint8_t* qs = p + 2;
  const uint8_t qh = p[2 + 64 + ib];
  const uint8_t sc = p[2 + 64 + 8 + ib];
  Group8 r;
  r.sub_block = 2 * ib + l / 2;
  r.scale = d * (0.5f + (l < 2 ? (sc & 0xf) : (sc >> 4))) * 0.25f;
  r.index[0] = qs[g] | ((qh << (8 - 2 * l)) & 0x300);
  r.signs = qs[32 + g];
  return r;
}

// ---- IQ3_XXS: two one-byte indices of 4-entries per 8 elements; per 32,
// a word of 4x7 sign bits and a 4-bit scale.
TM_INLINE Group8 GroupIq3Xxs(const uint8_t* p, float d, int g) {
  const int ib = g / 4, l = g % 4;
  const uint8_t* qs = p + 2 + 8 * ib;
  const uint32_t aux = Load32(p + 2 + 64 + 4 * ib);
  Group8 r;
  r.sub_block = ib;
  r.scale = d * (0.5f + (aux >> 28)) * 0.5f;
  r.index[0] = qs[2 * l];
  r.index[1] = qs[2 * l + 1];
  r.signs = kIq2SignsOfIndex[(aux >> 7 * l) & 127];
  return r;
}

// ---- IQ3_S: 9-bit indices (8 in qs, 1 in qh), raw sign bytes, odd scales
// 1 + 2s per 32.
TM_INLINE Group8 GroupIq3S(const uint8_t* p, float d, int g) {
  const int ib = g / 4, l = g % 4;
  const uint8_t* b = p;
  const uint8_t* qs = b + 2 + 8 * ib;
  const uint8_t qh = b[2 + 64 + ib];
  const uint8_t sc = b[2 + 64 + 8 + 32 + ib / 2];
  Group8 r;
  r.sub_block = ib;
  r.scale = d * (1 + 2 * ((ib % 2 == 0) ? (sc & 0xf) : (sc >> 4)));
  r.index[0] = qs[2 * l] | ((qh << (8 - 2 * l)) & 256);
  r.index[1] = qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
  r.signs = b[2 + 64 + 8 + 4 * ib + l];
  return r;
}

// ---- IQ1_S: 11-bit indices (8 in qs, 3 in qh); per 32, a 3-bit odd scale
// and the sign of the delta in qh.
TM_INLINE Group8 GroupIq1S(const uint8_t* p, float d, int g) {
  const int ib = g / 4, l = g % 4;
  uint16_t qh;
  std::memcpy(&qh, p + 2 + 32 + 2 * ib, 2);
  Group8 r;
  r.sub_block = ib;
  r.scale = d * (2 * ((qh >> 12) & 7) + 1);
  r.index[0] = p[2 + g] | (((qh >> 3 * l) & 7) << 8);
  r.delta = qh & 0x8000 ? -kIq1Delta : kIq1Delta;
  return r;
}

// IQ1_M's fp16 d: the top nibbles of its four 16-bit scale words.
TM_INLINE float Iq1MSuperScale(const uint8_t* p) {
  uint16_t sc[4];
  std::memcpy(sc, p + 32 + 16, 8);
  const uint16_t h = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                     ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
  return F16ToF32Fast(h);
}

// ---- IQ1_M: 11-bit indices (8 in qs, 3 in a qh nibble whose top bit is
// the delta's sign); 3-bit odd scales per 16.
TM_INLINE Group8 GroupIq1M(const uint8_t* p, float d, int g) {
  const int ib = g / 4, l = g % 4;
  uint16_t sc;
  std::memcpy(&sc, p + 32 + 16 + 2 * (ib / 2), 2);
  const int shift = 6 * (ib % 2) + (l < 2 ? 0 : 3);
  const uint8_t qh = p[32 + 2 * ib + l / 2];
  const uint8_t nib = l % 2 == 0 ? (qh & 0xf) : (qh >> 4);
  Group8 r;
  r.sub_block = 2 * ib + l / 2;
  r.scale = d * (2 * ((sc >> shift) & 0x7) + 1);
  r.index[0] = p[4 * ib + l] | ((nib & 7) << 8);
  r.delta = nib & 0x8 ? -kIq1Delta : kIq1Delta;
  return r;
}

// How a type turns a group into values.
enum class Kind { kSigned8, kSigned4x2, kDelta8 };

struct IqType {
  DType dtype;
  int block_bytes;
  // The block's fp16 super-block scale, read once per block.
  float (*super_scale)(const uint8_t* block);
  Group8 (*group)(const uint8_t* block, float d, int g);
  Kind kind;
  const void* grid;  // uint64_t[] (8 coordinates) or uint32_t[] (4)
  int grid_size;
  int index_bits;
};

inline uint8_t Coord8(const void* grid, int index, int k) {
  return static_cast<uint8_t>(static_cast<const uint64_t*>(grid)[index] >>
                              (8 * k));
}
inline uint8_t Coord4(const void* grid, int index, int k) {
  return static_cast<uint8_t>(static_cast<const uint32_t*>(grid)[index] >>
                              (8 * k));
}

// Element k of a group, as ggml forms it: db * grid, negated where the
// sign bit is set, or dl * (grid + delta). ggml writes the sign as a product
// with -1.f, which its build compiles to a negation: a NaN scale comes out
// with its sign flipped (measured on the pinned library), so a negation here
// too.
inline float Signed(float v, bool negate) { return negate ? -v : v; }
inline float GroupValue(const IqType& t, const Group8& r, int k) {
  switch (t.kind) {
    case Kind::kSigned8:
      return Signed(r.scale * Coord8(t.grid, r.index[0], k),
                    r.signs & kIq2SignMask[k]);
    case Kind::kSigned4x2:
      return Signed(r.scale * Coord4(t.grid, r.index[k / 4], k % 4),
                    r.signs & kIq2SignMask[k]);
    case Kind::kDelta8:
      return r.scale *
             (static_cast<int8_t>(Coord8(t.grid, r.index[0], k)) + r.delta);
  }
  return 0;
}

// The reference decoder: 32 groups of 8 per block.
template <const IqType& T>
TM_MULTIVERSION void DecodeIq(const uint8_t* src, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = src + i * T.block_bytes;
    const float d = T.super_scale(p);
    for (int g = 0; g < kQKK / 8; ++g) {
      const Group8 r = T.group(p, d, g);
      for (int k = 0; k < 8; ++k) y[k] = GroupValue(T, r, k);
      y += 8;
    }
  }
}

// The fast path: the grid's coordinates as floats, 8 per group (IQ3's two
// 4-entries side by side), the scale applied 8 wide and the signs as a
// flipped sign bit: the same single rounding per element as the reference,
// in a form the compiler vectorises.
struct FloatGrid {
  std::vector<float> coords;  // grid_size x (8, or 4 for IQ3)
  explicit FloatGrid(const IqType& t) {
    const int dims = t.kind == Kind::kSigned4x2 ? 4 : 8;
    coords.resize(static_cast<size_t>(t.grid_size) * dims);
    for (int i = 0; i < t.grid_size; ++i) {
      for (int k = 0; k < dims; ++k) {
        coords[i * dims + k] =
            t.kind == Kind::kSigned4x2 ? Coord4(t.grid, i, k)
            : t.kind == Kind::kDelta8
                ? static_cast<float>(static_cast<int8_t>(Coord8(t.grid, i, k)))
                : Coord8(t.grid, i, k);
      }
    }
  }
};

template <const IqType& T>
TM_MULTIVERSION void DecodeIqFast(const uint8_t* src, int64_t nb, float* y) {
  static const FloatGrid grid(T);
  const float* coords = grid.coords.data();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = src + i * T.block_bytes;
    const float d = T.super_scale(p);
    for (int g = 0; g < kQKK / 8; ++g) {
      const Group8 r = T.group(p, d, g);
      float v[8];
      if constexpr (T.kind == Kind::kSigned4x2) {
        const float* a = coords + r.index[0] * 4;
        const float* b = coords + r.index[1] * 4;
        for (int k = 0; k < 4; ++k) {
          v[k] = r.scale * a[k];
          v[k + 4] = r.scale * b[k];
        }
      } else if constexpr (T.kind == Kind::kDelta8) {
        const float* a = coords + r.index[0] * 8;
        for (int k = 0; k < 8; ++k) v[k] = r.scale * (a[k] + r.delta);
      } else {
        const float* a = coords + r.index[0] * 8;
        for (int k = 0; k < 8; ++k) v[k] = r.scale * a[k];
      }
      for (int k = 0; k < 8; ++k) {
        uint32_t bits;
        std::memcpy(&bits, &v[k], 4);
        bits ^= static_cast<uint32_t>((r.signs >> k) & 1) << 31;
        std::memcpy(&y[k], &bits, 4);
      }
      y += 8;
    }
  }
}

// The marginal codebooks of scalar_info.h, from the grids themselves.
struct Marginal {
  double levels[2][32];  // [delta < 0][...] for IQ1; [0] for the others
  int n = 0;
};
Marginal MarginalOf(const IqType& t) {
  bool seen[256] = {};
  const int dims = t.kind == Kind::kSigned4x2 ? 4 : 8;
  for (int i = 0; i < t.grid_size; ++i) {
    for (int k = 0; k < dims; ++k) {
      seen[dims == 4 ? Coord4(t.grid, i, k) : Coord8(t.grid, i, k)] = true;
    }
  }
  Marginal m;
  for (int v = 0; v < 256; ++v) {
    if (!seen[v]) continue;
    if (t.kind == Kind::kDelta8) {
      const double c = static_cast<int8_t>(v);
      m.levels[0][m.n] = c + kIq1Delta;
      m.levels[1][m.n] = c - kIq1Delta;
      ++m.n;
    } else {
      m.levels[0][m.n++] = v;
      m.levels[0][m.n++] = -v;
    }
  }
  return m;
}

template <const IqType& T>
ScalarInfo InspectIq(const uint8_t* p, int e) {
  static const Marginal marginal = MarginalOf(T);
  const int g = e / 8, k = e % 8;
  const Group8 r = T.group(p, T.super_scale(p), g);
  ScalarInfo s;
  GridCodeword& c = s.codeword;
  const bool four = T.kind == Kind::kSigned4x2;
  c.index = r.index[four ? k / 4 : 0];
  c.grid_size = T.grid_size;
  c.dims = four ? 4 : 8;
  c.position = four ? k % 4 : k;
  for (int j = 0; j < c.dims; ++j) {
    c.entry[j] = static_cast<int8_t>(four ? Coord4(T.grid, c.index, j)
                                          : Coord8(T.grid, c.index, j));
  }
  c.sign_bits = r.signs;
  c.negated = (r.signs & kIq2SignMask[k]) != 0;
  c.delta = r.delta;
  c.sub_block_scale = r.scale;
  s.code = c.index;
  s.code_bits_value = static_cast<uint64_t>(c.index);
  s.code_width = T.index_bits;
  s.sub_block = r.sub_block;
  s.scale = r.scale;
  const int coord = T.kind == Kind::kDelta8
                        ? c.entry[c.position]
                        : static_cast<uint8_t>(c.entry[c.position]);
  s.level = (c.negated ? -coord : coord) + static_cast<double>(r.delta);
  s.value = GroupValue(T, r, k);
  FillCodebookSteps(r.scale, marginal.levels[r.delta < 0 ? 1 : 0], marginal.n,
                    s.level, &s);
  s.AddParam("sub_scale", r.scale);
  s.AddParam("grid_index", c.index);
  s.AddParam(T.kind == Kind::kDelta8 ? "delta" : "sign_bits",
             T.kind == Kind::kDelta8 ? r.delta : r.signs);
  return s;
}

constexpr IqType kIq2XxsType = {
    DType::kIQ2_XXS, 66,          LoadF16, GroupIq2Xxs,
    Kind::kSigned8,  kIq2XxsGrid, 256,     8};
constexpr IqType kIq2XsType = {DType::kIQ2_XS, 74,         LoadF16, GroupIq2Xs,
                               Kind::kSigned8, kIq2XsGrid, 512,     9};
constexpr IqType kIq2SType = {DType::kIQ2_S,  82,        LoadF16, GroupIq2S,
                              Kind::kSigned8, kIq2SGrid, 1024,    10};
constexpr IqType kIq3XxsType = {
    DType::kIQ3_XXS,  98,          LoadF16, GroupIq3Xxs,
    Kind::kSigned4x2, kIq3XxsGrid, 256,     8};
constexpr IqType kIq3SType = {DType::kIQ3_S,    110,       LoadF16, GroupIq3S,
                              Kind::kSigned4x2, kIq3SGrid, 512,     9};
constexpr IqType kIq1SType = {DType::kIQ1_S, 50,        LoadF16, GroupIq1S,
                              Kind::kDelta8, kIq1SGrid, 2048,    11};
constexpr IqType kIq1MType = {
    DType::kIQ1_M, 56,        Iq1MSuperScale, GroupIq1M,
    Kind::kDelta8, kIq1SGrid, 2048,           11};

// IQ1_M's fast path: its parameters are read per 32 elements, not per
// group (the int8 grid widened in place vectorises poorly: floats it is).
TM_MULTIVERSION void DecodeIq1MFast(const uint8_t* src, int64_t nb, float* y) {
  // (grid + delta) for either delta: the add is exact, so the table holds
  // the very floats the reference forms.
  static const std::vector<float> shifted = [] {
    const FloatGrid grid(kIq1MType);
    std::vector<float> t(grid.coords.size() * 2);
    for (size_t k = 0; k < grid.coords.size(); ++k) {
      t[k] = grid.coords[k] + kIq1Delta;
      t[grid.coords.size() + k] = grid.coords[k] + -kIq1Delta;
    }
    return t;
  }();
  const float* coords = shifted.data();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = src + i * 56;
    const float d = Iq1MSuperScale(p);
    const uint8_t* qs = p;
    const uint8_t* qh = p + 32;
    for (int ib = 0; ib < kQKK / 32; ++ib) {
      uint16_t sc;
      std::memcpy(&sc, p + 48 + 2 * (ib / 2), 2);
      const int shift = 6 * (ib % 2);
      const float dl[2] = {d * (2 * ((sc >> shift) & 0x7) + 1),
                           d * (2 * ((sc >> (shift + 3)) & 0x7) + 1)};
      for (int l = 0; l < 4; ++l) {
        const uint8_t h = qh[2 * ib + l / 2];
        const uint8_t nib = l % 2 == 0 ? (h & 0xf) : (h >> 4);
        const int index = qs[4 * ib + l] | ((nib & 7) << 8);
        const float* g = coords + ((nib & 0x8) ? 2048 * 8 : 0) + index * 8;
        const float s = dl[l / 2];
        for (int k = 0; k < 8; ++k) y[k] = s * g[k];
        y += 8;
      }
    }
  }
}

constexpr Codec kIq2Xxs = {DecodeIq<kIq2XxsType>, InspectIq<kIq2XxsType>};
constexpr Codec kIq2Xs = {DecodeIq<kIq2XsType>, InspectIq<kIq2XsType>};
constexpr Codec kIq2S = {DecodeIq<kIq2SType>, InspectIq<kIq2SType>};
constexpr Codec kIq3Xxs = {DecodeIq<kIq3XxsType>, InspectIq<kIq3XxsType>};
constexpr Codec kIq3S = {DecodeIq<kIq3SType>, InspectIq<kIq3SType>};
constexpr Codec kIq1S = {DecodeIq<kIq1SType>, InspectIq<kIq1SType>};
constexpr Codec kIq1M = {DecodeIq<kIq1MType>, InspectIq<kIq1MType>};
// Fast paths (decode_bench compares them with ggml's to_float;
// IquantFastPathTest holds them to the references above).
constexpr Codec kIq2XxsFast = {DecodeIqFast<kIq2XxsType>,
                               InspectIq<kIq2XxsType>};
constexpr Codec kIq2XsFast = {DecodeIqFast<kIq2XsType>, InspectIq<kIq2XsType>};
constexpr Codec kIq2SFast = {DecodeIqFast<kIq2SType>, InspectIq<kIq2SType>};
constexpr Codec kIq3XxsFast = {DecodeIqFast<kIq3XxsType>,
                               InspectIq<kIq3XxsType>};
constexpr Codec kIq3SFast = {DecodeIqFast<kIq3SType>, InspectIq<kIq3SType>};
constexpr Codec kIq1SFast = {DecodeIqFast<kIq1SType>, InspectIq<kIq1SType>};
constexpr Codec kIq1MFast = {DecodeIq1MFast, InspectIq<kIq1MType>};

}  // namespace

const Codec* GgmlIquantCodec(DType dtype) {
  switch (dtype) {
    case DType::kIQ2_XXS:
      return &kIq2XxsFast;
    case DType::kIQ2_XS:
      return &kIq2XsFast;
    case DType::kIQ2_S:
      return &kIq2SFast;
    case DType::kIQ3_XXS:
      return &kIq3XxsFast;
    case DType::kIQ3_S:
      return &kIq3SFast;
    case DType::kIQ1_S:
      return &kIq1SFast;
    case DType::kIQ1_M:
      return &kIq1MFast;
    default:
      return nullptr;
  }
}

const Codec* GgmlIquantReferenceCodec(DType dtype) {
  switch (dtype) {
    case DType::kIQ2_XXS:
      return &kIq2Xxs;
    case DType::kIQ2_XS:
      return &kIq2Xs;
    case DType::kIQ2_S:
      return &kIq2S;
    case DType::kIQ3_XXS:
      return &kIq3Xxs;
    case DType::kIQ3_S:
      return &kIq3S;
    case DType::kIQ1_S:
      return &kIq1S;
    case DType::kIQ1_M:
      return &kIq1M;
    default:
      return nullptr;
  }
}

}  // namespace tensormorph
