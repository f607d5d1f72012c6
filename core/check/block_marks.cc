#include "core/check/block_marks.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/quant/block_util.h"
#include "core/quant/decode_simd.h"
#include "core/quant/kquant_scales_simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TM_BLOCK_MARKS_SIMD 1
#endif

namespace tensormorph {
namespace {

#if defined(TM_BLOCK_MARKS_SIMD)
// AVX2 and F16C, as the decoders' vector level has them.
std::atomic<bool> marks_on{SupportedDecodeSimd() >= DecodeSimd::kAvx2};
#else
std::atomic<bool> marks_on{false};
#endif

constexpr float kF16 = 65504.0f;

#if defined(TM_BLOCK_MARKS_SIMD)
#define TM_AVX2 __attribute__((target("avx2,f16c,popcnt")))

// Q8_0: an fp16 d, then 32 int8 codes q; value = d * q, exact. With d
// finite and non-zero (the range usable): values differ where codes do;
// the end levels d * -128 and d * 127 are not zero and hold exactly the
// codes -128 and 127; the largest |value| is |d| times the largest |q|.
// GetSubBlockRuns' range [d * -128, d * 127] (both exact in float: an fp16
// times a code of 8 bits) is finite and not a point exactly when d is
// finite and non-zero, so the scales of eight blocks are judged at once by
// F16C (one at a time, through the table behind LoadF16's static guard and
// the range in double, they were most of the check of Q8_0).
TM_AVX2 void MarkQ8_0(const uint8_t* blocks, int64_t nb, uint8_t* ordinary) {
  const __m256i low = _mm256_set1_epi8(-128), high = _mm256_set1_epi8(127);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t i0 = 0; i0 < nb; i0 += 8) {
    const int64_t m = std::min<int64_t>(8, nb - i0);
    alignas(16) uint16_t bits[8] = {};
    for (int64_t k = 0; k < m; ++k)
      std::memcpy(&bits[k], blocks + 34 * (i0 + k), 2);
    alignas(32) float ad[8];
    const __m256 a = _mm256_and_ps(
        _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(bits))),
        abs_mask);
    _mm256_store_ps(ad, a);
    // 0 < |d| < inf (false for NaN); and |d| * 128 past fp16's largest.
    const int usable = _mm256_movemask_ps(
        _mm256_and_ps(_mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_GT_OQ),
                      _mm256_cmp_ps(a, _mm256_set1_ps(INFINITY), _CMP_LT_OQ)));
    const int big = _mm256_movemask_ps(
        _mm256_cmp_ps(_mm256_mul_ps(a, _mm256_set1_ps(128.0f)),
                      _mm256_set1_ps(kF16), _CMP_NLE_UQ));
    for (int64_t k = 0; k < m; ++k) {
      const uint8_t* b = blocks + 34 * (i0 + k);
      if ((usable >> k & 1) == 0) {
        ordinary[i0 + k] = 0;
        continue;
      }
      const __m256i q =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
      const bool differ =
          _mm256_movemask_epi8(_mm256_cmpeq_epi8(
              q, _mm256_set1_epi8(static_cast<char>(b[2])))) != -1;
      const int ends = __builtin_popcount(
          static_cast<unsigned>(_mm256_movemask_epi8(_mm256_or_si256(
              _mm256_cmpeq_epi8(q, low), _mm256_cmpeq_epi8(q, high)))));
      bool special = false;
      if ((big >> k & 1) != 0) {
        // Some code may pass fp16: the largest |q| (|-128| is 128 as an
        // unsigned byte) says.
        const __m256i aq = _mm256_abs_epi8(q);
        __m128i mq = _mm_max_epu8(_mm256_castsi256_si128(aq),
                                  _mm256_extracti128_si256(aq, 1));
        mq = _mm_max_epu8(mq, _mm_srli_si128(mq, 8));
        mq = _mm_max_epu8(mq, _mm_srli_si128(mq, 4));
        mq = _mm_max_epu8(mq, _mm_srli_si128(mq, 2));
        mq = _mm_max_epu8(mq, _mm_srli_si128(mq, 1));
        special =
            !(static_cast<float>(_mm_cvtsi128_si32(mq) & 0xff) * ad[k] <= kF16);
      }
      ordinary[i0 + k] = !special && differ && 4 * ends <= 32;
    }
  }
}

