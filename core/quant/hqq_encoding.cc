#include "core/quant/hqq_encoding.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "core/format/stored_tensor.h"
#include "core/quant/affine_kernels.h"
#include "core/quant/block_util.h"
#include "core/quant/codec.h"
#include "core/quant/float_formats.h"
#include "core/util/checked_math.h"

namespace tensormorph {
namespace {

// Slices per packed row and where slice j sits: u8 packings put slice 0 in
// the top bits; 3-bit packs ten slices below bit 30 of an int32.
int Slices(int bits) { return bits == 3 ? 10 : bits <= 4 ? 8 / bits : 1; }
int ShiftOf(int bits, int64_t j) {
  if (bits == 3) return static_cast<int>(27 - 3 * j);
  if (bits > 4) return 0;
  return static_cast<int>(8 - bits * (j + 1));
}

class HqqEncoding final : public Encoding {
 public:
  explicit HqqEncoding(HqqParams p) : p_(std::move(p)) {
    numel_ = 1;
    for (int64_t d : p_.shape) numel_ *= d;
    const int64_t n = numel_ / p_.group_size;
    rows_ = p_.axis == 1 ? n : p_.group_size;
    cols_ = p_.axis == 1 ? p_.group_size : n;
    // Rows per slice: the packed rows.
    step_ = HqqPackedRows(p_.bits, rows_);
    mask_ = (1u << p_.bits) - 1;
  }

  const EncodingInfo& info() const override { return p_.info; }
  std::vector<const StoredTensor*> parts() const override { return p_.parts; }

  // Axis 1 goes a group at a time: a group is one row of the grouped
  // matrix, so its packed row and shift are found once, its values (a
  // function of the code alone) computed once per code by HqqGroupValues,
  // and its codes looked up by the codebook kernel. Axis 0 goes element by
  // element (Value, as Inspect).
  absl::Status Decode(int64_t first, int64_t count, float* out) const override {
    if (p_.axis != 1) return DecodeEach(first, count, out);
    // Entries past 2^bits stay 0: the 16-entry kernel loads them, never
    // selects them.
    float values[256] = {};
    thread_local std::vector<uint8_t> codes;
    codes.resize(static_cast<size_t>(p_.group_size));
    const float one = 1.0f;  // x * 1 is x: the lookup's multiply is exact
    const uint8_t* data = p_.w_q->data.data();
    const int64_t end = first + count;
    // Group g sits in packed row pr of slice j; both advance with g, so no
    // division is needed past the first group.
    int64_t g = first / p_.group_size, k0 = first % p_.group_size;
    int64_t j = g / step_, pr = g % step_;
    for (; first < end; ++g, k0 = 0) {
      if (pr == step_) pr = 0, ++j;
      const int64_t n = std::min(end - first, p_.group_size - k0);
      double s = 0, z = 0;
      Params(g, &s, &z);
      HqqGroupValues(s, z, p_.bits, p_.compute, values);
      const int shift = ShiftOf(p_.bits, j);
      // Local pointers: through the thread_local vector the compiler would
      // reload its data pointer for every byte and not vectorise.
      uint8_t* const dst = codes.data();
      if (p_.bits == 3) {
        for (int64_t k = 0; k < n; ++k) {
          uint32_t w;
          std::memcpy(&w, data + (pr * cols_ + k0 + k) * 4, 4);
          dst[k] = static_cast<uint8_t>((w >> shift) & mask_);
        }
      } else {
        const uint8_t* const row = data + pr * cols_ + k0;
        const uint8_t m = static_cast<uint8_t>(mask_);
        for (int64_t k = 0; k < n; ++k) {
          dst[k] = static_cast<uint8_t>(row[k] >> shift) & m;
        }
      }
      DecodeTableRuns(dst, n, Runs{.run = n, .skip = 0}, values,
                      p_.bits <= 4 ? 16 : 256, Codebook::kTable, &one, out);
      out += n;
      first += n;
      ++pr;
    }
    return absl::OkStatus();
  }

  absl::Status GroupIds(absl::Span<const int64_t> indices,
                        int64_t* out) const override {
    for (size_t i = 0; i < indices.size(); ++i) out[i] = GroupOf(indices[i]);
    return absl::OkStatus();
  }

