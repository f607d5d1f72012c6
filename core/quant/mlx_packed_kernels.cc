#include "core/quant/mlx_packed_kernels.h"

#include <algorithm>
#include <array>

#include "core/quant/decode_simd.h"
#include "core/quant/float_formats.h"
#include "core/quant/mlx_kernels.h"
#include "core/quant/mlx_round_simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tensormorph {
namespace {

// 256 entries of an 8-bit code's float value, built once.
using Table256 = std::array<float, 256>;

const Table256& E8M0Scales() {
  static const Table256 t = [] {
    Table256 v;
    v[0] = BitsToF32(0x00400000u);  // 2^-127
    for (int e = 1; e < 256; ++e) {
      v[e] = BitsToF32(static_cast<uint32_t>(e) << 23);  // 255: infinity
    }
    return v;
  }();
  return t;
}

const float* ScaleTable(MlxFloatMode mode) {
  return mode == MlxFloatMode::kNvfp4 ? F8E4M3Table() : E8M0Scales().data();
}

// Code i of an LSB-first stream of `bits`-bit codes (bits <= 8).
inline uint32_t CodeAt(const uint8_t* codes, int bits, int64_t i) {
  const int64_t bit = i * bits;
  uint32_t v = codes[bit / 8];
  if (bit % 8 + bits > 8) v |= static_cast<uint32_t>(codes[bit / 8 + 1]) << 8;
  return (v >> (bit % 8)) & ((1u << bits) - 1);
}

}  // namespace

float MlxFloatScale(MlxFloatMode mode, uint8_t code) {
  return ScaleTable(mode)[code];
}

int MlxFloatGroup(MlxFloatMode mode) {
  return mode == MlxFloatMode::kNvfp4 ? 16 : 32;
}

int MlxFloatBits(MlxFloatMode mode) {
  return mode == MlxFloatMode::kMxfp8 ? 8 : 4;
}

void MlxFloatDecodePackedScalar(MlxFloatMode mode, const uint8_t* codes,
                                const uint8_t* scales, int64_t n, float* out) {
  const int bits = MlxFloatBits(mode), group = MlxFloatGroup(mode);
  const float* level = bits == 8 ? F8E4M3Table() : kE2M1Values;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = MlxFloatValue(level[CodeAt(codes, bits, i)],
                           MlxFloatScale(mode, scales[i / group]));
  }
}

void MlxAffineDecodePackedScalar(const uint8_t* codes, int bits, int64_t group,
                                 const float* s, const float* b, DType t,
                                 int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] =
        MlxAffineValue(CodeAt(codes, bits, i), s[i / group], b[i / group], t);
  }
}

#if defined(__x86_64__)
namespace {

#define TM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))

// GCC 12's AVX-512 conversions and permutes pass _mm512_undefined_*(), which
// -W(maybe-)uninitialized reports inside the intrinsics' header (as
// decode_simd.cc notes).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

inline bool Finite(float x) {
  return (F32ToBits(x) & 0x7F800000u) != 0x7F800000u;
}

// Lanes [0, left) of a sixteen-lane step (all when left >= 16).
TM_AVX512 inline __mmask16 Lanes(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF)
                    : static_cast<__mmask16>((1u << left) - 1);
}

// The low `bytes` bytes (at most 16) at p, the rest zero; masked, so never
// a byte past p + bytes is touched (a row may end where the file does).
TM_AVX512 inline __m128i LoadBytes(const uint8_t* p, int64_t bytes) {
  const __mmask16 m = bytes >= 16 ? static_cast<__mmask16>(0xFFFF)
                                  : static_cast<__mmask16>((1u << bytes) - 1);
  return _mm_maskz_loadu_epi8(m, p);
}

// Sixteen codes of an LSB-first `bits`-bit stream in registers: the 2 * bits
// bytes they span are broadcast to the four 128-bit lanes, a byte shuffle
// moves the two bytes holding code j to the bottom of dword j, and a
// per-lane shift brings the code to bit 0. Bits above the code are the next
// code's: callers that index with the low 4 (5) bits mask or index tables
// that repeat every 2^bits entries.
struct Unpacker {
  __m512i shuffle, shift, code_mask;
};

