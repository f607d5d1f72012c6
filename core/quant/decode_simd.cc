#include "core/quant/decode_simd.h"

#include <atomic>
#include <cstring>

#include "core/quant/block_util.h"
#include "core/quant/float_formats.h"
#include "core/quant/kquant_scales.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define TM_DECODE_SIMD 1
#endif

namespace tensormorph {
namespace {

DecodeSimd Detect() {
#if defined(TM_DECODE_SIMD)
  __builtin_cpu_init();
  // CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports has no "f16c").
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c =
      __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  if (!f16c || !__builtin_cpu_supports("avx2")) return DecodeSimd::kScalar;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return DecodeSimd::kAvx512;
  return DecodeSimd::kAvx2;
#else
  return DecodeSimd::kScalar;
#endif
}

std::atomic<int>& Cap() {
  static std::atomic<int> cap{static_cast<int>(DecodeSimd::kAvx512)};
  return cap;
}

int Level() {
  static const int supported = static_cast<int>(Detect());
  const int cap = Cap().load(std::memory_order_relaxed);
  return cap < supported ? cap : supported;
}

inline uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

DecodeSimd SupportedDecodeSimd() {
  static const DecodeSimd supported = Detect();
  return supported;
}
DecodeSimd ActiveDecodeSimd() { return static_cast<DecodeSimd>(Level()); }
void CapDecodeSimdForTesting(DecodeSimd cap) {
  Cap().store(static_cast<int>(cap), std::memory_order_relaxed);
}

#if !defined(TM_DECODE_SIMD)

bool DecodeF16Simd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeBF16Simd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeQ4_0Simd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeQ4_1Simd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeQ5_0Simd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeQ5_1Simd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeQ8_0Simd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeQ8_1Simd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeTq1_0Simd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeQ2_KSimd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeQ3_KSimd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeQ4_KSimd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeQ5_KSimd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeQ6_KSimd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeIq4NlSimd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeIq4XsSimd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeMxfp4Simd(const uint8_t*, int64_t, float*) { return false; }
bool DecodeNvfp4Simd(const uint8_t*, int64_t, float*) { return false; }

#else

namespace {

#define TM_AVX2 __attribute__((target("avx2,f16c")))
#define TM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))

constexpr int kAvx2 = static_cast<int>(DecodeSimd::kAvx2);
constexpr int kAvx512 = static_cast<int>(DecodeSimd::kAvx512);

// ---- Building blocks -------------------------------------------------------
// Blocks hold sixteen (or 32) 4- or 5-bit codes; the kernels turn them into
// sixteen signed 8-bit levels in one register, then into floats times the
// block's scale. The int -> float conversion is exact for such small levels,
// so the product is the reference's `level * d`, rounded once.

// A block's binary16 scale by the hardware conversion rather than the
// 256 KiB table, whose random rows miss in cache. The two agree on every
// code but signalling NaNs, which the instruction quiets; the scale only
// ever meets a multiply, which quiets them too, so the products agree.
TM_AVX2 inline float Half(const uint8_t* p) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(Load16(p))));
}

// The low and high nibbles of 16 bytes: elements 0..15 and 16..31 of a
// ggml 32-element block.
TM_AVX2 inline __m128i LowNibbles(__m128i q) {
  return _mm_and_si128(q, _mm_set1_epi8(0x0F));
}
TM_AVX2 inline __m128i HighNibbles(__m128i q) {
  return _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0F));
}

// out[k] = float(levels[k]) * d for the sixteen int8 levels.
TM_AVX2 inline void Store16(float* out, __m128i levels, __m256 d) {
  const __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(levels));
  const __m256 b = _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(levels, levels)));
  _mm256_storeu_ps(out, _mm256_mul_ps(a, d));
  _mm256_storeu_ps(out + 8, _mm256_mul_ps(b, d));
}
// out[k] = float(levels[k]) * d + m: multiply and add rounded separately,
// as the reference (built with -ffp-contract=off) does.
TM_AVX2 inline void Store16Offset(float* out, __m128i levels, __m256 d,
                                  __m256 m) {
  const __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(levels));
  const __m256 b = _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(levels, levels)));
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_mul_ps(a, d), m));
  _mm256_storeu_ps(out + 8, _mm256_add_ps(_mm256_mul_ps(b, d), m));
}