  absl::Status Inspect(int64_t flat, ScalarInfo* s) const override {
    const int64_t g = GroupOf(flat);
    double scale = 0, zero = 0;
    Params(g, &scale, &zero);
    const uint32_t code = Code(flat);
    *s = ScalarInfo();
    s->code_bits_value = code;
    s->code = code;
    s->code_width = p_.bits;
    s->block = s->group = g;
    s->scale = scale;
    s->zero_point = zero;
    s->level = RoundToDType(code - zero, p_.compute);
    s->value = Value(code, scale, zero);
    FillUniformSteps(scale, -zero, static_cast<double>(mask_) - zero, 0, s);
    s->AddParam("scale", scale);
    s->AddParam("zero", zero);
    return absl::OkStatus();
  }

 private:
  absl::Status DecodeEach(int64_t first, int64_t count, float* out) const {
    int64_t cached = -1;
    double s = 0, z = 0;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t g = GroupOf(first + i);
      if (g != cached) {
        cached = g;
        Params(g, &s, &z);
      }
      out[i] = Value(Code(first + i), s, z);
    }
    return absl::OkStatus();
  }

  int64_t GroupOf(int64_t flat) const {
    return p_.axis == 1 ? flat / p_.group_size : flat % cols_;
  }

  // The code of element `flat`: row r, column c of the grouped matrix.
  uint32_t Code(int64_t flat) const {
    const int64_t r = flat / cols_, c = flat % cols_;
    const int64_t j = r / step_, pr = r % step_;
    const uint8_t* data = p_.w_q->data.data();
    if (p_.bits == 3) {
      uint32_t w;
      std::memcpy(&w, data + (pr * cols_ + c) * 4, 4);
      return (w >> ShiftOf(3, j)) & mask_;
    }
    return (static_cast<uint32_t>(data[pr * cols_ + c]) >>
            ShiftOf(p_.bits, j)) &
           mask_;
  }

  // Group g's scale and zero, in the compute dtype.
  void Params(int64_t g, double* s, double* z) const {
    *s = RoundToDType(Load(p_.scale, g), p_.compute);
    *z = RoundToDType(Load(p_.zero, g), p_.compute);
  }

  // Element g of a scale or zero tensor (validated: plain numbers, one per
  // group); the usual float dtypes read directly.
  static double Load(const StoredTensor* t, int64_t g) {
    const uint8_t* p = t->data.data();
    uint16_t h;
    switch (t->dtype) {
      case DType::kF16:
        std::memcpy(&h, p + 2 * g, 2);
        return F16ToF32Fast(h);
      case DType::kBF16:
        std::memcpy(&h, p + 2 * g, 2);
        return BF16ToF32(h);
      case DType::kF32: {
        float f;
        std::memcpy(&f, p + 4 * g, 4);
        return f;
      }
      default: {
        float v = 0;
        (void)DecodeElements(t->dtype, t->data, g, 1, &v);
        return v;
      }
    }
  }

  float Value(uint32_t code, double s, double z) const {
    const double level = RoundToDType(code - z, p_.compute);
    return static_cast<float>(RoundToDType(level * s, p_.compute));
  }

  HqqParams p_;
  int64_t numel_ = 0, rows_ = 0, cols_ = 0, step_ = 1;
  uint32_t mask_ = 0;
};

absl::Status Invalid(const StoredTensor* t, absl::string_view rule) {
  return absl::DataLossError(
      absl::StrCat("HQQ: '", t == nullptr ? "?" : t->name, "' ", rule));
}

}  // namespace

int64_t HqqPackedRows(int bits, int64_t rows) {
  if (bits == 3) return rows / 10 + (rows % 10 != 0 ? 1 : 0);
  return rows / Slices(bits);
}

double RoundToDType(double x, DType dtype) {
  int precision = 24, min_exp = -126;
  double max = FLT_MAX;
  if (dtype == DType::kF16) {
    precision = 11, min_exp = -14, max = 65504.0;
  } else if (dtype == DType::kBF16) {
    precision = 8, min_exp = -126, max = 0x1.fep127;
  }
  uint64_t bits;
  std::memcpy(&bits, &x, 8);
  const int biased = static_cast<int>((bits >> 52) & 0x7FF);
  if (x == 0 || biased == 0x7FF) return x;
  // |x| in [2^e, 2^(e+1)) (a subnormal double is far below every target's
  // least value: its e only needs to be below min_exp).
  const int e = biased == 0 ? -1075 : biased - 1023;
  const int q = std::max(e, min_exp) - (precision - 1);  // the target's ulp
  // Adding 1.5 * 2^(q+52), whose ulp is 2^q, rounds x to a multiple of 2^q,
  // to nearest even, in one correctly rounded double addition (|x| is far
  // below 2^(q+51)); subtracting it back is exact.
  const uint64_t c_bits =
      (static_cast<uint64_t>(q + 52 + 1023) << 52) | (uint64_t{1} << 51);
  double c;
  std::memcpy(&c, &c_bits, 8);
  const double y = (x + c) - c;
  if (std::fabs(y) > max) return std::copysign(INFINITY, x);
  return std::copysign(y, x);  // a negative x rounded to zero is -0
}