TM_AVX512 inline Unpacker MakeUnpacker(int bits) {
  alignas(64) uint8_t shuffle[64];
  alignas(64) uint32_t shift[16];
  for (int j = 0; j < 16; ++j) {
    const int start = j * bits, byte = start / 8;
    shift[j] = static_cast<uint32_t>(start % 8);
    for (int k = 0; k < 4; ++k) shuffle[4 * j + k] = 0x80;  // zero
    shuffle[4 * j] = static_cast<uint8_t>(byte);
    if (start % 8 + bits > 8)
      shuffle[4 * j + 1] = static_cast<uint8_t>(byte + 1);
  }
  // _mm512_shuffle_epi8 indexes within each 128-bit lane; all four hold the
  // same bytes, so lane l's dwords 4l..4l+3 take their own indices.
  return {_mm512_load_si512(shuffle), _mm512_load_si512(shift),
          _mm512_set1_epi32((1 << bits) - 1)};
}

// FP4 modes. A group's level times its scale is exact in bfloat16 whenever
// the scale is finite (E2M1 levels have 2 significant bits; an E4M3 scale
// 4 and at least 2^-9, an E8M0 one a power of two down to 2^-127, whose
// products are multiples of 2^-128, inside bfloat16's subnormal grid of
// 2^-133), so the rounding is skipped there; a scale of infinity or NaN
// takes it (0 * inf is NaN, made 0x7FC00000 as the scalar makes it).
// Sixteen codes are 8 bytes: each byte doubled, widened to a dword, and
// shifted right by 0 or 4 leaves code j in the low 4 bits of lane j, all
// the permute reads.
TM_AVX512 inline __m512 Fp4Values(__m128i raw, __m512 e2m1, __m512i nibble,
                                  float s) {
  const __m512i idx = _mm512_srlv_epi32(
      _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(raw, raw)), nibble);
  const __m512 v =
      _mm512_mul_ps(_mm512_permutexvar_ps(idx, e2m1), _mm512_set1_ps(s));
  return Finite(s) ? v : mlx_simd::Round<DType::kBF16, true>(v);
}

template <int64_t kGroup>
TM_AVX512 void Fp4Avx512(const float* scale, const uint8_t* codes,
                         const uint8_t* scales, int64_t n, float* out) {
  const __m512 e2m1 = _mm512_loadu_ps(kE2M1Values);
  const __m512i nibble =
      _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
  const int64_t whole = n / kGroup;
  for (int64_t g = 0; g < whole; ++g) {
    const float s = scale[scales[g]];
    for (int64_t k = 0; k < kGroup; k += 16) {
      const int64_t i = g * kGroup + k;
      const __m128i raw =
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i / 2));
      _mm512_storeu_ps(out + i, Fp4Values(raw, e2m1, nibble, s));
    }
  }
  for (int64_t i = whole * kGroup; i < n; i += 16) {
    const int64_t left = n - i;
    const __m128i raw =
        LoadBytes(codes + i / 2, left >= 16 ? 8 : (left + 1) / 2);
    _mm512_mask_storeu_ps(
        out + i, Lanes(left),
        Fp4Values(raw, e2m1, nibble, scale[scales[i / kGroup]]));
  }
}

// mxfp8: E4M3 levels computed, not looked up: the code's fields moved into
// binary16's (bias 15 for 7), converted exactly by the hardware, times 256
// (exact). The NaN codes (0x7F, 0xFF) are blended in as 0x7FC00000. A level
// (4 significant bits, multiples of 2^-9) times 2^(e - 127) is exact in
// bfloat16 for e in [3, 254] (multiples of 2^-133 at least; 254 may
// overflow to infinity, which rounding keeps); e < 3 and e = 255 round.
TM_AVX512 inline __m512 Fp8Values(__m128i raw, float s, bool round) {
  const __m256i magnitude = _mm256_set1_epi16(0x7F),
                sign = _mm256_set1_epi16(0x80);
  const __m256i b = _mm256_cvtepu8_epi16(raw);
  const __m256i mag = _mm256_and_si256(b, magnitude);
  const __m256i half =
      _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(b, sign), 8),
                      _mm256_slli_epi16(mag, 7));
  const __m512 level = _mm512_mask_blend_ps(
      _mm256_cmpeq_epi16_mask(mag, magnitude),
      _mm512_mul_ps(_mm512_cvtph_ps(half), _mm512_set1_ps(256.0f)),
      _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
  const __m512 v = _mm512_mul_ps(level, _mm512_set1_ps(s));
  return round ? mlx_simd::Round<DType::kBF16, true>(v) : v;
}

