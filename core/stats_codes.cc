#include "core/stats_codes.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tensormorph {

namespace {

bool CountCodesScalar(const uint8_t* c, int64_t n, uint32_t count[16]) {
  std::fill(count, count + 16, 0u);
  // Four interleaved tables: a run of equal codes does not wait on its own
  // increments.
  uint32_t h[4][16] = {};
  int64_t j = 0;
  uint8_t any = 0;
  for (; j + 4 <= n; j += 4) {
    any |= c[j] | c[j + 1] | c[j + 2] | c[j + 3];
    if (any >= 16) return false;
    ++h[0][c[j]];
    ++h[1][c[j + 1]];
    ++h[2][c[j + 2]];
    ++h[3][c[j + 3]];
  }
  for (; j < n; ++j) {
    if (c[j] >= 16) return false;
    ++h[0][c[j]];
  }
  for (int k = 0; k < 16; ++k) count[k] = h[0][k] + h[1][k] + h[2][k] + h[3][k];
  return true;
}

#if defined(__x86_64__)
// The four bit planes of the 32 codes at c + i (bit b of each byte, by a
// shift and a movemask; zeros past n), `valid` marking those below n, and
// the bytes ORed into `any`. A tail shorter than 32 is copied into zeros
// first.
__attribute__((target("avx2"))) inline void PlanesAvx2(const uint8_t* c,
                                                       int64_t n, int64_t i,
                                                       uint32_t p[4],
                                                       uint32_t* valid,
                                                       __m256i* any) {
  alignas(32) uint8_t tail[32];
  const uint8_t* at = c + i;
  *valid = ~0u;
  if (n - i < 32) {
    *valid = n > i ? (uint32_t{1} << (n - i)) - 1 : 0;
    std::memset(tail, 0, sizeof(tail));
    if (n > i) std::memcpy(tail, at, static_cast<size_t>(n - i));
    at = tail;
  }
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
  *any = _mm256_or_si256(*any, x);
  p[0] = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_slli_epi16(x, 7)));
  p[1] = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_slli_epi16(x, 6)));
  p[2] = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_slli_epi16(x, 5)));
  p[3] = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_slli_epi16(x, 4)));
}

// 64 codes a step as bit planes, the count of code k the popcount of the
// AND of the planes or complements that spell it: four masks per 32 codes
// instead of sixteen compares and masks (a third of GPTQ's statistics on
// AVX2 went to those, bound by one movemask a cycle). A code of 16 or more
// shows in the bytes' OR.
__attribute__((target("avx2,popcnt"))) bool CountCodesAvx2(const uint8_t* c,
                                                           int64_t n,
                                                           uint32_t count[16]) {
  uint32_t sum[16] = {};
  __m256i any = _mm256_setzero_si256();
  for (int64_t i = 0; i < n; i += 64) {
    uint32_t a[4], b[4], va, vb;
    PlanesAvx2(c, n, i, a, &va, &any);
    PlanesAvx2(c, n, i + 32, b, &vb, &any);
    uint64_t p[4];
    for (int k = 0; k < 4; ++k) p[k] = a[k] | uint64_t{b[k]} << 32;
    const uint64_t valid = va | uint64_t{vb} << 32;
    // Codes by their bits 1 and 0 (low) and by bits 3 and 2 (high); a zero
    // byte past n has every plane clear, so only the complements mask it.
    const uint64_t n0 = valid & ~p[0], n2 = valid & ~p[2];
    const uint64_t low[4] = {n0 & ~p[1], p[0] & ~p[1], n0 & p[1], p[0] & p[1]};
    const uint64_t high[4] = {n2 & ~p[3], p[2] & ~p[3], n2 & p[3], p[2] & p[3]};
    for (int k = 0; k < 16; ++k) {
      sum[k] += static_cast<uint32_t>(std::popcount(low[k & 3] & high[k >> 2]));
    }
  }
  std::copy(sum, sum + 16, count);
  return _mm256_testz_si256(any, _mm256_set1_epi8(static_cast<char>(0xf0))) !=
         0;
}