// Inlined into the kernels that call it (same target): a step of a kernel,
// not a call per sub-block.
#define TM_AVX2_STEP TM_AVX2 inline __attribute__((always_inline))

// A Q4_K block's eight sub-blocks as MarkQ4_K reads them: their parameters
// and run ranges by sub-block, and per-sub-block bit masks of which rules
// apply (bit `sub`).
struct Q4KSubBlocks {
  alignas(32) float d1s[8], m1s[8], los[8], his[8];
  int usable_mask;  // the run's range is finite and not a point
  int fast_mask;    // the rules read from the codes alone (see MarkQ4_K)
  int end0_mask;    // T[0] is on an end level and not zero
  int end15_mask;   // T[15] is on an end level and not zero
};

// The sub-blocks of the Q4_K block at `b`, as the decoder and
// GetSubBlockRuns compute them.
TM_AVX2_STEP void ReadQ4KSubBlocks(const uint8_t* b, Q4KSubBlocks* out) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 f16 = _mm256_set1_ps(kF16);
  const __m256 zero = _mm256_setzero_ps();
  const __m256d neg = _mm256_set1_pd(-0.0), fifteen_d = _mm256_set1_pd(15.0);
  const __m256d zero_d = _mm256_setzero_pd();
  const __m256 inf = _mm256_set1_ps(INFINITY), fifteen = _mm256_set1_ps(15.0f);
  // By F16C rather than LoadF16, whose table behind a static guard would
  // put a call in the marks' loop (a NaN's payload may differ: a NaN d or
  // dmin makes the sub-blocks unusable whatever it is).
  uint32_t d_dmin;
  std::memcpy(&d_dmin, b, 4);
  const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d_dmin)));
  const float d = _mm_cvtss_f32(dd);
  const float dmin = _mm_cvtss_f32(_mm_movehdup_ps(dd));
  // The eight sub-blocks' parameters, as the decoder computes them.
  __m256 vd1, vm1;
  SubBlockParamsK4(b + 4, d, dmin, &vd1, &vm1);
  _mm256_store_ps(out->d1s, vd1);
  _mm256_store_ps(out->m1s, vm1);
  // Their runs' ranges, as GetSubBlockRuns computes them: in double,
  // scale * level + offset, offset = -m1; std::min(a, b) is b < a ? b : a.
  __m128 range[2][2];
  for (int k = 0; k < 2; ++k) {
    const __m256d scale = _mm256_cvtps_pd(
        k == 0 ? _mm256_castps256_ps128(vd1) : _mm256_extractf128_ps(vd1, 1));
    const __m256d offset =
        _mm256_xor_pd(_mm256_cvtps_pd(k == 0 ? _mm256_castps256_ps128(vm1)
                                             : _mm256_extractf128_ps(vm1, 1)),
                      neg);
    const __m256d ra = _mm256_add_pd(_mm256_mul_pd(scale, zero_d), offset);
    const __m256d rb = _mm256_add_pd(_mm256_mul_pd(scale, fifteen_d), offset);
    range[0][k] = _mm256_cvtpd_ps(_mm256_min_pd(rb, ra));
    range[1][k] = _mm256_cvtpd_ps(_mm256_max_pd(rb, ra));
  }
  const __m256 lo = _mm256_set_m128(range[0][1], range[0][0]);
  const __m256 hi = _mm256_set_m128(range[1][1], range[1][0]);
  _mm256_store_ps(out->los, lo);
  _mm256_store_ps(out->his, hi);
  const __m256 usable = _mm256_and_ps(
      _mm256_and_ps(
          _mm256_cmp_ps(_mm256_and_ps(lo, abs_mask), inf, _CMP_LT_OQ),
          _mm256_cmp_ps(_mm256_and_ps(hi, abs_mask), inf, _CMP_LT_OQ)),
      _mm256_cmp_ps(lo, hi, _CMP_NEQ_UQ));
  const __m256 t0 = _mm256_sub_ps(_mm256_mul_ps(vd1, zero), vm1);
  const __m256 t15 = _mm256_sub_ps(_mm256_mul_ps(vd1, fifteen), vm1);
  const __m256 top =
      _mm256_max_ps(_mm256_and_ps(t0, abs_mask), _mm256_and_ps(t15, abs_mask));
  // top * 2^-22 is exact from 2^-104 up.
  const __m256 fast = _mm256_and_ps(
      _mm256_and_ps(usable,
                    _mm256_cmp_ps(_mm256_and_ps(vd1, abs_mask),
                                  _mm256_mul_ps(top, _mm256_set1_ps(0x1p-22f)),
                                  _CMP_GT_OQ)),
      _mm256_and_ps(_mm256_cmp_ps(top, _mm256_set1_ps(0x1p-100f), _CMP_GE_OQ),
                    _mm256_cmp_ps(top, f16, _CMP_LE_OQ)));
  // A level on an end level and not zero (the lambda would lose the
  // target attribute): for t0, then t15.
  __m256 on_end[2];
  for (int k = 0; k < 2; ++k) {
    const __m256 t = k == 0 ? t0 : t15;
    on_end[k] =
        _mm256_andnot_ps(_mm256_cmp_ps(t, zero, _CMP_EQ_OQ),
                         _mm256_or_ps(_mm256_cmp_ps(t, lo, _CMP_EQ_OQ),
                                      _mm256_cmp_ps(t, hi, _CMP_EQ_OQ)));
  }
  out->usable_mask = _mm256_movemask_ps(usable);
  out->fast_mask = _mm256_movemask_ps(fast);
  out->end0_mask = _mm256_movemask_ps(on_end[0]);
  out->end15_mask = _mm256_movemask_ps(on_end[1]);
}