TM_AVX512 void Fp8Avx512(const uint8_t* codes, const uint8_t* scales, int64_t n,
                         float* out) {
  const float* scale = E8M0Scales().data();
  const int64_t whole = n / 32;
  for (int64_t g = 0; g < whole; ++g) {
    const uint8_t e = scales[g];
    const bool round = e < 3 || e == 255;
    for (int64_t i = g * 32; i < g * 32 + 32; i += 16) {
      const __m128i raw =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
      _mm512_storeu_ps(out + i, Fp8Values(raw, scale[e], round));
    }
  }
  for (int64_t i = whole * 32; i < n; i += 16) {
    const int64_t left = n - i;
    const uint8_t e = scales[i / 32];
    _mm512_mask_storeu_ps(
        out + i, Lanes(left),
        Fp8Values(LoadBytes(codes + i, left), scale[e], e < 3 || e == 255));
  }
}

// R(R(q * s) + b), R = mlx_simd::Round<kT, kNan>: MlxAffineValue's two
// roundings.
template <DType kT, bool kNan>
TM_AVX512 inline __m512 AffineValue(__m512 q, __m512 vs, __m512 vb) {
  return mlx_simd::Round<kT, kNan>(
      _mm512_add_ps(mlx_simd::Round<kT, kNan>(_mm512_mul_ps(q, vs)), vb));
}

// The values of sixteen codes whose 2 * bits bytes `x` holds (bits < 8) or
// whose 16 bytes it is (bits 8), from a group's tables `lo` / `hi` or
// computed.
template <DType kT, bool kNan, int kBits>
TM_AVX512 inline __m512 AffineValues(const Unpacker& u, __m128i x, __m512 lo,
                                     __m512 hi, __m512 vs, __m512 vb) {
  if constexpr (kBits == 8) {
    return AffineValue<kT, kNan>(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(x)),
                                 vs, vb);
  }
  if constexpr (kBits == 4) {
    const __m512i idx = _mm512_srlv_epi32(
        _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(x, x)), u.shift);
    return _mm512_permutexvar_ps(idx, lo);
  }
  const __m512i idx = _mm512_srlv_epi32(
      _mm512_shuffle_epi8(_mm512_broadcast_i32x4(x), u.shuffle), u.shift);
  if constexpr (kBits <= 4) return _mm512_permutexvar_ps(idx, lo);
  if constexpr (kBits == 5) return _mm512_permutex2var_ps(lo, idx, hi);
  return AffineValue<kT, kNan>(
      _mm512_cvtepi32_ps(_mm512_and_si512(idx, u.code_mask)), vs, vb);
}

// One affine group [i, end) of the segment (i a multiple of 16): codes of 4
// bits or fewer through a 16-entry table of the group's values (entry k the
// value of code k mod 2^bits, so the next code's bits above the code index
// the same value), 5-bit codes through a 32-entry one, wider codes computed;
// each value as the scalar computes it. Sixteen codes are read as 16 bytes
// where `limit` leaves room, else exactly their 2 * bits bytes.
template <DType kT, bool kNan, int kBits>
TM_AVX512 void AffineGroupPacked(const Unpacker& u, const uint8_t* codes,
                                 const uint8_t* limit, int64_t i, int64_t end,
                                 float s, float b, float* out) {
  const __m512 vs = _mm512_set1_ps(s), vb = _mm512_set1_ps(b);
  __m512 lo = vs, hi = vs;
  if constexpr (kBits <= 5) {
    const __m512i iota =
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    lo = AffineValue<kT, kNan>(
        _mm512_cvtepi32_ps(_mm512_and_si512(iota, u.code_mask)), vs, vb);
    if constexpr (kBits == 5) {
      hi = AffineValue<kT, kNan>(
          _mm512_cvtepi32_ps(_mm512_add_epi32(iota, _mm512_set1_epi32(16))), vs,
          vb);
    }
  }
  constexpr int64_t kStep = 2 * kBits;  // bytes of sixteen codes
  const uint8_t* p = codes + i / 16 * kStep;
  for (; i + 16 <= end; i += 16, p += kStep) {
    const __m128i x = p + 16 <= limit
                          ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                          : LoadBytes(p, kStep);
    _mm512_storeu_ps(out + i,
                     AffineValues<kT, kNan, kBits>(u, x, lo, hi, vs, vb));
  }
  if (i < end) {
    const int64_t left = end - i;
    _mm512_mask_storeu_ps(
        out + i, Lanes(left),
        AffineValues<kT, kNan, kBits>(u, LoadBytes(p, (left * kBits + 7) / 8),
                                      lo, hi, vs, vb));
  }
}