// out[k] = d * float(levels[k]) - m (the K-quants' order), rounded as the
// reference rounds it.
TM_AVX2 inline void Store16Sub(float* out, __m128i levels, __m256 d, __m256 m) {
  const __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(levels));
  const __m256 b = _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(levels, levels)));
  _mm256_storeu_ps(out, _mm256_sub_ps(_mm256_mul_ps(d, a), m));
  _mm256_storeu_ps(out + 8, _mm256_sub_ps(_mm256_mul_ps(d, b), m));
}

// The 32 codes of 16 bytes, low nibbles (elements 0..15) in the low lane
// and high nibbles (16..31) in the high lane.
TM_AVX2 inline __m256i Nibbles32(const uint8_t* p) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q),
                          _mm256_set1_epi8(0x0F));
}

// Bit k of the 32-bit `qh` as byte k: 0x10 if set, else 0 (the fifth bits
// of a Q5 block's 32 codes, laid out as Nibbles32 lays out the rest).
TM_AVX2 inline __m256i FifthBits32(uint32_t qh) {
  const __m256i v = _mm256_set1_epi32(static_cast<int>(qh));
  const __m256i spread = _mm256_shuffle_epi8(
      v, _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                           0x0101010101010101, 0x0000000000000000));
  const __m256i mask =
      _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  return _mm256_and_si256(
      _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask),
      _mm256_set1_epi8(0x10));
}

// ---- F16 / BF16 ------------------------------------------------------------

// The hardware conversion is exact, as F16ToF32 is, subnormals included,
// except that it quiets signalling NaNs (exponent all ones, quiet bit clear,
// payload not zero: magnitudes 0x7C01..0x7DFF) where the reference keeps
// them as they are. Those lanes get the quiet bit (bit 22 of the float)
// flipped back.
TM_AVX2 inline __m256i Signalling16(__m256i h) {
  const __m256i mag = _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF));
  return _mm256_and_si256(_mm256_cmpgt_epi16(mag, _mm256_set1_epi16(0x7C00)),
                          _mm256_cmpgt_epi16(_mm256_set1_epi16(0x7E00), mag));
}
TM_AVX2 inline void StoreF16x8(float* out, __m128i h, __m128i signalling) {
  const __m256i quiet_bit = _mm256_set1_epi32(0x00400000);
  const __m256i fix =
      _mm256_and_si256(_mm256_cvtepi16_epi32(signalling), quiet_bit);
  const __m256i bits = _mm256_castps_si256(_mm256_cvtph_ps(h));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      _mm256_xor_si256(bits, fix));
}

TM_AVX2 inline void F16Reference(const uint8_t* src, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = F16ToF32Fast(Load16(src + 2 * i));
}

TM_AVX2 void F16Avx2(const uint8_t* src, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i));
    const __m256i s = Signalling16(h);
    StoreF16x8(out + i, _mm256_castsi256_si128(h), _mm256_castsi256_si128(s));
    StoreF16x8(out + i + 8, _mm256_extracti128_si256(h, 1),
               _mm256_extracti128_si256(s, 1));
  }
  F16Reference(src + 2 * i, n - i, out + i);
}

// GCC 12's _mm512_cvtph_ps passes _mm512_undefined_ps(), a self-initialised
// variable that -Wmaybe-uninitialized reports inside the intrinsic's header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
TM_AVX512 void F16Avx512(const uint8_t* src, int64_t n, float* out) {
  const __m512i quiet_bit = _mm512_set1_epi32(0x00400000);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 2; ++k) {
      const __m256i h = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(src + 2 * i + 32 * k));
      const __mmask16 s = _mm256_movepi16_mask(Signalling16(h));
      const __m512i bits = _mm512_castps_si512(_mm512_cvtph_ps(h));
      _mm512_storeu_si512(out + i + 16 * k,
                          _mm512_mask_xor_epi32(bits, s, bits, quiet_bit));
    }
  }
  F16Avx2(src + 2 * i, n - i, out + i);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

TM_AVX2 void BF16Avx2(const uint8_t* src, int64_t n, float* out) {
  const auto* s = reinterpret_cast<const __m128i*>(src);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32, s += 4) {
    for (int k = 0; k < 4; ++k) {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(s + k));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 8 * k),
                          _mm256_slli_epi32(w, 16));
    }
  }
  for (; i < n; ++i) out[i] = BF16ToF32(Load16(src + 2 * i));
}

// ---- Q4_0 / Q4_1 / Q5_0 / Q5_1 ---------------------------------------------