// GCC 12 warns of its own AVX-512 intrinsics' undefined operands (as
// decode_simd.cc notes).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// CountCodesAvx2 at twice the width, the compares into mask registers: a
// group of 128 codes (GPTQ's) is two loads, and per code value two compares
// and two popcounts (a quarter of GPTQ's statistics went to AVX2's four).
__attribute__((target("avx512f,avx512bw,popcnt"))) bool CountCodesAvx512(
    const uint8_t* c, int64_t n, uint32_t count[16]) {
  uint32_t sum[16] = {};
  for (int64_t i = 0; i < n; i += 64) {
    const __mmask64 valid =
        n - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (n - i)) - 1;
    const __m512i x = _mm512_maskz_loadu_epi8(valid, c + i);
    for (int k = 0; k < 16; ++k) {
      const __mmask64 m = _mm512_mask_cmpeq_epi8_mask(
          valid, x, _mm512_set1_epi8(static_cast<char>(k)));
      sum[k] += static_cast<uint32_t>(std::popcount(_cvtmask64_u64(m)));
    }
  }
  int64_t total = 0;
  for (int k = 0; k < 16; ++k) {
    count[k] = sum[k];
    total += sum[k];
  }
  return total == n;
}

// CountQ4KBlockAvx2 two pairs of sub-blocks a load: the low nibbles of
// rows j and j + 1 are sub-blocks 2j and 2j + 2, in the compare mask's low
// and high 32 bits.
__attribute__((target("avx512f,avx512bw,popcnt"))) void CountQ4KBlockAvx512(
    const uint8_t* qs, uint32_t count[8][16]) {
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  for (int j = 0; j < 4; j += 2) {
    const __m512i x = _mm512_loadu_si512(qs + 32 * j);
    const __m512i lo = _mm512_and_si512(x, nibble);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), nibble);
    for (int k = 0; k < 16; ++k) {
      const __m512i code = _mm512_set1_epi8(static_cast<char>(k));
      const uint64_t l = _cvtmask64_u64(_mm512_cmpeq_epi8_mask(lo, code));
      const uint64_t h = _cvtmask64_u64(_mm512_cmpeq_epi8_mask(hi, code));
      count[2 * j][k] = static_cast<uint32_t>(std::popcount(l & 0xffffffffu));
      count[2 * j + 2][k] = static_cast<uint32_t>(std::popcount(l >> 32));
      count[2 * j + 1][k] =
          static_cast<uint32_t>(std::popcount(h & 0xffffffffu));
      count[2 * j + 3][k] = static_cast<uint32_t>(std::popcount(h >> 32));
    }
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// Marks each of out->level's 16 as finite, at lo, at hi (and not lo).
void MarkLevelsScalar(float lo, float hi, AffineLevels* out) {
  out->finite = out->low = out->high = 0;
  for (int k = 0; k < 16; ++k) {
    const float f = out->level[k];
    const bool at_low = f == lo;
    out->finite |= (std::isfinite(f) ? 1u : 0u) << k;
    out->low |= (at_low ? 1u : 0u) << k;
    out->high |= (!at_low && f == hi ? 1u : 0u) << k;
  }
}

#if defined(__x86_64__)
// MarkLevelsScalar's compares eight levels at a time.
__attribute__((target("avx2"))) void MarkLevelsAvx2(float lo, float hi,
                                                    AffineLevels* out) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf_bits = _mm256_set1_epi32(0x7f800000);
  const __m256 low_level = _mm256_set1_ps(lo), high_level = _mm256_set1_ps(hi);
  uint32_t finite = 0, low = 0, high = 0;
  for (int h = 0; h < 2; ++h) {
    const __m256 f = _mm256_loadu_ps(out->level + 8 * h);
    const __m256i mag = _mm256_and_si256(_mm256_castps_si256(f), abs_mask);
    const uint32_t fin = static_cast<uint32_t>(_mm256_movemask_ps(
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(inf_bits, mag))));
    const uint32_t at_low = static_cast<uint32_t>(
        _mm256_movemask_ps(_mm256_cmp_ps(f, low_level, _CMP_EQ_OQ)));
    const uint32_t at_high = static_cast<uint32_t>(
        _mm256_movemask_ps(_mm256_cmp_ps(f, high_level, _CMP_EQ_OQ)));
    finite |= fin << (8 * h);
    low |= at_low << (8 * h);
    high |= (at_high & ~at_low) << (8 * h);
  }
  out->finite = finite;
  out->low = low;
  out->high = high;
}

// Which of the decoders' level expressions ComputeLevelsAvx2 computes.
enum class LevelForm {
  kAffine,  // scale * float(int(code ^ flip) - bias)
  kOffset,  // scale * float(code) - offset
  kTable,   // scale * float(table[code])
};