// Whether a usable sub-block of the fast kind is ordinary, from its 32
// codes `c` (first `first_code`) alone: a value differs where a code does,
// and the end levels hold the codes 0 (`end0`) and 15 (`end15`).
TM_AVX2_STEP bool Q4KOrdinaryFromCodes(__m256i c, int first_code, bool end0,
                                       bool end15) {
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  const __m256i zero_code = _mm256_setzero_si256();
  const bool differ =
      _mm256_movemask_epi8(_mm256_cmpeq_epi8(
          c, _mm256_set1_epi8(static_cast<char>(first_code)))) != -1;
  int ends = 0;
  if (end0) {
    ends += __builtin_popcount(static_cast<unsigned>(
        _mm256_movemask_epi8(_mm256_cmpeq_epi8(c, zero_code))));
  }
  if (end15) {
    ends += __builtin_popcount(static_cast<unsigned>(
        _mm256_movemask_epi8(_mm256_cmpeq_epi8(c, nibble))));
  }
  return differ && 4 * ends <= 32;
}

// Whether usable sub-block `sub` of `p` is ordinary, from its 32 codes `c`
// (first `first_code`) looked up in a table of its 16 levels' flags
// (special, differs from the first value's level, on an end level and not
// zero), the levels computed as the decoder computes them.
TM_AVX2_STEP bool Q4KOrdinaryFromLevels(const Q4KSubBlocks& p, int sub,
                                        __m256i c, int first_code) {
  const __m256 codes_lo = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 codes_hi = _mm256_setr_ps(8, 9, 10, 11, 12, 13, 14, 15);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 f16 = _mm256_set1_ps(kF16);
  const __m256 zero = _mm256_setzero_ps();
  const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2),
                four = _mm256_set1_epi32(4);
  const __m256i bit0 = _mm256_set1_epi8(1), bit1 = _mm256_set1_epi8(2);
  const float d1 = p.d1s[sub], m1 = p.m1s[sub];
  const float lo1 = p.los[sub], hi1 = p.his[sub];
  const float first = d1 * static_cast<float>(first_code) - m1;
  const __m256 vd = _mm256_set1_ps(d1), vm = _mm256_set1_ps(m1);
  const __m256 vf = _mm256_set1_ps(first);
  const __m256 vl = _mm256_set1_ps(lo1), vh = _mm256_set1_ps(hi1);
  __m256i flags[2];
  for (int k = 0; k < 2; ++k) {
    const __m256 t =
        _mm256_sub_ps(_mm256_mul_ps(vd, k == 0 ? codes_lo : codes_hi), vm);
    const __m256 s =
        _mm256_cmp_ps(_mm256_and_ps(t, abs_mask), f16, _CMP_NLE_UQ);
    const __m256 df = _mm256_cmp_ps(t, vf, _CMP_NEQ_UQ);
    const __m256 e =
        _mm256_andnot_ps(_mm256_cmp_ps(t, zero, _CMP_EQ_OQ),
                         _mm256_or_ps(_mm256_cmp_ps(t, vl, _CMP_EQ_OQ),
                                      _mm256_cmp_ps(t, vh, _CMP_EQ_OQ)));
    flags[k] = _mm256_or_si256(
        _mm256_or_si256(_mm256_and_si256(_mm256_castps_si256(s), one),
                        _mm256_and_si256(_mm256_castps_si256(df), two)),
        _mm256_and_si256(_mm256_castps_si256(e), four));
  }
  // Levels 0..15 as 16 bytes, in both lanes for the lookup.
  const __m256i perm =
      _mm256_permute4x64_epi64(_mm256_packs_epi32(flags[0], flags[1]), 0xd8);
  const __m128i table = _mm_packs_epi16(_mm256_castsi256_si128(perm),
                                        _mm256_extracti128_si256(perm, 1));
  const __m256i f = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(table), c);
  const bool special = !_mm256_testz_si256(f, bit0);
  const bool differ = !_mm256_testz_si256(f, bit1);
  // Bit 2 of each byte to its bit 7.
  const int ends = __builtin_popcount(
      static_cast<unsigned>(_mm256_movemask_epi8(_mm256_slli_epi16(f, 5))));
  return !special && differ && 4 * ends <= 32;
}