TM_AVX2 void Q4_0Avx2(const uint8_t* src, int64_t nb, float* out) {
  const __m256i eight = _mm256_set1_epi8(8);
  for (int64_t i = 0; i < nb; ++i, src += 18, out += 32) {
    const __m256 d = _mm256_set1_ps(Half(src));
    const __m256i l = _mm256_sub_epi8(Nibbles32(src + 2), eight);
    Store16(out, _mm256_castsi256_si128(l), d);
    Store16(out + 16, _mm256_extracti128_si256(l, 1), d);
  }
}

TM_AVX2 void Q4_1Avx2(const uint8_t* src, int64_t nb, float* out) {
  for (int64_t i = 0; i < nb; ++i, src += 20, out += 32) {
    const __m256 d = _mm256_set1_ps(Half(src));
    const __m256 m = _mm256_set1_ps(Half(src + 2));
    const __m256i l = Nibbles32(src + 4);
    Store16Offset(out, _mm256_castsi256_si128(l), d, m);
    Store16Offset(out + 16, _mm256_extracti128_si256(l, 1), d, m);
  }
}

TM_AVX2 void Q5_0Avx2(const uint8_t* src, int64_t nb, float* out) {
  const __m256i sixteen = _mm256_set1_epi8(16);
  for (int64_t i = 0; i < nb; ++i, src += 22, out += 32) {
    const __m256 d = _mm256_set1_ps(Half(src));
    const __m256i l = _mm256_sub_epi8(
        _mm256_or_si256(Nibbles32(src + 6), FifthBits32(Load32(src + 2))),
        sixteen);
    Store16(out, _mm256_castsi256_si128(l), d);
    Store16(out + 16, _mm256_extracti128_si256(l, 1), d);
  }
}

TM_AVX2 void Q5_1Avx2(const uint8_t* src, int64_t nb, float* out) {
  for (int64_t i = 0; i < nb; ++i, src += 24, out += 32) {
    const __m256 d = _mm256_set1_ps(Half(src));
    const __m256 m = _mm256_set1_ps(Half(src + 2));
    const __m256i l =
        _mm256_or_si256(Nibbles32(src + 8), FifthBits32(Load32(src + 4)));
    Store16Offset(out, _mm256_castsi256_si128(l), d, m);
    Store16Offset(out + 16, _mm256_extracti128_si256(l, 1), d, m);
  }
}

// Q8_0 (34-byte blocks) and Q8_1 (36): int8 codes after the scale(s).
template <int kBytes>
TM_AVX2 void Q8Avx2(const uint8_t* src, int64_t nb, float* out) {
  for (int64_t i = 0; i < nb; ++i, src += kBytes, out += 32) {
    const __m256 d = _mm256_set1_ps(Half(src));
    const uint8_t* qs = src + kBytes - 32;
    Store16(out, _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)), d);
    Store16(out + 16,
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16)), d);
  }
}

// ---- Q3_K ------------------------------------------------------------------

// 256 elements: two halves of 128, each four 2-bit planes of 32 bytes (the
// plane's shift), each plane two groups of 16 with their own scale. The
// high-mask bit of plane p of half h is bit 4h + p of hmask[l]; clear, it
// takes 4 off the level.
TM_AVX2 void Q3_KAvx2(const uint8_t* src, int64_t nb, float* out) {
  const __m128i three = _mm_set1_epi8(3), four = _mm_set1_epi8(4);
  for (int64_t i = 0; i < nb; ++i, src += 110) {
    const uint8_t* hmask = src;
    const uint8_t* qs = src + 32;
    const float d_all = Half(src + 108);
    int8_t scales[16];
    UnpackQ3Scales(src + 96, scales);
    const __m128i hm0 =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(hmask));
    const __m128i hm1 =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(hmask + 16));
    int is = 0;
    for (int half = 0; half < 2; ++half, qs += 32) {
      const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
      const __m128i q1 =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16));
      for (int p = 0; p < 4; ++p) {
        const __m128i shift = _mm_cvtsi32_si128(2 * p);
        const __m128i bit =
            _mm_set1_epi8(static_cast<char>(1 << (4 * half + p)));
        for (int g = 0; g < 2; ++g) {
          const __m128i q = g == 0 ? q0 : q1;
          const __m128i hm = g == 0 ? hm0 : hm1;
          const __m128i low = _mm_and_si128(_mm_srl_epi16(q, shift), three);
          const __m128i clear =
              _mm_cmpeq_epi8(_mm_and_si128(hm, bit), _mm_setzero_si128());
          const __m128i level = _mm_sub_epi8(low, _mm_and_si128(clear, four));
          const float dl = d_all * (scales[is++] - 32);
          Store16(out, level, _mm256_set1_ps(dl));
          out += 16;
        }
      }
    }
  }
}