template <DType kT, int kBits>
TM_AVX512 void AffinePackedAvx512(const uint8_t* codes, int64_t group,
                                  const float* s, const float* b, int64_t n,
                                  float* out) {
  const Unpacker u = MakeUnpacker(kBits);
  const uint8_t* limit = codes + (n * kBits + 7) / 8;
  for (int64_t g = 0, i = 0; i < n; ++g, i += group) {
    const int64_t end = std::min(n, i + group);
    if (Finite(s[g]) && Finite(b[g])) {
      AffineGroupPacked<kT, false, kBits>(u, codes, limit, i, end, s[g], b[g],
                                          out);
    } else {
      AffineGroupPacked<kT, true, kBits>(u, codes, limit, i, end, s[g], b[g],
                                         out);
    }
  }
}

template <DType kT>
TM_AVX512 void AffinePackedAvx512(const uint8_t* codes, int bits, int64_t group,
                                  const float* s, const float* b, int64_t n,
                                  float* out) {
  switch (bits) {
    case 2:
      return AffinePackedAvx512<kT, 2>(codes, group, s, b, n, out);
    case 3:
      return AffinePackedAvx512<kT, 3>(codes, group, s, b, n, out);
    case 4:
      return AffinePackedAvx512<kT, 4>(codes, group, s, b, n, out);
    case 5:
      return AffinePackedAvx512<kT, 5>(codes, group, s, b, n, out);
    case 6:
      return AffinePackedAvx512<kT, 6>(codes, group, s, b, n, out);
    default:
      return AffinePackedAvx512<kT, 8>(codes, group, s, b, n, out);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

bool UseAvx512() { return ActiveDecodeSimd() >= DecodeSimd::kAvx512; }

}  // namespace

bool MlxFloatDecodePacked(MlxFloatMode mode, const uint8_t* codes,
                          const uint8_t* scales, int64_t n, float* out) {
  if (!UseAvx512()) return false;
  if (mode == MlxFloatMode::kMxfp8) {
    Fp8Avx512(codes, scales, n, out);
  } else {
    const float* scale = ScaleTable(mode);
    if (mode == MlxFloatMode::kNvfp4) {
      Fp4Avx512<16>(scale, codes, scales, n, out);
    } else {
      Fp4Avx512<32>(scale, codes, scales, n, out);
    }
  }
  return true;
}

bool MlxAffineDecodePacked(const uint8_t* codes, int bits, int64_t group,
                           const float* s, const float* b, DType t, int64_t n,
                           float* out) {
  if (!UseAvx512()) return false;
  switch (t) {
    case DType::kBF16:
      AffinePackedAvx512<DType::kBF16>(codes, bits, group, s, b, n, out);
      break;
    case DType::kF16:
      AffinePackedAvx512<DType::kF16>(codes, bits, group, s, b, n, out);
      break;
    default:
      AffinePackedAvx512<DType::kF32>(codes, bits, group, s, b, n, out);
      break;
  }
  return true;
}

#else

bool MlxFloatDecodePacked(MlxFloatMode, const uint8_t*, const uint8_t*, int64_t,
                          float*) {
  return false;
}
bool MlxAffineDecodePacked(const uint8_t*, int, int64_t, const float*,
                           const float*, DType, int64_t, float*) {
  return false;
}

#endif

}  // namespace tensormorph