// Q4_K: fp16 d and dmin, 12 bytes of packed 6-bit scales and mins, then
// four 32-byte rows of nibbles (low nibbles sub-block 2j, high 2j + 1).
// A sub-block's levels T[c] = d1 * c - m1 rise (or fall) with c. Where the
// step |d1| is more than two units in the last place of the largest
// |T|, no two levels round together and only T[0] and T[15] can be an end
// level (the run's range is T[0] and T[15] up to a rounding), so the rules
// are read from the codes: a value differs where a code does, and the end
// levels hold the codes 0 and 15. Otherwise (tiny steps, or a level past
// fp16), the 16 levels are computed as the decoder computes them, each
// level's flags (special, differs from the first value's level, on an end
// level and not zero) packed into a byte table, and the codes looked up in
// it 32 at a time.
TM_AVX2 void MarkQ4_K(const uint8_t* blocks, int64_t nb, uint8_t* ordinary) {
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  Q4KSubBlocks p;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* b = blocks + 144 * i;
    ReadQ4KSubBlocks(b, &p);
    for (int j = 0; j < 4; ++j) {
      const __m256i q =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * j));
      const __m256i codes[2] = {
          _mm256_and_si256(q, nibble),
          _mm256_and_si256(_mm256_srli_epi16(q, 4), nibble)};
      const int first_code[2] = {b[16 + 32 * j] & 0xf, b[16 + 32 * j] >> 4};
      for (int h = 0; h < 2; ++h) {
        const int sub = 2 * j + h;
        uint8_t& mark = ordinary[8 * i + sub];
        if (((p.usable_mask >> sub) & 1) == 0) {
          mark = 0;
        } else if ((p.fast_mask >> sub) & 1) {
          mark = Q4KOrdinaryFromCodes(codes[h], first_code[h],
                                      (p.end0_mask >> sub) & 1,
                                      (p.end15_mask >> sub) & 1);
        } else {
          mark = Q4KOrdinaryFromLevels(p, sub, codes[h], first_code[h]);
        }
      }
    }
  }
}

#define TM_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c,popcnt")))

