#include "core/diff/float_runs.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/diff/error_element.h"
#include "core/diff/error_lanes256.h"
#include "core/diff/error_lanes512.h"
#include "core/quant/codec.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tensormorph {

using error_pass_internal::AddElement;
using error_pass_internal::Partials;

namespace {

// A format's steps by key, from InspectElement, and its range.
struct KeySteps {
  double below[FloatRuns::kKeys], above[FloatRuns::kKeys];
  double range_min = 0, range_max = 0;
  bool usable = false;  // every code agreed with its key, no zero steps
};

bool SameBits(double a, double b) {
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

// Adds one code's inspection to `k`; false when it disagrees with an
// earlier code of its key or with the format's range, or has zero steps.
bool AddCode(DType dtype, const uint8_t* bytes, size_t n, KeySteps* k,
             bool* seen) {
  ScalarInfo s;
  if (!InspectElement(dtype, absl::MakeConstSpan(bytes, n), 0, &s).ok()) {
    return false;
  }
  if (s.step_below == 0 && s.step_above == 0) return false;
  const uint32_t key = FloatRuns::KeyOf(s.value);
  const bool first_code = !seen[FloatRuns::kKeys];
  if (first_code) {
    k->range_min = s.range_min;
    k->range_max = s.range_max;
    seen[FloatRuns::kKeys] = true;
  } else if (!SameBits(k->range_min, s.range_min) ||
             !SameBits(k->range_max, s.range_max)) {
    return false;
  }
  if (!seen[key]) {
    seen[key] = true;
    k->below[key] = s.step_below;
    k->above[key] = s.step_above;
    return true;
  }
  return SameBits(k->below[key], s.step_below) &&
         SameBits(k->above[key], s.step_above);
}

// Every code of an 8- or 16-bit format; for F32, every key's extreme and
// middle mantissas (its steps are nextafter's, a function of the exponent,
// sign and the power-of-two case alone). Keys no code reaches keep NaN
// steps (no decoded value has them).
KeySteps* BuildKeySteps(DType dtype) {
  auto* k = new KeySteps;
  std::fill(k->below, k->below + FloatRuns::kKeys, std::nan(""));
  std::fill(k->above, k->above + FloatRuns::kKeys, std::nan(""));
  bool seen[FloatRuns::kKeys + 1] = {};  // the last: the range is set
  bool ok = true;
  if (dtype == DType::kF32) {
    for (uint32_t top = 0; top < 512 && ok; ++top) {
      for (uint32_t mant : {0u, 1u, 2u, 0x400000u, 0x7FFFFEu, 0x7FFFFFu}) {
        const uint32_t bits = top << 23 | mant;
        uint8_t b[4];
        std::memcpy(b, &bits, 4);
        ok = ok && AddCode(dtype, b, 4, k, seen);
      }
    }
  } else {
    const uint32_t codes =
        dtype == DType::kF16 || dtype == DType::kBF16 ? 65536 : 256;
    const size_t n = codes == 65536 ? 2 : 1;
    for (uint32_t c = 0; c < codes && ok; ++c) {
      const uint8_t b[2] = {static_cast<uint8_t>(c & 0xff),
                            static_cast<uint8_t>(c >> 8)};
      ok = AddCode(dtype, b, n, k, seen);
    }
  }
  k->usable = ok;
  return k;  // lives as long as the process
}

const KeySteps* KeyStepsOf(DType dtype) {
  static const KeySteps* const f32 = BuildKeySteps(DType::kF32);
  static const KeySteps* const f16 = BuildKeySteps(DType::kF16);
  static const KeySteps* const bf16 = BuildKeySteps(DType::kBF16);
  static const KeySteps* const e4m3 = BuildKeySteps(DType::kF8E4M3);
  static const KeySteps* const e5m2 = BuildKeySteps(DType::kF8E5M2);
  const KeySteps* k = nullptr;
  switch (dtype) {
    case DType::kF32:
      k = f32;
      break;
    case DType::kF16:
      k = f16;
      break;
    case DType::kBF16:
      k = bf16;
      break;
    case DType::kF8E4M3:
      k = e4m3;
      break;
    case DType::kF8E5M2:
      k = e5m2;
      break;
    default:
      return nullptr;
  }
  return k->usable ? k : nullptr;
}

// The plain float formats by their scheme name, as stored tensors give it.
std::optional<DType> PlainFloatDType(const EncodingInfo& info) {
  if (info.quantized || info.block_elems != 1) return std::nullopt;
  if (info.convention != "ggml" && info.convention != "safetensors" &&
      !info.convention.empty()) {
    return std::nullopt;
  }
  constexpr struct {
    const char* name;
    DType dtype;
  } kFormats[] = {{"F32", DType::kF32},
                  {"F16", DType::kF16},
                  {"BF16", DType::kBF16},
                  {"F8_E4M3", DType::kF8E4M3},
                  {"F8_E5M2", DType::kF8E5M2}};
  for (const auto& f : kFormats) {
    if (info.scheme == f.name) return f.dtype;
  }
  return std::nullopt;
}

}  // namespace

std::unique_ptr<FloatRuns> FloatRuns::For(const Encoding& quant,
                                          const RoundingBound& bound,
                                          double source_rel, bool source_f16) {
  const std::optional<DType> dtype = PlainFloatDType(quant.info());
  if (!dtype.has_value()) return nullptr;
  // A term per group (a stored scale's rounding, an offset, clipping ends)
  // is not a function of the key.
  if (bound.scale_f16 || bound.scale_rel != 0 || bound.offset_f16 ||
      bound.clip != RoundingBound::Clip::kNone) {
    return nullptr;
  }
  const KeySteps* k = KeyStepsOf(*dtype);
  if (k == nullptr) return nullptr;
  std::unique_ptr<FloatRuns> t(new FloatRuns);
  t->Fill(k->below, k->above, k->range_min, k->range_max, bound,
          bound.float_codes ? source_rel : 0, source_f16);
  return t;
}

void FloatRuns::Fill(const double* below, const double* above, double range_min,
                     double range_max, const RoundingBound& bound,
                     double source_rel, bool source_f16) {
  runs_.resize(kKeys);
  limits_.resize(kKeys);
  interior_.resize(kKeys);
  Columns& c = columns_;
  c.step.resize(2 * kKeys);
  c.inv.resize(2 * kKeys);
  c.slack.resize(kKeys);
  c.hi.resize(kKeys);
  c.lo.resize(kKeys);
  c.interior.resize(kKeys);
  c.sides.resize(2 * kKeys);
  for (int key = 0; key < kKeys; ++key) {
    QuantRun& r = runs_[key];
    r = {1, -1, below[key], above[key], range_min, range_max};
    ApplyBound(bound, &r);  // as DiffTensor bounds each run
    WidenForSourceRounding(source_rel, source_f16, &r);
    limits_[key] = LimitsOf(r);
    interior_[key] = InteriorBoundSteps(r);
    c.step[2 * key] = r.step_below;
    c.step[2 * key + 1] = r.step_above;
    c.inv[2 * key] = limits_[key].inv_below;
    c.inv[2 * key + 1] = limits_[key].inv_above;
    c.slack[key] = r.slack;
    c.hi[key] = limits_[key].clip_hi;
    c.lo[key] = limits_[key].clip_lo;
    c.interior[key] = interior_[key];
    for (int up = 0; up < 2; ++up) {
      c.sides[2 * key + up] = {
          c.step[2 * key + up], c.inv[2 * key + up], r.slack,
          c.interior[key],      c.hi[key],           c.lo[key]};
    }
  }
  // What every key shares (For refuses bounds where these vary).
  c.bound = runs_[0].bound;
  c.slack_rel = runs_[0].slack_rel;
  c.origin = runs_[0].origin;
}

void AccumulateFloatErrorsScalar(const float* values, const float* x, int64_t m,
                                 int64_t first, const FloatRuns& t,
                                 double* err_steps, ErrorSums* s,
                                 double* bound_steps) {
  Partials p;
  const int64_t body = m - m % 4;
  double interior = *bound_steps;
  for (int64_t i = 0; i < m; ++i) {
    const uint32_t key = FloatRuns::KeyOf(values[i]);
    const int lane = i < body ? static_cast<int>(i % 4) : -1;
    AddElement(values, t.run(key), t.limits(key), x, i, first, lane, &p,
               err_steps, s);
    interior = std::max(interior, t.interior(key));
  }
  *bound_steps = interior;
  s->sum_sq_err += (p.sq[0] + p.sq[1]) + (p.sq[2] + p.sq[3]);
  s->sum_abs_err += (p.ab[0] + p.ab[1]) + (p.ab[2] + p.ab[3]);
  s->sum_xx += (p.xx[0] + p.xx[1]) + (p.xx[2] + p.xx[3]);
  s->sum_hh += (p.hh[0] + p.hh[1]) + (p.hh[2] + p.hh[3]);
  s->sum_xh += (p.xh[0] + p.xh[1]) + (p.xh[2] + p.xh[3]);
}

int64_t FindFloatExcess(const float* values, const float* x,
                        const double* err_steps, int64_t m, const FloatRuns& t,
                        double excess, bool nearest_codes) {
  for (int64_t i = 0; i < m; ++i) {
    const uint32_t key = FloatRuns::KeyOf(values[i]);
    const ElementExcess e =
        ExcessOf(x[i], values[i], err_steps[i], t.run(key), t.limits(key));
    if (e.excess == excess && (e.clipped || nearest_codes)) return i;
  }
  return 0;
}

#if defined(__x86_64__)
namespace {

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_pd(), which
// -Wmaybe-uninitialized reports inside the intrinsics' header (clang knows
// no such warning, and would warn about the pragma).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// The running state of the AVX-512 float pass: the runs' pass's, and the
// largest interior bound (in steps) of the keys met.
struct FloatState {
  error_pass_internal::Lanes512 lanes;
  __m512d interior;
};

// Elements [i, i + 8) (kFull) or [i, i + 4), their runs gathered by key:
// AddElement's operations lane by lane; the upper lanes of a half step read
// as zeros and are masked out of every count, maximum and store.
template <bool kFull>
__attribute__((target("avx512f,avx512vl"), always_inline)) inline void
FloatStep(const float* values, const float* x, int64_t i, int64_t first,
          const FloatRuns::Columns& c, double* err_steps, FloatState& st) {
  constexpr __mmask8 lanes = kFull ? 0xFF : 0x0F;
  const __m512d zero = _mm512_setzero_pd();
  const __m256 qf = kFull ? _mm256_loadu_ps(values + i)
                          : _mm256_zextps128_ps256(_mm_loadu_ps(values + i));
  const __m512d xq = _mm512_cvtps_pd(qf);
  const __m512d xs =
      kFull ? _mm512_cvtps_pd(_mm256_loadu_ps(x + i))
            : _mm512_zextpd256_pd512(_mm256_cvtps_pd(_mm_loadu_ps(x + i)));
  const __m256i bits = _mm256_castps_si256(qf);
  const __m256i pow2 = _mm256_maskz_set1_epi32(
      _mm256_testn_epi32_mask(bits, _mm256_set1_epi32(0x7fffff)), 1);
  const __m256i key =
      _mm256_or_si256(_mm256_slli_epi32(_mm256_srli_epi32(bits, 23), 1), pow2);
  const __m512d err = _mm512_abs_pd(_mm512_sub_pd(xs, xq));
  const __mmask8 up = _mm512_cmp_pd_mask(xs, xq, _CMP_GT_OQ);
  const __m256i side =
      _mm256_mask_add_epi32(_mm256_add_epi32(key, key), up,
                            _mm256_add_epi32(key, key), _mm256_set1_epi32(1));
  const __m512d step = _mm512_i32gather_pd(side, c.step.data(), 8);
  const __m512d inv = _mm512_i32gather_pd(side, c.inv.data(), 8);
  const __mmask8 ok = _mm512_cmp_pd_mask(step, zero, _CMP_GT_OQ);
  __m512d v = _mm512_mask_blend_pd(ok, _mm512_set1_pd(__builtin_inf()),
                                   _mm512_div_pd(err, step));
  v = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(err, zero, _CMP_EQ_OQ), v, zero);
  if constexpr (kFull) {
    _mm512_storeu_pd(err_steps + i, v);
  } else {
    _mm512_mask_storeu_pd(err_steps + i, lanes, v);
  }
  error_pass_internal::AddMoments<kFull>(err, xs, xq, st.lanes);
  error_pass_internal::AddMaxima<kFull>(err, v, first + i, st.lanes);
  st.interior = _mm512_mask_max_pd(
      st.interior, lanes, _mm512_i32gather_pd(key, c.interior.data(), 8),
      st.interior);
  // The bound, as ExcessOf spells it (no extra: For takes no clipping ends).
  const __m512d slack = _mm512_i32gather_pd(key, c.slack.data(), 8);
  const __m512d dist =
      _mm512_abs_pd(_mm512_sub_pd(xq, _mm512_set1_pd(c.origin)));
  const __m512d allowed = _mm512_add_pd(
      _mm512_add_pd(
          _mm512_set1_pd(c.bound),
          _mm512_mul_pd(
              _mm512_add_pd(slack,
                            _mm512_mul_pd(_mm512_set1_pd(c.slack_rel), dist)),
              inv)),
      zero);
  const __m512d excess = _mm512_sub_pd(v, allowed);
  const __mmask8 clip =
      (_mm512_cmp_pd_mask(xs, _mm512_i32gather_pd(key, c.hi.data(), 8),
                          _CMP_GT_OQ) |
       _mm512_cmp_pd_mask(xs, _mm512_i32gather_pd(key, c.lo.data(), 8),
                          _CMP_LT_OQ)) &
      lanes;
  const __mmask8 beyond = _mm512_cmp_pd_mask(excess, zero, _CMP_GT_OQ) & lanes;
  error_pass_internal::AddVerdicts<kFull>(xs, xq, excess, clip, beyond,
                                          st.lanes);
}

// Eight elements at a time through the body, then four, then the last
// m % 4 through the scalar statement: AccumulateFloatErrorsScalar's bits.
__attribute__((target("avx512f,avx512vl"))) void AccumulateFloatErrorsAvx512(
    const float* values, const float* x, int64_t m, int64_t first,
    const FloatRuns& t, double* err_steps, ErrorSums* s, double* bound_steps) {
  FloatState st;
  st.lanes = error_pass_internal::StartLanes512(*s);
  st.interior = _mm512_set1_pd(*bound_steps);
  const FloatRuns::Columns& c = t.columns();
  const int64_t body = m - m % 4;
  int64_t i = 0;
  for (; i + 8 <= body; i += 8) {
    FloatStep<true>(values, x, i, first, c, err_steps, st);
  }
  if (i < body) {
    FloatStep<false>(values, x, i, first, c, err_steps, st);
    i += 4;
  }
  Partials unused;
  double interior = *bound_steps;
  for (; i < m; ++i) {
    const uint32_t key = FloatRuns::KeyOf(values[i]);
    AddElement(values, t.run(key), t.limits(key), x, i, first, -1, &unused,
               err_steps, s);
    interior = std::max(interior, t.interior(key));
  }
  error_pass_internal::FoldLanes512(st.lanes, s);
  // Interior bounds are never NaN nor below zero: their maximum does not
  // depend on the order it is taken in.
  *bound_steps = std::max(interior, _mm512_reduce_max_pd(st.interior));
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// GCC 12's AVX2 gathers start from _mm256_undefined_pd() too.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// FloatStep at four lanes: elements [i, i + 4), their runs gathered by key.
__attribute__((target("avx2"), always_inline)) inline void FloatStep256(
    const float* values, const float* x, int64_t i, int64_t first,
    const FloatRuns::Columns& c, double* err_steps,
    error_pass_internal::Lanes256& st, __m256d& interior) {
  const __m256d zero = _mm256_setzero_pd();
  const __m256d sign = _mm256_set1_pd(-0.0);
  const __m128 qf = _mm_loadu_ps(values + i);
  const __m256d xq = _mm256_cvtps_pd(qf);
  const __m256d xs = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
  // KeyOf: sign and exponent, then whether the significand is zero.
  const __m128i bits = _mm_castps_si128(qf);
  const __m128i pow2 = _mm_and_si128(
      _mm_cmpeq_epi32(_mm_and_si128(bits, _mm_set1_epi32(0x7fffff)),
                      _mm_setzero_si128()),
      _mm_set1_epi32(1));
  const __m128i key =
      _mm_or_si128(_mm_slli_epi32(_mm_srli_epi32(bits, 23), 1), pow2);
  const __m256d err = _mm256_andnot_pd(sign, _mm256_sub_pd(xs, xq));
  const __m256d up = _mm256_cmp_pd(xs, xq, _CMP_GT_OQ);
  // The compare's 64-bit lanes packed to 32: -1 where the source is above.
  const __m128i up32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(
      _mm256_castpd_si256(up), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
  const __m128i side = _mm_sub_epi32(_mm_add_epi32(key, key), up32);
  // Each element's side row (its six doubles in order), transposed into one
  // vector a column.
  using Side = FloatRuns::Columns::Side;
  static_assert(sizeof(Side) == 64 && offsetof(Side, hi) == 32);
  const Side* rows = c.sides.data();
  const auto* r0 =
      reinterpret_cast<const double*>(rows + _mm_cvtsi128_si32(side));
  const auto* r1 =
      reinterpret_cast<const double*>(rows + _mm_extract_epi32(side, 1));
  const auto* r2 =
      reinterpret_cast<const double*>(rows + _mm_extract_epi32(side, 2));
  const auto* r3 =
      reinterpret_cast<const double*>(rows + _mm_extract_epi32(side, 3));
  const __m256d a01 =
      _mm256_unpacklo_pd(_mm256_load_pd(r0), _mm256_load_pd(r1));
  const __m256d b01 =
      _mm256_unpackhi_pd(_mm256_load_pd(r0), _mm256_load_pd(r1));
  const __m256d a23 =
      _mm256_unpacklo_pd(_mm256_load_pd(r2), _mm256_load_pd(r3));
  const __m256d b23 =
      _mm256_unpackhi_pd(_mm256_load_pd(r2), _mm256_load_pd(r3));
  const __m256d step = _mm256_permute2f128_pd(a01, a23, 0x20);
  const __m256d slack = _mm256_permute2f128_pd(a01, a23, 0x31);
  const __m256d inv = _mm256_permute2f128_pd(b01, b23, 0x20);
  const __m256d inner = _mm256_permute2f128_pd(b01, b23, 0x31);
  const __m256d limits02 = _mm256_insertf128_pd(
      _mm256_castpd128_pd256(_mm_load_pd(r0 + 4)), _mm_load_pd(r2 + 4), 1);
  const __m256d limits13 = _mm256_insertf128_pd(
      _mm256_castpd128_pd256(_mm_load_pd(r1 + 4)), _mm_load_pd(r3 + 4), 1);
  const __m256d hi = _mm256_unpacklo_pd(limits02, limits13);
  const __m256d lo = _mm256_unpackhi_pd(limits02, limits13);
  const __m256d ok = _mm256_cmp_pd(step, zero, _CMP_GT_OQ);
  __m256d v = _mm256_blendv_pd(_mm256_set1_pd(__builtin_inf()),
                               _mm256_div_pd(err, step), ok);
  v = _mm256_blendv_pd(v, zero, _mm256_cmp_pd(err, zero, _CMP_EQ_OQ));
  _mm256_storeu_pd(err_steps + i, v);
  const __m256i idx = _mm256_add_epi64(_mm256_set1_epi64x(first + i),
                                       _mm256_setr_epi64x(0, 1, 2, 3));
  error_pass_internal::AddMomentsAndMaxima256(err, xs, xq, v, idx, st);
  interior = _mm256_max_pd(inner, interior);
  // The bound, as ExcessOf spells it (no extra: For takes no clipping ends).
  const __m256d dist =
      _mm256_andnot_pd(sign, _mm256_sub_pd(xq, _mm256_set1_pd(c.origin)));
  const __m256d allowed = _mm256_add_pd(
      _mm256_add_pd(
          _mm256_set1_pd(c.bound),
          _mm256_mul_pd(
              _mm256_add_pd(slack,
                            _mm256_mul_pd(_mm256_set1_pd(c.slack_rel), dist)),
              inv)),
      zero);
  const __m256d excess = _mm256_sub_pd(v, allowed);
  const __m256d clip = _mm256_or_pd(_mm256_cmp_pd(xs, hi, _CMP_GT_OQ),
                                    _mm256_cmp_pd(xs, lo, _CMP_LT_OQ));
  const __m256d beyond = _mm256_cmp_pd(excess, zero, _CMP_GT_OQ);
  error_pass_internal::AddVerdicts256(xs, xq, excess, clip, beyond, st);
}

bool HaveAvx512() {
  static const bool have =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
  return have;
}

}  // namespace

namespace error_pass_internal {

__attribute__((target("avx2"))) void AccumulateFloatErrorsAvx2(
    const float* values, const float* x, int64_t m, int64_t first,
    const FloatRuns& t, double* err_steps, ErrorSums* s, double* bound_steps) {
  Lanes256 st = StartLanes256(*s);
  __m256d interior = _mm256_set1_pd(*bound_steps);
  const FloatRuns::Columns& c = t.columns();
  const int64_t body = m - m % 4;
  int64_t i = 0;
  for (; i < body; i += 4) {
    FloatStep256(values, x, i, first, c, err_steps, st, interior);
  }
  Partials unused;
  double most = *bound_steps;
  for (; i < m; ++i) {
    const uint32_t key = FloatRuns::KeyOf(values[i]);
    AddElement(values, t.run(key), t.limits(key), x, i, first, -1, &unused,
               err_steps, s);
    most = std::max(most, t.interior(key));
  }
  FoldLanes256(st, s);
  // Interior bounds are never NaN nor below zero: their maximum does not
  // depend on the order it is taken in.
  alignas(32) double lane[4];
  _mm256_store_pd(lane, interior);
  for (double v : lane) most = std::max(most, v);
  *bound_steps = most;
}

}  // namespace error_pass_internal
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

void AccumulateFloatErrors(const float* values, const float* x, int64_t m,
                           int64_t first, const FloatRuns& t, double* err_steps,
                           ErrorSums* sums, double* bound_steps) {
#if defined(__x86_64__)
  if (HaveAvx512()) {
    AccumulateFloatErrorsAvx512(values, x, m, first, t, err_steps, sums,
                                bound_steps);
    return;
  }
  if (error_pass_internal::HaveAvx2()) {
    error_pass_internal::AccumulateFloatErrorsAvx2(
        values, x, m, first, t, err_steps, sums, bound_steps);
    return;
  }
#endif
  AccumulateFloatErrorsScalar(values, x, m, first, t, err_steps, sums,
                              bound_steps);
}

}  // namespace tensormorph
