#include "core/error_runs.h"

#include <bit>
#include <cfloat>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tensormorph {

double PlainFloatErrorSteps(float source, float e,
                            const FloatStepTable& table) {
  const double x = source;
  if (std::isnan(x) || std::isnan(e))
    return std::numeric_limits<double>::quiet_NaN();
  if (x == e) return 0;
  const double err = std::fabs(x - e);
  const FloatStepTable::Steps& s = table.Of(e);
  const double step = x > e ? s.above : s.below;
  return step > 0 && std::isfinite(err) ? err / step : INFINITY;
}

namespace {

// The fields where a step is what the vectors compute (Fields): c from
// 1.0's step above (2^-m for m mantissa bits), then every field checked
// against the table for both signs, a power of two or not, on both sides;
// the longest run of fields that all agree.
PlainFloatErrors::Fields FieldsOf(const FloatStepTable& table) {
  PlainFloatErrors::Fields f;
  int exp = 0;
  const double one_above = table.Of(1.0f).above;
  if (!(one_above > 0) || std::frexp(one_above, &exp) != 0.5) return f;
  const int32_t c = 254 + (1 - exp);  // 254 + m
  auto agrees = [&](int32_t field) {
    for (const uint32_t sign : {0u, 1u}) {
      for (const uint32_t mantissa : {0u, 1u}) {
        const float v =
            std::bit_cast<float>(sign << 31 | uint32_t(field) << 23 | mantissa);
        const FloatStepTable::Steps& st = table.Of(v);
        for (const bool above : {false, true}) {
          const bool towards_zero = above == (sign == 1);
          const int32_t inv = c - field + (mantissa == 0 && towards_zero);
          if (inv < 1 || inv > 254) return false;
          const double step = std::ldexp(1.0, 127 - inv);
          if ((above ? st.above : st.below) != step) return false;
        }
      }
    }
    return true;
  };
  for (int32_t lo = 1; lo <= 254;) {
    if (!agrees(lo)) {
      ++lo;
      continue;
    }
    int32_t hi = lo;
    while (hi + 1 <= 254 && agrees(hi + 1)) ++hi;
    if (hi - lo > f.hi - f.lo) f = {lo, hi, c};
    lo = hi + 1;
  }
  return f;
}

}  // namespace

void ErrorColumns::Reset(int64_t n) {
  fast_.assign(static_cast<size_t>(n), -INFINITY);
  slow_.assign(static_cast<size_t>(n), -INFINITY);
  nan_.assign(static_cast<size_t>(n), 0);
}

void ErrorColumns::FoldInto(int64_t begin, int64_t end,
                            MaxKeepingNaN* m) const {
  for (int64_t c = begin; c < end; ++c) {
    m->acc = std::max({m->acc, double{fast_[c]}, slow_[c]});
    m->nan |= nan_[c] != 0;
  }
}

#if defined(__x86_64__)
namespace {

__attribute__((target("avx2"))) bool FoldFloatsAvx2(const float* e, int64_t n,
                                                    float* fast) {
  // max(x, acc) is acc where x is NaN: those are skipped here, and said.
  __m256 unordered = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 x = _mm256_loadu_ps(e + k);
    _mm256_storeu_ps(fast + k, _mm256_max_ps(x, _mm256_loadu_ps(fast + k)));
    unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  bool nan = _mm256_movemask_ps(unordered) != 0;
  _mm256_zeroupper();
  for (; k < n; ++k) {
    if (e[k] != e[k]) {
      nan = true;
    } else {
      fast[k] = std::max(fast[k], e[k]);
    }
  }
  return nan;
}

__attribute__((target("avx2"))) void FoldDoublesAvx2(const double* e, int64_t n,
                                                     double* slow,
                                                     uint8_t* nan) {
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    const __m256d x = _mm256_loadu_pd(e + k);
    _mm256_storeu_pd(slow + k, _mm256_max_pd(x, _mm256_loadu_pd(slow + k)));
    const int lanes = _mm256_movemask_pd(_mm256_cmp_pd(x, x, _CMP_UNORD_Q));
    for (int b = 0; b < 4; ++b) nan[k + b] |= (lanes >> b) & 1;
  }
  _mm256_zeroupper();
  for (; k < n; ++k) {
    slow[k] = std::max(slow[k], e[k]);
    nan[k] |= std::isnan(e[k]) ? 1 : 0;
  }
}

}  // namespace
#endif