// The scalar expressions eight codes at a time: the integer to float
// conversion, the product and the difference each round once, as cvtsi2ss,
// mulss and subss do (no contraction: -ffp-contract=off). Parameters a form
// does not use are ignored.
__attribute__((target("avx2"))) void ComputeLevelsAvx2(
    LevelForm form, float scale, int32_t bias, uint8_t flip, float offset,
    const int8_t* table, float lo, float hi, AffineLevels* out) {
  for (int h = 0; h < 2; ++h) {
    const __m256i k =
        _mm256_setr_epi32(8 * h, 8 * h + 1, 8 * h + 2, 8 * h + 3, 8 * h + 4,
                          8 * h + 5, 8 * h + 6, 8 * h + 7);
    __m256 f;
    if (form == LevelForm::kOffset) {
      f = _mm256_sub_ps(
          _mm256_mul_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(k)),
          _mm256_set1_ps(offset));
    } else if (form == LevelForm::kTable) {
      const __m256i entry = _mm256_cvtepi8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(table + 8 * h)));
      f = _mm256_mul_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(entry));
    } else {
      const __m256i code = _mm256_xor_si256(k, _mm256_set1_epi32(flip));
      f = _mm256_mul_ps(
          _mm256_set1_ps(scale),
          _mm256_cvtepi32_ps(_mm256_sub_epi32(code, _mm256_set1_epi32(bias))));
    }
    _mm256_storeu_ps(out->level + 8 * h, f);
  }
  MarkLevelsAvx2(lo, hi, out);
}
#endif

#if defined(__x86_64__)
// One load a pair of sub-blocks, split into its low and high nibbles; per
// code value a compare, a mask and a popcount for each (unpacking the
// codes to bytes and counting each sub-block apart cost a store and a call
// per 32 codes).
__attribute__((target("avx2,popcnt"))) void CountQ4KBlockAvx2(
    const uint8_t* qs, uint32_t count[8][16]) {
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  for (int j = 0; j < 4; ++j) {
    const __m256i x =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
    const __m256i lo = _mm256_and_si256(x, nibble);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), nibble);
    for (int k = 0; k < 16; ++k) {
      const __m256i code = _mm256_set1_epi8(static_cast<char>(k));
      count[2 * j][k] =
          static_cast<uint32_t>(std::popcount(static_cast<uint32_t>(
              _mm256_movemask_epi8(_mm256_cmpeq_epi8(lo, code)))));
      count[2 * j + 1][k] =
          static_cast<uint32_t>(std::popcount(static_cast<uint32_t>(
              _mm256_movemask_epi8(_mm256_cmpeq_epi8(hi, code)))));
    }
  }
}

__attribute__((target("avx2,popcnt"))) void CountQ4_0BlockAvx2(
    const uint8_t* qs, uint32_t count[16]) {
  const __m128i nibble = _mm_set1_epi8(0x0f);
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i codes = _mm256_set_m128i(
      _mm_and_si128(_mm_srli_epi16(x, 4), nibble), _mm_and_si128(x, nibble));
  for (int k = 0; k < 16; ++k) {
    count[k] = static_cast<uint32_t>(std::popcount(
        static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(
            codes, _mm256_set1_epi8(static_cast<char>(k)))))));
  }
}

// Two loads of 32 bytes, each the four 2-bit fields of every byte in turn;
// per field and code value a compare, a mask and a popcount.
__attribute__((target("avx2,popcnt"))) void CountTq2_0BlockAvx2(
    const uint8_t* qs, uint32_t count[16]) {
  const __m256i three = _mm256_set1_epi8(3);
  uint32_t sum[4] = {};
  for (int j = 0; j < 2; ++j) {
    __m256i x =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
    for (int l = 0; l < 4; ++l) {
      const __m256i c = _mm256_and_si256(x, three);
      for (int k = 0; k < 4; ++k) {
        sum[k] += static_cast<uint32_t>(std::popcount(
            static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(
                c, _mm256_set1_epi8(static_cast<char>(k)))))));
      }
      x = _mm256_srli_epi16(x, 2);
    }
  }
  std::fill(count, count + 16, 0u);
  for (int k = 0; k < 4; ++k) count[k] = sum[k];
}