void HqqGroupValuesScalar(double s, double z, int bits, DType dtype,
                          float* out) {
  for (uint32_t c = 0; c < (1u << bits); ++c) {
    const double level = RoundToDType(c - z, dtype);
    out[c] = static_cast<float>(RoundToDType(level * s, dtype));
  }
}

#if defined(__x86_64__)
namespace {

// RoundToDType on four doubles: the same addition of 1.5 * 2^(ulp + 52),
// its exponent taken per lane; infinities and NaNs pass through.
__attribute__((target("avx2"))) inline __m256d RoundAvx2(__m256d x,
                                                         int precision,
                                                         int min_exp,
                                                         double max) {
  const __m256i bits = _mm256_castpd_si256(x);
  const __m256i biased =
      _mm256_and_si256(_mm256_srli_epi64(bits, 52), _mm256_set1_epi64x(0x7FF));
  const __m256i e = _mm256_sub_epi64(biased, _mm256_set1_epi64x(1023));
  const __m256i lo = _mm256_set1_epi64x(min_exp);
  const __m256i emax = _mm256_blendv_epi8(lo, e, _mm256_cmpgt_epi64(e, lo));
  const __m256i q = _mm256_sub_epi64(emax, _mm256_set1_epi64x(precision - 1));
  const __m256i c_bits = _mm256_or_si256(
      _mm256_slli_epi64(_mm256_add_epi64(q, _mm256_set1_epi64x(52 + 1023)), 52),
      _mm256_set1_epi64x(int64_t{1} << 51));
  const __m256d c = _mm256_castsi256_pd(c_bits);
  __m256d y = _mm256_sub_pd(_mm256_add_pd(x, c), c);
  const __m256d sign = _mm256_set1_pd(-0.0);
  const __m256d mag = _mm256_andnot_pd(sign, y);
  y = _mm256_blendv_pd(mag, _mm256_set1_pd(INFINITY),
                       _mm256_cmp_pd(mag, _mm256_set1_pd(max), _CMP_GT_OQ));
  y = _mm256_or_pd(y, _mm256_and_pd(sign, x));  // x's sign, as copysign
  const __m256i special = _mm256_cmpeq_epi64(biased, _mm256_set1_epi64x(0x7FF));
  return _mm256_blendv_pd(y, x, _mm256_castsi256_pd(special));
}

__attribute__((target("avx2"))) void HqqGroupValuesAvx2(double s, double z,
                                                        int bits, DType dtype,
                                                        float* out) {
  int precision = 24, min_exp = -126;
  double max = FLT_MAX;
  if (dtype == DType::kF16) {
    precision = 11, min_exp = -14, max = 65504.0;
  } else if (dtype == DType::kBF16) {
    precision = 8, min_exp = -126, max = 0x1.fep127;
  }
  const __m256d vs = _mm256_set1_pd(s), vz = _mm256_set1_pd(z);
  const __m256d four = _mm256_set1_pd(4.0);
  __m256d c = _mm256_set_pd(3.0, 2.0, 1.0, 0.0);
  for (uint32_t i = 0; i < (1u << bits); i += 4) {
    const __m256d level =
        RoundAvx2(_mm256_sub_pd(c, vz), precision, min_exp, max);
    const __m256d v =
        RoundAvx2(_mm256_mul_pd(level, vs), precision, min_exp, max);
    _mm_storeu_ps(out + i, _mm256_cvtpd_ps(v));  // exact: v is a target value
    c = _mm256_add_pd(c, four);
  }
}

// float16 arithmetic through the F16C conversions, eight codes at a time:
// c - z is exact in float32 when z is 0 or 2^-6 <= |z| < 2^15 (the bits of
// c, below 2^8, and of z's 11-bit significand then span at most 24), and a
// product of two float16 values always is; each conversion to float16
// rounds once, to nearest even, overflowing to infinity.
__attribute__((target("avx2,f16c"))) void HqqGroupValuesF16c(float s, float z,
                                                             int bits,
                                                             float* out) {
  const __m256 vs = _mm256_set1_ps(s), vz = _mm256_set1_ps(z);
  __m256 c = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 eight = _mm256_set1_ps(8.0f);
  for (uint32_t i = 0; i < (1u << bits); i += 8) {
    const __m256 level = _mm256_cvtph_ps(_mm256_cvtps_ph(
        _mm256_sub_ps(c, vz), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256 v = _mm256_cvtph_ps(
        _mm256_cvtps_ph(_mm256_mul_ps(level, vs),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm256_storeu_ps(out + i, v);
    c = _mm256_add_ps(c, eight);
  }
}

bool HaveF16c() {
  static const bool have = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return have;
}

}  // namespace
#endif

void HqqGroupValues(double s, double z, int bits, DType dtype, float* out) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  const double az = std::fabs(z);
  if (avx2 && HaveF16c() && dtype == DType::kF16 && bits >= 3 &&
      (z == 0 || (az >= 0x1p-6 && az < 0x1p15))) {
    return HqqGroupValuesF16c(static_cast<float>(s), static_cast<float>(z),
                              bits, out);
  }
  if (avx2 && bits >= 2) return HqqGroupValuesAvx2(s, z, bits, dtype, out);
#endif
  HqqGroupValuesScalar(s, z, bits, dtype, out);
}

absl::StatusOr<std::shared_ptr<const Encoding>> MakeHqqEncoding(HqqParams p) {
  const std::optional<int64_t> numel = CheckedProduct(p.shape);
  if (p.shape.empty() || !numel || *numel <= 0) {
    return Invalid(p.w_q, "has a shape with no elements");
  }
  if (p.bits < 1 || p.bits > 8) {
    return Invalid(p.w_q, absl::StrCat("has ", p.bits,
                                       "-bit codes; HQQ has "
                                       "1 to 8"));
  }
  if (p.group_size < 1 || *numel % p.group_size != 0) {
    return Invalid(p.w_q, absl::StrCat("has ", *numel,
                                       " elements, not a multiple of the "
                                       "group size ",
                                       p.group_size));
  }
  if (p.axis != 0 && p.axis != 1) {
    return Invalid(p.w_q, absl::StrCat("has axis ", p.axis, "; 0 or 1"));
  }
  if (p.compute != DType::kF16 && p.compute != DType::kBF16 &&
      p.compute != DType::kF32) {
    return Invalid(p.w_q, "has a compute dtype other than F16, BF16, F32");
  }
  const int64_t groups = *numel / p.group_size;
  const int64_t rows = p.axis == 1 ? groups : p.group_size;
  const int64_t cols = p.axis == 1 ? p.group_size : groups;
  if (p.bits != 3 && rows % Slices(p.bits) != 0) {
    return Invalid(
        p.w_q, absl::StrCat("packs ", rows, " rows of ", p.bits,
                            "-bit codes, not a multiple of ", Slices(p.bits)));
  }
  const std::vector<int64_t> want = {HqqPackedRows(p.bits, rows), cols};
  const DType want_dtype = p.bits == 3 ? DType::kI32 : DType::kU8;
  if (p.w_q == nullptr || p.w_q->dtype != want_dtype || p.w_q->shape != want ||
      p.w_q->data.size() !=
          static_cast<uint64_t>(want[0] * want[1]) * (p.bits == 3 ? 4u : 1u)) {
    return Invalid(
        p.w_q,
        absl::StrCat(
            "is ",
            p.w_q ? DescribeStored(p.w_q->dtype, p.w_q->shape) : "absent",
            " but ", p.bits, "-bit codes grouped by ", p.group_size,
            " along axis ", p.axis, " need ", DTypeName(want_dtype), "[",
            want[0], ",", want[1], "]"));
  }
  for (const StoredTensor* t : {p.scale, p.zero}) {
    const DTypeInfo& d = GetDTypeInfo(t->dtype);
    if (!d.decodable || d.block_elems != 1 || t->num_elements != groups ||
        t->data.size() != static_cast<uint64_t>(groups) * d.block_bytes) {
      return Invalid(t, absl::StrCat("is ", DescribeStored(t->dtype, t->shape),
                                     " but needs one float for each of ",
                                     groups, " groups"));
    }
  }
  return std::make_shared<HqqEncoding>(std::move(p));
}

}  // namespace tensormorph