bool ErrorColumns::FoldFloats(const float* errors, int64_t n, DecodeSimd simd) {
#if defined(__x86_64__)
  if (simd >= DecodeSimd::kAvx2) return FoldFloatsAvx2(errors, n, fast_.data());
#endif
  bool nan = false;
  for (int64_t k = 0; k < n; ++k) {
    if (errors[k] != errors[k]) {
      nan = true;
    } else {
      fast_[k] = std::max(fast_[k], errors[k]);
    }
  }
  return nan;
}

void ErrorColumns::FoldDoubles(const double* errors, int64_t n,
                               DecodeSimd simd) {
#if defined(__x86_64__)
  if (simd >= DecodeSimd::kAvx2)
    return FoldDoublesAvx2(errors, n, slow_.data(), nan_.data());
#endif
  for (int64_t k = 0; k < n; ++k) FoldOne(k, errors[k]);
}

namespace {

// The statement, column by column (the vectors' fallback and the level
// without them).
void FoldColumnsScalar(const float* x, const float* e, int64_t n,
                       const FloatStepTable& table, double* slow,
                       uint8_t* nan) {
  for (int64_t k = 0; k < n; ++k) {
    const double err = PlainFloatErrorSteps(x[k], e[k], table);
    slow[k] = std::max(slow[k], err);
    nan[k] |= std::isnan(err) ? 1 : 0;
  }
}

// The statement for one element of a grid (Store's contract).
inline void StoreOne(const float* x, const float* e, int64_t k,
                     const FloatStepTable& table, float* out,
                     std::vector<int64_t>* inexact) {
  const double err = PlainFloatErrorSteps(x[k], e[k], table);
  const float f = static_cast<float>(err);
  if (double{f} == err) {  // exact (NaN never is)
    out[k] = f;
    return;
  }
  out[k] = std::numeric_limits<float>::quiet_NaN();
  inexact->push_back(k);
}

#if defined(__x86_64__)
// Eight elements in float32, with the double statement's bits where that is
// exact, which holds for a lane when:
//  - x and e are ordered, unequal, of one sign and within a factor of two of
//    each other (Sterbenz: x - e is then exact in float32, so it equals the
//    difference in double, and is finite);
//  - e's exponent field lies in [lo, hi], where the side's step is, as the
//    table says, 2^(field - c + 127) (half that below a power of two, towards
//    zero), so that its inverse is a float32 built from the field and
//    |x - e| * inverse is err / step exactly, unless the product leaves the
//    normal range, which the last test catches.
// Equal lanes give +0 as the statement does. A lane that meets neither (a
// NaN, an infinity, a sign change, an underflow to 0, a subnormal e) goes
// to the statement itself, that lane alone. Rounding to a float16 or
// bfloat16 moves a value by less than half its step, so nearly every lane
// of a real source passes.
struct Eight {
  __m256 errors;  // exact lanes' errors; -inf in the others
  int inexact;    // a bit per lane that must go to the statement
};

__attribute__((target("avx2"), always_inline)) inline Eight ErrorsOfEight(
    const float* x, const float* e, const PlainFloatErrors::Fields& f) {
  const __m256 xf = _mm256_loadu_ps(x), ef = _mm256_loadu_ps(e);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 ax = _mm256_and_ps(xf, abs_mask),
               ae = _mm256_and_ps(ef, abs_mask);
  const __m256 equal = _mm256_cmp_ps(xf, ef, _CMP_EQ_OQ);
  const __m256 sterbenz =
      _mm256_and_ps(_mm256_cmp_ps(ae, _mm256_add_ps(ax, ax), _CMP_LE_OQ),
                    _mm256_cmp_ps(ax, _mm256_add_ps(ae, ae), _CMP_LE_OQ));
  const __m256 sign_differs = _mm256_castsi256_ps(
      _mm256_srai_epi32(_mm256_castps_si256(_mm256_xor_ps(xf, ef)), 31));
  const __m256i bits = _mm256_castps_si256(ae);
  const __m256i field = _mm256_srli_epi32(bits, 23);
  const __m256 in_range = _mm256_castsi256_ps(
      _mm256_and_si256(_mm256_cmpgt_epi32(field, _mm256_set1_epi32(f.lo - 1)),
                       _mm256_cmpgt_epi32(_mm256_set1_epi32(f.hi + 1), field)));
  // Half the step (its inverse doubled: the field one more) below a power
  // of two, towards zero.
  const __m256i halved = _mm256_and_si256(
      _mm256_and_si256(_mm256_cmpeq_epi32(
                           _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffff)),
                           _mm256_setzero_si256()),
                       _mm256_castps_si256(_mm256_cmp_ps(ax, ae, _CMP_LT_OQ))),
      _mm256_set1_epi32(1));
  const __m256 inverse = _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_add_epi32(_mm256_sub_epi32(_mm256_set1_epi32(f.c), field), halved),
      23));
  const __m256 q =
      _mm256_mul_ps(_mm256_and_ps(_mm256_sub_ps(xf, ef), abs_mask), inverse);
  const __m256 normal =
      _mm256_and_ps(_mm256_cmp_ps(q, _mm256_set1_ps(FLT_MIN), _CMP_GE_OQ),
                    _mm256_cmp_ps(q, _mm256_set1_ps(INFINITY), _CMP_LT_OQ));
  const __m256 ok = _mm256_or_ps(
      equal, _mm256_andnot_ps(
                 sign_differs,
                 _mm256_and_ps(_mm256_and_ps(sterbenz, in_range), normal)));
  return {_mm256_blendv_ps(_mm256_set1_ps(-INFINITY),
                           _mm256_andnot_ps(equal, q), ok),
          ~_mm256_movemask_ps(ok) & 0xff};
}