// GCC 12's AVX-512 shuffles pass _mm512_undefined_*(), a self-initialised
// variable that -W(maybe-)uninitialized reports inside the intrinsics'
// header (as decode_simd.cc notes).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// ReadQ4KSubBlocks with AVX-512: the runs' ranges from the float levels
// (shown equal below) and every rule's comparison straight into a mask
// register, so the same masks, and the same lo and hi wherever they are
// read. (The AVX2 form was half of MarkQ4_K's time once the codes were read
// 64 at a time.)
TM_AVX512 inline __attribute__((always_inline)) void ReadQ4KSubBlocksAvx512(
    const uint8_t* b, Q4KSubBlocks* out) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 zero = _mm256_setzero_ps();
  const __m256 inf = _mm256_set1_ps(INFINITY);
  uint32_t d_dmin;
  std::memcpy(&d_dmin, b, 4);
  const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d_dmin)));
  __m256 vd1, vm1;
  SubBlockParamsK4(b + 4, _mm_cvtss_f32(dd), _mm_cvtss_f32(_mm_movehdup_ps(dd)),
                   &vd1, &vm1);
  _mm256_store_ps(out->d1s, vd1);
  _mm256_store_ps(out->m1s, vm1);
  // GetSubBlockRuns' ranges, scale * level + offset in double (offset =
  // -m1) at levels 0 and 15 rounded to float, ordered by std::min and
  // std::max (b < a ? b : a), are the float levels T[0] and T[15] ordered
  // by min_ps and max_ps: d1 = d * sc and m1 = dmin * m are exact (fp16
  // times 6 bits), so is d1 * 15 (21 bits), and a difference of two floats
  // rounded to double and then to float is the difference rounded to float
  // once (53 >= 2 * 24 + 2 bits); it is a multiple of 2^-24, so no rounding
  // to float makes a non-zero value zero, and zeros keep their signs (x + -y
  // is x - y). With d or dmin not finite both are NaN or infinite alike, and
  // the sub-block unusable either way (a NaN's payload may differ: the slow
  // path reads lo and hi of usable sub-blocks only). So no doubles: they
  // were a third of these marks' work.
  const __m256 t0 = _mm256_sub_ps(_mm256_mul_ps(vd1, zero), vm1);
  const __m256 t15 =
      _mm256_sub_ps(_mm256_mul_ps(vd1, _mm256_set1_ps(15.0f)), vm1);
  const __m256 lo = _mm256_min_ps(t15, t0);
  const __m256 hi = _mm256_max_ps(t15, t0);
  _mm256_store_ps(out->los, lo);
  _mm256_store_ps(out->his, hi);
  const __mmask8 usable = _mm256_mask_cmp_ps_mask(
      _mm256_mask_cmp_ps_mask(
          _mm256_cmp_ps_mask(_mm256_and_ps(lo, abs_mask), inf, _CMP_LT_OQ),
          _mm256_and_ps(hi, abs_mask), inf, _CMP_LT_OQ),
      lo, hi, _CMP_NEQ_UQ);
  const __m256 top =
      _mm256_max_ps(_mm256_and_ps(t0, abs_mask), _mm256_and_ps(t15, abs_mask));
  // top * 2^-22 is exact from 2^-104 up.
  __mmask8 fast = _mm256_mask_cmp_ps_mask(
      usable, _mm256_and_ps(vd1, abs_mask),
      _mm256_mul_ps(top, _mm256_set1_ps(0x1p-22f)), _CMP_GT_OQ);
  fast =
      _mm256_mask_cmp_ps_mask(fast, top, _mm256_set1_ps(0x1p-100f), _CMP_GE_OQ);
  fast = _mm256_mask_cmp_ps_mask(fast, top, _mm256_set1_ps(kF16), _CMP_LE_OQ);
  // A level on an end level and not zero.
  const __mmask8 end0 =
      _mm256_mask_cmp_ps_mask(_mm256_cmp_ps_mask(t0, lo, _CMP_EQ_OQ) |
                                  _mm256_cmp_ps_mask(t0, hi, _CMP_EQ_OQ),
                              t0, zero, _CMP_NEQ_UQ);
  const __mmask8 end15 =
      _mm256_mask_cmp_ps_mask(_mm256_cmp_ps_mask(t15, lo, _CMP_EQ_OQ) |
                                  _mm256_cmp_ps_mask(t15, hi, _CMP_EQ_OQ),
                              t15, zero, _CMP_NEQ_UQ);
  out->usable_mask = usable;
  out->fast_mask = fast;
  out->end0_mask = end0;
  out->end15_mask = end15;
}