// ---- Q2_K / Q4_K / Q5_K / Q6_K ---------------------------------------------

// 256 elements in two halves; in each, four 2-bit planes of the same 32
// bytes, each plane two groups of 16 with a 4-bit scale and 4-bit min.
TM_AVX2 void Q2_KAvx2(const uint8_t* src, int64_t nb, float* out) {
  const __m128i three = _mm_set1_epi8(3);
  for (int64_t i = 0; i < nb; ++i, src += 84) {
    const uint8_t* scales = src;
    const uint8_t* qs = src + 16;
    const float d = Half(src + 80), min = Half(src + 82);
    int is = 0;
    for (int half = 0; half < 2; ++half, qs += 32) {
      const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
      const __m128i q1 =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16));
      for (int p = 0; p < 4; ++p) {
        const __m128i shift = _mm_cvtsi32_si128(2 * p);
        for (int g = 0; g < 2; ++g, out += 16) {
          const uint8_t sc = scales[is++];
          const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
          const __m128i level =
              _mm_and_si128(_mm_srl_epi16(g == 0 ? q0 : q1, shift), three);
          Store16Sub(out, level, _mm256_set1_ps(dl), _mm256_set1_ps(ml));
        }
      }
    }
  }
}

// `value` in the bytes of `h` that have bit `u` set, 0 in the rest.
TM_AVX2 inline __m128i BitAs(__m128i h, __m128i u, __m128i value) {
  return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(h, u), u), value);
}

// Q4_K and Q5_K: four chunks of 64, each 32 bytes whose low nibbles are the
// first sub-block of 32 and high nibbles the second; Q5_K's fifth bits are
// bits 2c and 2c + 1 of its 32 qh bytes for chunk c.
template <bool kFiveBit>
TM_AVX2 void Q45_KAvx2(const uint8_t* src, int64_t nb, float* out) {
  constexpr int kBytes = kFiveBit ? 176 : 144;
  for (int64_t i = 0; i < nb; ++i, src += kBytes) {
    const float d = Half(src), min = Half(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qs = kFiveBit ? src + 48 : src + 16;
    __m128i h0 = _mm_setzero_si128(), h1 = _mm_setzero_si128();
    if (kFiveBit) {
      h0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
      h1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    }
    for (int c = 0; c < 4; ++c, qs += 32, out += 64) {
      uint8_t sc, m;
      ScaleMinK4(2 * c, scales, &sc, &m);
      const __m256 d1 = _mm256_set1_ps(d * sc), m1 = _mm256_set1_ps(min * m);
      ScaleMinK4(2 * c + 1, scales, &sc, &m);
      const __m256 d2 = _mm256_set1_ps(d * sc), m2 = _mm256_set1_ps(min * m);
      const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
      const __m128i q1 =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16));
      __m128i a0 = LowNibbles(q0), a1 = LowNibbles(q1);
      __m128i b0 = HighNibbles(q0), b1 = HighNibbles(q1);
      if (kFiveBit) {
        const __m128i u1 = _mm_set1_epi8(static_cast<char>(1 << (2 * c)));
        const __m128i u2 = _mm_set1_epi8(static_cast<char>(2 << (2 * c)));
        const __m128i sixteen = _mm_set1_epi8(16);
        a0 = _mm_or_si128(a0, BitAs(h0, u1, sixteen));
        a1 = _mm_or_si128(a1, BitAs(h1, u1, sixteen));
        b0 = _mm_or_si128(b0, BitAs(h0, u2, sixteen));
        b1 = _mm_or_si128(b1, BitAs(h1, u2, sixteen));
      }
      Store16Sub(out, a0, d1, m1);
      Store16Sub(out + 16, a1, d1, m1);
      Store16Sub(out + 32, b0, d2, m2);
      Store16Sub(out + 48, b1, d2, m2);
    }
  }
}