__attribute__((target("avx2"))) void StoreAvx2(
    const float* x, const float* e, int64_t n,
    const PlainFloatErrors::Fields& f, const FloatStepTable& table, float* out,
    std::vector<int64_t>* inexact) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const Eight r = ErrorsOfEight(x + k, e + k, f);
    _mm256_storeu_ps(out + k, r.errors);
    for (int lanes = r.inexact; lanes != 0; lanes &= lanes - 1) {
      StoreOne(x, e, k + std::countr_zero(static_cast<unsigned>(lanes)), table,
               out, inexact);
    }
  }
  _mm256_zeroupper();
  for (; k < n; ++k) StoreOne(x, e, k, table, out, inexact);
}

__attribute__((target("avx2"))) void FoldColumnsAvx2(
    const float* x, const float* e, int64_t n,
    const PlainFloatErrors::Fields& f, const FloatStepTable& table, float* fast,
    double* slow, uint8_t* nan) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const Eight r = ErrorsOfEight(x + k, e + k, f);
    // The vectors' errors are never NaN, and float32 maxima of them are
    // their double maxima.
    _mm256_storeu_ps(fast + k,
                     _mm256_max_ps(_mm256_loadu_ps(fast + k), r.errors));
    for (int lanes = r.inexact; lanes != 0; lanes &= lanes - 1) {
      const int64_t i = k + std::countr_zero(static_cast<unsigned>(lanes));
      FoldColumnsScalar(x + i, e + i, 1, table, slow + i, nan + i);
    }
  }
  _mm256_zeroupper();
  FoldColumnsScalar(x + k, e + k, n - k, table, slow + k, nan + k);
}

// ErrorsOfEight's test and arithmetic sixteen lanes at a time, in mask
// registers: the same conditions, the same bits. GCC 12's AVX-512 shifts
// and maxima pass _mm512_undefined_*(), which -W(maybe-)uninitialized
// reports inside the intrinsics' header (as decode_simd.cc notes).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#define TM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))
struct Sixteen {
  __m512 errors;      // exact lanes' errors; -inf in the others
  __mmask16 inexact;  // lanes that must go to the statement
};