// MarkQ4_K with the block's 128 code bytes in two 64-byte vectors: each of
// their low and high nibbles is two sub-blocks' codes (vector v, half k:
// sub-block 4 (v / 2) + 2 k + v % 2), judged 64 at a time into bit masks
// (codes equal to their sub-block's first, to 0, to 15) whose 32-bit halves
// are the sub-blocks' answers; the eight marks are written as one word.
// The rules and the slow sub-blocks (Q4KOrdinaryFromLevels) are MarkQ4_K's:
// this only reads the same codes with fewer instructions, since the marks
// bound `check` of Q4_K (issue 35).
TM_AVX512 void MarkQ4_KAvx512(const uint8_t* blocks, int64_t nb,
                              uint8_t* ordinary) {
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  const __m512i zero = _mm512_setzero_si512();
  Q4KSubBlocks p;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* b = blocks + 144 * i;
    ReadQ4KSubBlocksAvx512(b, &p);
    const __m512i z[2] = {_mm512_loadu_si512(b + 16),
                          _mm512_loadu_si512(b + 80)};
    unsigned fast_marks = 0;
    for (int v = 0; v < 4; ++v) {
      const __m512i c = _mm512_and_si512(
          v % 2 == 0 ? z[v / 2] : _mm512_srli_epi16(z[v / 2], 4), nibble);
      // Each half's first code in all its bytes: byte 0 of 128-bit lanes 0
      // and 2, spread over their halves.
      const __m512i lane_first = _mm512_shuffle_epi8(c, zero);
      const __m512i first =
          _mm512_shuffle_i64x2(lane_first, lane_first, _MM_SHUFFLE(2, 2, 0, 0));
      const uint64_t other = ~_mm512_cmpeq_epi8_mask(c, first);
      const uint64_t zeros = _mm512_testn_epi8_mask(c, c);
      const uint64_t fifteens = _mm512_cmpeq_epi8_mask(c, nibble);
      for (int k = 0; k < 2; ++k) {
        const int sub = 4 * (v / 2) + 2 * k + v % 2;
        const int shift = 32 * k;
        const uint64_t e0 = (p.end0_mask >> sub) & 1 ? zeros : 0;
        const uint64_t e15 = (p.end15_mask >> sub) & 1 ? fifteens : 0;
        const int ends =
            __builtin_popcount(static_cast<uint32_t>((e0 | e15) >> shift));
        const bool differ = static_cast<uint32_t>(other >> shift) != 0;
        fast_marks |= static_cast<unsigned>(differ && 4 * ends <= 32) << sub;
      }
    }
    unsigned marks = fast_marks & static_cast<unsigned>(p.fast_mask) &
                     static_cast<unsigned>(p.usable_mask);
    // Usable sub-blocks whose levels may round together or pass fp16: from
    // their 16 levels, as MarkQ4_K judges them.
    for (unsigned slow =
             static_cast<unsigned>(p.usable_mask & ~p.fast_mask) & 0xffu;
         slow != 0; slow &= slow - 1) {
      const int sub = __builtin_ctz(slow);
      const uint8_t* q = b + 16 + 32 * (sub / 2);
      const __m256i raw =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
      const __m256i c =
          _mm256_and_si256(sub % 2 == 0 ? raw : _mm256_srli_epi16(raw, 4),
                           _mm256_set1_epi8(0x0f));
      const int first_code = sub % 2 == 0 ? q[0] & 0xf : q[0] >> 4;
      marks |=
          static_cast<unsigned>(Q4KOrdinaryFromLevels(p, sub, c, first_code))
          << sub;
    }
    _mm_storel_epi64(
        reinterpret_cast<__m128i*>(ordinary + 8 * i),
        _mm_maskz_mov_epi8(static_cast<__mmask16>(marks), _mm_set1_epi8(1)));
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Counts of codes equal to `a` and to `b`, and whether any differs from
// codes[0], over n codes.
TM_AVX2 void CountCodes(const uint8_t* c, int64_t n, uint8_t a, uint8_t b,
                        int* na, int* nb, bool* differ) {
  const __m256i va = _mm256_set1_epi8(static_cast<char>(a));
  const __m256i vb = _mm256_set1_epi8(static_cast<char>(b));
  const __m256i vf = _mm256_set1_epi8(static_cast<char>(c[0]));
  int ca = 0, cb = 0;
  bool d = false;
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    const __m256i x =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + k));
    ca += __builtin_popcount(
        static_cast<unsigned>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(x, va))));
    cb += __builtin_popcount(
        static_cast<unsigned>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(x, vb))));
    d |= _mm256_movemask_epi8(_mm256_cmpeq_epi8(x, vf)) != -1;
  }
  for (; k < n; ++k) {
    ca += c[k] == a;
    cb += c[k] == b;
    d |= c[k] != c[0];
  }
  *na = ca;
  *nb = cb;
  *differ = d;
}