// Q6_K: two halves of 128; quarter k of a half takes the low (k < 2) or
// high nibbles of ql bytes 32 * (k % 2) on, and bits 2k of the qh bytes as
// its top two bits; each sixteen have an int8 scale.
TM_AVX2 void Q6_KAvx2(const uint8_t* src, int64_t nb, float* out) {
  const __m128i three = _mm_set1_epi8(3), thirty_two = _mm_set1_epi8(32);
  for (int64_t i = 0; i < nb; ++i, src += 210) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = Half(src + 208);
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8) {
      __m128i l[4], h[2];
      for (int k = 0; k < 4; ++k)
        l[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ql + 16 * k));
      for (int k = 0; k < 2; ++k)
        h[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qh + 16 * k));
      for (int quarter = 0; quarter < 4; ++quarter) {
        const __m128i shift = _mm_cvtsi32_si128(2 * quarter);
        for (int g = 0; g < 2; ++g, out += 16) {
          const __m128i lo = l[2 * (quarter % 2) + g];
          const __m128i low = quarter < 2 ? LowNibbles(lo) : HighNibbles(lo);
          const __m128i high = _mm_slli_epi16(
              _mm_and_si128(_mm_srl_epi16(h[g], shift), three), 4);
          const __m128i level =
              _mm_sub_epi8(_mm_or_si128(low, high), thirty_two);
          Store16(out, level, _mm256_set1_ps(d * sc[g + 2 * quarter]));
        }
      }
    }
  }
}

// ---- TQ1_0 ------------------------------------------------------------------

// The base-3 digit n of sixteen packed bytes as ggml extracts it,
// ((uint8)(byte * 3^n) * 3) >> 8, minus one: sixteen levels -1..1 in 16-bit
// lanes, times d.
TM_AVX2 inline void StoreTrits16(float* out, const uint8_t* bytes, int pow3,
                                 __m256 d) {
  const __m256i w = _mm256_cvtepu8_epi16(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
  const __m256i q = _mm256_and_si256(
      _mm256_mullo_epi16(w, _mm256_set1_epi16(static_cast<int16_t>(pow3))),
      _mm256_set1_epi16(0xFF));
  const __m256i t = _mm256_sub_epi16(
      _mm256_srli_epi16(_mm256_mullo_epi16(q, _mm256_set1_epi16(3)), 8),
      _mm256_set1_epi16(1));
  const __m256 a =
      _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(t)));
  const __m256 b =
      _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(t, 1)));
  _mm256_storeu_ps(out, _mm256_mul_ps(a, d));
  _mm256_storeu_ps(out + 8, _mm256_mul_ps(b, d));
}

// 54-byte blocks: qs[48], qh[4], d. Elements 0..159 are the five digits of
// qs[0..32) (digit-major), 160..239 those of qs[32..48), 240..255 the four
// of qh[0..4).
TM_AVX2 void Tq1_0Avx2(const uint8_t* src, int64_t nb, float* out) {
  constexpr int kPow3[5] = {1, 3, 9, 27, 81};
  for (int64_t i = 0; i < nb; ++i, src += 54) {
    const float df = Half(src + 52);
    const __m256 d = _mm256_set1_ps(df);
    for (int n = 0; n < 5; ++n, out += 32) {
      StoreTrits16(out, src, kPow3[n], d);
      StoreTrits16(out + 16, src + 16, kPow3[n], d);
    }
    for (int n = 0; n < 5; ++n, out += 16) {
      StoreTrits16(out, src + 32, kPow3[n], d);
    }
    for (int n = 0; n < 4; ++n) {
      for (int j = 0; j < 4; ++j) {
        const uint8_t q = static_cast<uint8_t>(src[48 + j] * kPow3[n]);
        const int trit = (static_cast<uint16_t>(q) * 3) >> 8;
        *out++ = static_cast<float>(trit - 1) * df;
      }
    }
  }
}

// ---- IQ4_NL / IQ4_XS / MXFP4 / NVFP4 ---------------------------------------
// Codebooks of sixteen int8 levels: one byte shuffle looks sixteen up.

TM_AVX2 inline __m128i Book(const int8_t* levels) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(levels));
}

// 32 codes in 16 bytes (low nibbles first), levels from `book`, times d.
TM_AVX2 inline void Codebook32(const uint8_t* qs, __m128i book, __m256 d,
                               float* out) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  Store16(out, _mm_shuffle_epi8(book, LowNibbles(q)), d);
  Store16(out + 16, _mm_shuffle_epi8(book, HighNibbles(q)), d);
}

TM_AVX2 void Iq4NlAvx2(const uint8_t* src, int64_t nb, float* out) {
  const __m128i book = Book(kIq4NlValues);
  for (int64_t i = 0; i < nb; ++i, src += 18, out += 32) {
    Codebook32(src + 2, book, _mm256_set1_ps(Half(src)), out);
  }
}