TM_AVX512 __attribute__((always_inline)) inline Sixteen ErrorsOfSixteen(
    const float* x, const float* e, const PlainFloatErrors::Fields& f) {
  const __m512 xf = _mm512_loadu_ps(x), ef = _mm512_loadu_ps(e);
  const __m512 ax = _mm512_abs_ps(xf), ae = _mm512_abs_ps(ef);
  const __mmask16 equal = _mm512_cmp_ps_mask(xf, ef, _CMP_EQ_OQ);
  const __mmask16 sterbenz =
      _mm512_cmp_ps_mask(ae, _mm512_add_ps(ax, ax), _CMP_LE_OQ) &
      _mm512_cmp_ps_mask(ax, _mm512_add_ps(ae, ae), _CMP_LE_OQ);
  const __mmask16 same_sign = _mm512_cmpge_epi32_mask(
      _mm512_xor_si512(_mm512_castps_si512(xf), _mm512_castps_si512(ef)),
      _mm512_setzero_si512());
  const __m512i bits = _mm512_castps_si512(ae);
  const __m512i field = _mm512_srli_epi32(bits, 23);
  const __mmask16 in_range =
      _mm512_cmpge_epi32_mask(field, _mm512_set1_epi32(f.lo)) &
      _mm512_cmple_epi32_mask(field, _mm512_set1_epi32(f.hi));
  const __mmask16 halved =
      _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0x7fffff)) &
      _mm512_cmp_ps_mask(ax, ae, _CMP_LT_OQ);
  __m512i inv = _mm512_sub_epi32(_mm512_set1_epi32(f.c), field);
  inv = _mm512_mask_add_epi32(inv, halved, inv, _mm512_set1_epi32(1));
  const __m512 q =
      _mm512_mul_ps(_mm512_abs_ps(_mm512_sub_ps(xf, ef)),
                    _mm512_castsi512_ps(_mm512_slli_epi32(inv, 23)));
  const __mmask16 normal =
      _mm512_cmp_ps_mask(q, _mm512_set1_ps(FLT_MIN), _CMP_GE_OQ) &
      _mm512_cmp_ps_mask(q, _mm512_set1_ps(INFINITY), _CMP_LT_OQ);
  const __mmask16 computed = same_sign & sterbenz & in_range & normal;
  __m512 out = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), computed, q);
  out = _mm512_mask_mov_ps(out, equal, _mm512_setzero_ps());
  return {out, static_cast<__mmask16>(~(equal | computed))};
}

TM_AVX512 void StoreAvx512(const float* x, const float* e, int64_t n,
                           const PlainFloatErrors::Fields& f,
                           const FloatStepTable& table, float* out,
                           std::vector<int64_t>* inexact) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const Sixteen r = ErrorsOfSixteen(x + k, e + k, f);
    _mm512_storeu_ps(out + k, r.errors);
    for (unsigned lanes = r.inexact; lanes != 0; lanes &= lanes - 1)
      StoreOne(x, e, k + std::countr_zero(lanes), table, out, inexact);
  }
  _mm256_zeroupper();
  for (; k < n; ++k) StoreOne(x, e, k, table, out, inexact);
}

TM_AVX512 void FoldColumnsAvx512(const float* x, const float* e, int64_t n,
                                 const PlainFloatErrors::Fields& f,
                                 const FloatStepTable& table, float* fast,
                                 double* slow, uint8_t* nan) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const Sixteen r = ErrorsOfSixteen(x + k, e + k, f);
    _mm512_storeu_ps(fast + k,
                     _mm512_max_ps(_mm512_loadu_ps(fast + k), r.errors));
    for (unsigned lanes = r.inexact; lanes != 0; lanes &= lanes - 1) {
      const int64_t i = k + std::countr_zero(lanes);
      FoldColumnsScalar(x + i, e + i, 1, table, slow + i, nan + i);
    }
  }
  _mm256_zeroupper();
  FoldColumnsScalar(x + k, e + k, n - k, table, slow + k, nan + k);
}
#undef TM_AVX512
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif

}  // namespace

void PlainFloatErrors::FoldColumns(const float* x, const float* e, int64_t n,
                                   ErrorColumns* columns) const {
#if defined(__x86_64__)
  if (simd_ >= DecodeSimd::kAvx512 && fields_.lo <= fields_.hi) {
    return FoldColumnsAvx512(x, e, n, fields_, table_, columns->fast_.data(),
                             columns->slow_.data(), columns->nan_.data());
  }
  if (simd_ >= DecodeSimd::kAvx2 && fields_.lo <= fields_.hi) {
    return FoldColumnsAvx2(x, e, n, fields_, table_, columns->fast_.data(),
                           columns->slow_.data(), columns->nan_.data());
  }
#endif
  FoldColumnsScalar(x, e, n, table_, columns->slow_.data(),
                    columns->nan_.data());
}

PlainFloatErrors::PlainFloatErrors(const FloatStepTable& table, DecodeSimd simd)
    : table_(table), simd_(simd), fields_(FieldsOf(table)) {}

void PlainFloatErrors::Store(const float* x, const float* e, int64_t n,
                             float* out, std::vector<int64_t>* inexact) const {
#if defined(__x86_64__)
  if (simd_ >= DecodeSimd::kAvx512 && fields_.lo <= fields_.hi) {
    return StoreAvx512(x, e, n, fields_, table_, out, inexact);
  }
  if (simd_ >= DecodeSimd::kAvx2 && fields_.lo <= fields_.hi) {
    return StoreAvx2(x, e, n, fields_, table_, out, inexact);
  }
#endif
  for (int64_t k = 0; k < n; ++k) StoreOne(x, e, k, table_, out, inexact);
}

}  // namespace tensormorph