// One load a half block; per 2-bit plane and code value a compare, a mask
// and two popcounts (the plane's two sub-blocks are the load's two 16-byte
// halves).
__attribute__((target("avx2,popcnt"))) void CountQ2KBlockAvx2(
    const uint8_t* qs, uint32_t count[16][16]) {
  const __m256i three = _mm256_set1_epi8(3);
  for (int h = 0; h < 2; ++h) {
    __m256i x =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * h));
    for (int j = 0; j < 4; ++j) {
      const __m256i c = _mm256_and_si256(x, three);
      uint32_t* lo = count[8 * h + 2 * j];
      uint32_t* hi = count[8 * h + 2 * j + 1];
      for (int k = 0; k < 4; ++k) {
        const uint32_t m = static_cast<uint32_t>(_mm256_movemask_epi8(
            _mm256_cmpeq_epi8(c, _mm256_set1_epi8(static_cast<char>(k)))));
        lo[k] = static_cast<uint32_t>(std::popcount(m & 0xffffu));
        hi[k] = static_cast<uint32_t>(std::popcount(m >> 16));
      }
      std::fill(lo + 4, lo + 16, 0u);
      std::fill(hi + 4, hi + 16, 0u);
      x = _mm256_srli_epi16(x, 2);
    }
  }
}

// As CountQ2KBlockAvx2, each plane's codes given their hmask bit (bit
// h * 4 + j of the same 32 bytes) as bit 2: eight code values a plane.
__attribute__((target("avx2,popcnt"))) void CountQ3KBlockAvx2(
    const uint8_t* hmask, const uint8_t* qs, uint32_t count[16][16]) {
  const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
  const __m256i hm =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hmask));
  for (int h = 0; h < 2; ++h) {
    const __m256i x =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * h));
    for (int j = 0; j < 4; ++j) {
      const int bit = 4 * h + j;  // of hmask, moved to bit 2
      const __m256i high =
          bit >= 2 ? _mm256_srl_epi16(hm, _mm_cvtsi32_si128(bit - 2))
                   : _mm256_sll_epi16(hm, _mm_cvtsi32_si128(2 - bit));
      const __m256i c = _mm256_or_si256(
          _mm256_and_si256(_mm256_srl_epi16(x, _mm_cvtsi32_si128(2 * j)),
                           three),
          _mm256_and_si256(high, four));
      uint32_t* lo = count[8 * h + 2 * j];
      uint32_t* hi = count[8 * h + 2 * j + 1];
      for (int k = 0; k < 8; ++k) {
        const uint32_t m = static_cast<uint32_t>(_mm256_movemask_epi8(
            _mm256_cmpeq_epi8(c, _mm256_set1_epi8(static_cast<char>(k)))));
        lo[k] = static_cast<uint32_t>(std::popcount(m & 0xffffu));
        hi[k] = static_cast<uint32_t>(std::popcount(m >> 16));
      }
      std::fill(lo + 8, lo + 16, 0u);
      std::fill(hi + 8, hi + 16, 0u);
    }
  }
}
#endif

}  // namespace

void CountQ3KBlock(const uint8_t* hmask, const uint8_t* qs, bool avx2,
                   uint32_t count[16][16]) {
#if defined(__x86_64__)
  if (avx2) return CountQ3KBlockAvx2(hmask, qs, count);
#endif
  (void)avx2;
  for (int s = 0; s < 16; ++s) std::fill(count[s], count[s] + 16, 0u);
  for (int h = 0; h < 2; ++h) {
    for (int w = 0; w < 32; ++w) {
      const uint8_t q = qs[32 * h + w];
      for (int j = 0; j < 4; ++j) {
        const int code =
            ((q >> 2 * j) & 3) | (((hmask[w] >> (4 * h + j)) & 1) << 2);
        ++count[8 * h + 2 * j + w / 16][code];
      }
    }
  }
}

void CountQ2KBlock(const uint8_t* qs, bool avx2, uint32_t count[16][16]) {
#if defined(__x86_64__)
  if (avx2) return CountQ2KBlockAvx2(qs, count);
#endif
  (void)avx2;
  for (int s = 0; s < 16; ++s) std::fill(count[s], count[s] + 16, 0u);
  for (int h = 0; h < 2; ++h) {
    for (int g = 0; g < 2; ++g) {
      for (int l = 0; l < 16; ++l) {
        const uint8_t q = qs[32 * h + 16 * g + l];
        for (int j = 0; j < 4; ++j)
          ++count[8 * h + 2 * j + g][(q >> 2 * j) & 3];
      }
    }
  }
}