// Level L = (code ^ flip) - bias, value fl(scale * L): with |L| <= 2^20
// and |scale| >= 2^-100 the products of distinct levels are at least
// |scale| apart, far more than their rounding (2^-4 |scale|), so distinct
// codes decode distinctly; the run's range is the exact double product at
// the lowest and highest level rounded once, the same float as those
// levels' values; fl(|scale| * max |L|) <= 65504 bounds every |value|.
TM_AVX2 void MarkAffine(const Encoding::AffineCodes& codes, int64_t len,
                        int code_bits, uint8_t* ordinary) {
  const int64_t top_code = (int64_t{1} << code_bits) - 1;
  const uint8_t low_raw = codes.flip;
  const uint8_t high_raw = static_cast<uint8_t>(top_code ^ codes.flip);
  int64_t at = 0;
  for (size_t k = 0; k < codes.runs.size(); at += codes.runs[k].count, ++k) {
    const QuantRun& r = codes.runs[k];
    ordinary[k] = 0;
    if (r.count != len) continue;
    const float lo = static_cast<float>(r.range_min);
    const float hi = static_cast<float>(r.range_max);
    if (!(std::isfinite(lo) && std::isfinite(hi) && lo != hi)) continue;
    const float scale = codes.scale[k];
    const int64_t l_low = -static_cast<int64_t>(codes.bias[k]);
    const int64_t l_high = top_code + l_low;
    const int64_t most = std::max(std::abs(l_low), std::abs(l_high));
    if (most > (int64_t{1} << 20) || !(std::fabs(scale) >= 0x1p-100f) ||
        !(std::fabs(scale) * static_cast<float>(most) <= kF16)) {
      continue;
    }
    int n_low = 0, n_high = 0;
    bool differ = false;
    CountCodes(codes.codes.data() + at, r.count, low_raw, high_raw, &n_low,
               &n_high, &differ);
    const int64_t ends = (l_low != 0 ? n_low : 0) + (l_high != 0 ? n_high : 0);
    ordinary[k] = differ && 4 * ends <= len;
  }
}
#endif

}  // namespace

bool HasAffineMarks() { return marks_on.load(std::memory_order_relaxed); }

void MarkOrdinaryAffineRuns(const Encoding::AffineCodes& codes, int64_t len,
                            int code_bits, uint8_t* ordinary) {
#if defined(TM_BLOCK_MARKS_SIMD)
  MarkAffine(codes, len, code_bits, ordinary);
#else
  (void)codes;
  (void)len;
  (void)code_bits;
  (void)ordinary;
#endif
}

bool HasBlockMarks(DType dtype) {
  return (dtype == DType::kQ8_0 || dtype == DType::kQ4_K) &&
         marks_on.load(std::memory_order_relaxed);
}

void MarkOrdinaryBlocks(DType dtype, const uint8_t* blocks, int64_t nb,
                        uint8_t* ordinary) {
#if defined(TM_BLOCK_MARKS_SIMD)
  if (dtype == DType::kQ8_0) {
    MarkQ8_0(blocks, nb, ordinary);
  } else if (ActiveDecodeSimd() >= DecodeSimd::kAvx512) {
    MarkQ4_KAvx512(blocks, nb, ordinary);
  } else {
    MarkQ4_K(blocks, nb, ordinary);
  }
#else
  (void)dtype;
  (void)blocks;
  (void)nb;
  (void)ordinary;
#endif
}

void SetBlockMarks(bool on) {
#if defined(TM_BLOCK_MARKS_SIMD)
  marks_on.store(on && SupportedDecodeSimd() >= DecodeSimd::kAvx2);
#else
  (void)on;
#endif
}

}  // namespace tensormorph