TM_AVX2 void Iq4XsAvx2(const uint8_t* src, int64_t nb, float* out) {
  const __m128i book = Book(kIq4NlValues);
  for (int64_t i = 0; i < nb; ++i, src += 136) {
    const float d = Half(src);
    const uint8_t* qs = src + 8;
    for (int ib = 0; ib < 8; ++ib, qs += 16, out += 32) {
      const float dl = d * (Iq4XsSubScale(src, ib) - 32);
      Codebook32(qs, book, _mm256_set1_ps(dl), out);
    }
  }
}

TM_AVX2 void Mxfp4Avx2(const uint8_t* src, int64_t nb, float* out) {
  const __m128i book = Book(kMxfp4Doubled);
  for (int64_t i = 0; i < nb; ++i, src += 17, out += 32) {
    Codebook32(src + 1, book, _mm256_set1_ps(E8M0ToF32Half(src[0])), out);
  }
}

// NVFP4: four sub-blocks of sixteen, each eight bytes (low nibbles are its
// elements 0..7, high nibbles 8..15) with its own UE4M3 scale.
TM_AVX2 void Nvfp4Avx2(const uint8_t* src, int64_t nb, float* out) {
  const __m128i book = Book(kMxfp4Doubled);
  const float* scale = Ue4m3HalfTable();
  for (int64_t i = 0; i < nb; ++i, src += 36) {
    for (int s = 0; s < 4; s += 2, out += 32) {
      const __m128i q =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 4 + 8 * s));
      const __m128i lo = LowNibbles(q), hi = HighNibbles(q);
      Store16(out, _mm_shuffle_epi8(book, _mm_unpacklo_epi64(lo, hi)),
              _mm256_set1_ps(scale[src[s]]));
      Store16(out + 16, _mm_shuffle_epi8(book, _mm_unpackhi_epi64(lo, hi)),
              _mm256_set1_ps(scale[src[s + 1]]));
    }
  }
}

}  // namespace

bool DecodeF16Simd(const uint8_t* src, int64_t n, float* out) {
  const int level = Level();
  if (level >= kAvx512) {
    F16Avx512(src, n, out);
  } else if (level >= kAvx2) {
    F16Avx2(src, n, out);
  } else {
    return false;
  }
  return true;
}

// BF16 has no AVX-512 path: the widening there measured slower (37 vs 43 G
// elements/s in L2 on Zen 4), and both are bound by stores beyond L2.
bool DecodeBF16Simd(const uint8_t* src, int64_t n, float* out) {
  if (Level() < kAvx2) return false;
  BF16Avx2(src, n, out);
  return true;
}

#define TM_AVX2_ONLY(Name, Kernel)                        \
  bool Name(const uint8_t* src, int64_t nb, float* out) { \
    if (Level() < kAvx2) return false;                    \
    Kernel(src, nb, out);                                 \
    return true;                                          \
  }
TM_AVX2_ONLY(DecodeQ4_0Simd, Q4_0Avx2)
TM_AVX2_ONLY(DecodeQ4_1Simd, Q4_1Avx2)
TM_AVX2_ONLY(DecodeQ5_0Simd, Q5_0Avx2)
TM_AVX2_ONLY(DecodeQ5_1Simd, Q5_1Avx2)
TM_AVX2_ONLY(DecodeQ8_0Simd, Q8Avx2<34>)
TM_AVX2_ONLY(DecodeQ8_1Simd, Q8Avx2<36>)
TM_AVX2_ONLY(DecodeTq1_0Simd, Tq1_0Avx2)
TM_AVX2_ONLY(DecodeQ2_KSimd, Q2_KAvx2)
TM_AVX2_ONLY(DecodeQ3_KSimd, Q3_KAvx2)
TM_AVX2_ONLY(DecodeQ4_KSimd, Q45_KAvx2<false>)
TM_AVX2_ONLY(DecodeQ5_KSimd, Q45_KAvx2<true>)
TM_AVX2_ONLY(DecodeQ6_KSimd, Q6_KAvx2)
TM_AVX2_ONLY(DecodeIq4NlSimd, Iq4NlAvx2)
TM_AVX2_ONLY(DecodeIq4XsSimd, Iq4XsAvx2)
TM_AVX2_ONLY(DecodeMxfp4Simd, Mxfp4Avx2)
TM_AVX2_ONLY(DecodeNvfp4Simd, Nvfp4Avx2)
#undef TM_AVX2_ONLY

#endif  // TM_DECODE_SIMD

}  // namespace tensormorph