void CountTq2_0Block(const uint8_t* qs, bool avx2, uint32_t count[16]) {
#if defined(__x86_64__)
  if (avx2) return CountTq2_0BlockAvx2(qs, count);
#endif
  (void)avx2;
  std::fill(count, count + 16, 0u);
  for (int b = 0; b < 64; ++b) {
    for (int l = 0; l < 4; ++l) ++count[(qs[b] >> (2 * l)) & 3];
  }
}

void CountQ4_0Block(const uint8_t* qs, bool avx2, uint32_t count[16]) {
#if defined(__x86_64__)
  if (avx2) return CountQ4_0BlockAvx2(qs, count);
#endif
  (void)avx2;
  std::fill(count, count + 16, 0u);
  for (int l = 0; l < 16; ++l) {
    ++count[qs[l] & 0xf];
    ++count[qs[l] >> 4];
  }
}

void CountQ4KBlock(const uint8_t* qs, DecodeSimd simd, uint32_t count[8][16]) {
#if defined(__x86_64__)
  if (simd == DecodeSimd::kAvx512) return CountQ4KBlockAvx512(qs, count);
  if (simd == DecodeSimd::kAvx2) return CountQ4KBlockAvx2(qs, count);
#endif
  (void)simd;
  for (int s = 0; s < 8; ++s) std::fill(count[s], count[s] + 16, 0u);
  for (int j = 0; j < 4; ++j) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q = qs[32 * j + l];
      ++count[2 * j][q & 0xf];
      ++count[2 * j + 1][q >> 4];
    }
  }
}

void ComputeAffineLevels(float scale, int32_t bias, uint8_t flip, float lo,
                         float hi, bool avx2, AffineLevels* out) {
#if defined(__x86_64__)
  if (avx2) {
    return ComputeLevelsAvx2(LevelForm::kAffine, scale, bias, flip, 0, nullptr,
                             lo, hi, out);
  }
#endif
  (void)avx2;
  for (int k = 0; k < 16; ++k) {
    out->level[k] =
        scale * static_cast<float>(
                    static_cast<int>(static_cast<uint8_t>(k) ^ flip) - bias);
  }
  MarkLevelsScalar(lo, hi, out);
}

void ComputeOffsetLevels(float scale, float offset, float lo, float hi,
                         bool avx2, AffineLevels* out) {
#if defined(__x86_64__)
  if (avx2) {
    return ComputeLevelsAvx2(LevelForm::kOffset, scale, 0, 0, offset, nullptr,
                             lo, hi, out);
  }
#endif
  (void)avx2;
  for (int k = 0; k < 16; ++k)
    out->level[k] = scale * static_cast<float>(k) - offset;
  MarkLevelsScalar(lo, hi, out);
}

void ComputeTableLevels(float scale, const int8_t table[16], float lo, float hi,
                        bool avx2, AffineLevels* out) {
#if defined(__x86_64__)
  if (avx2) {
    return ComputeLevelsAvx2(LevelForm::kTable, scale, 0, 0, 0, table, lo, hi,
                             out);
  }
#endif
  (void)avx2;
  for (int k = 0; k < 16; ++k)
    out->level[k] = scale * static_cast<float>(table[k]);
  MarkLevelsScalar(lo, hi, out);
}

float AsFloatOrNaN(double d) {
  const float f = static_cast<float>(d);
  return std::isfinite(d) && static_cast<double>(f) == d
             ? f
             : std::numeric_limits<float>::quiet_NaN();
}

bool CountCodes(const uint8_t* c, int64_t n, DecodeSimd simd,
                uint32_t count[16]) {
#if defined(__x86_64__)
  if (simd == DecodeSimd::kAvx512) return CountCodesAvx512(c, n, count);
  if (simd == DecodeSimd::kAvx2) return CountCodesAvx2(c, n, count);
#endif
  (void)simd;
  return CountCodesScalar(c, n, count);
}

void MarkLevels(const float level[16], float lo, float hi, bool avx2,
                AffineLevels* out) {
  std::memcpy(out->level, level, sizeof(out->level));
#if defined(__x86_64__)
  if (avx2) return MarkLevelsAvx2(lo, hi, out);
#endif
  (void)avx2;
  MarkLevelsScalar(lo, hi, out);
}

}  // namespace tensormorph
