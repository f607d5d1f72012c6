#include "core/quant/mlx_encoding.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "core/quant/block_util.h"
#include "core/quant/codec.h"
#include "core/quant/float_formats.h"
#include "core/quant/mlx_kernels.h"
#include "core/quant/mlx_packed_kernels.h"
#include "core/util/checked_math.h"
#include "core/util/status_macros.h"

namespace tensormorph {

namespace {

using Mode = MlxParams::Mode;

float LoadFloat(const StoredTensor* t, int64_t i) {
  const uint8_t* p = t->data.data();
  switch (t->dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p + i * 4, 4);
      return f;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      return F16ToF32Fast(h);
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      return BF16ToF32(h);
    }
    default:
      return p[i];  // U8 / F8 codes, read as their byte
  }
}

class MlxEncoding final : public Encoding {
 public:
  explicit MlxEncoding(MlxParams p)
      : p_(std::move(p)),
        groups_(p_.cols / p_.group_size),
        row_bytes_(p_.cols * p_.bits / 8),
        dtype_(p_.mode == Mode::kAffine ? p_.scales->dtype : DType::kBF16),
        float_mode_(p_.mode == Mode::kNvfp4   ? MlxFloatMode::kNvfp4
                    : p_.mode == Mode::kMxfp8 ? MlxFloatMode::kMxfp8
                                              : MlxFloatMode::kMxfp4) {
    if (p_.mode == Mode::kAffine) return;
    for (int c = 0; c < (1 << p_.bits); ++c) {
      table_[c] =
          p_.bits == 8 ? F8E4M3ToF32(static_cast<uint8_t>(c)) : kE2M1Values[c];
      if (!std::isnan(table_[c])) levels_.push_back(table_[c]);
    }
    // Per code, the gaps to the neighbouring levels, for DecodeRuns.
    for (int c = 0; c < (1 << p_.bits); ++c) {
      if (std::isnan(table_[c])) {
        gaps_.push_back({NAN, NAN});
        continue;
      }
      ScalarInfo g;
      FillCodebookSteps(1.0, levels_.data(), static_cast<int>(levels_.size()),
                        table_[c], &g);
      gaps_.push_back({g.step_below, g.step_above});
      lo_level_ = std::min(lo_level_, static_cast<double>(table_[c]));
      hi_level_ = std::max(hi_level_, static_cast<double>(table_[c]));
    }
  }

  const EncodingInfo& info() const override { return p_.info; }
  std::vector<const StoredTensor*> parts() const override { return p_.parts; }

  // Row segments: from a group start, straight from the stored bytes where
  // the CPU has the packed kernels' paths (DecodePacked); otherwise the
  // codes unpacked at once (8-bit ones read in place), the groups' scales
  // and biases fetched at once, then one kernel call. Every kernel's scalar
  // reference is Inspect's formula, so the two agree bit for bit.
  absl::Status Decode(int64_t first, int64_t count, float* out) const override {
    thread_local std::vector<uint8_t> codes;
    thread_local std::vector<float> scales, biases;
    while (count > 0) {
      const int64_t r = first / p_.cols, c0 = first % p_.cols;
      const int64_t n = std::min(count, p_.cols - c0);
      if (DecodePacked(r, c0, n, out)) {
        out += n;
        first += n;
        count -= n;
        continue;
      }
      const uint8_t* q = p_.weight->data.data() + r * row_bytes_ + c0;
      if (p_.bits != 8) {
        codes.resize(static_cast<size_t>(n));
        Unpack(r, c0, n, codes.data());
        q = codes.data();
      }
      const int64_t g0 = c0 / p_.group_size;
      const int64_t ng = (c0 + n - 1) / p_.group_size - g0 + 1;
      scales.resize(static_cast<size_t>(ng));
      biases.resize(static_cast<size_t>(ng));
      if (p_.mode == Mode::kAffine) {
        // F16 / BF16 / F32, validated at open: decoded a run at a time.
        (void)DecodeElements(p_.scales->dtype, p_.scales->data,
                             r * groups_ + g0, ng, scales.data());
        (void)DecodeElements(p_.biases->dtype, p_.biases->data,
                             r * groups_ + g0, ng, biases.data());
      } else {
        for (int64_t g = 0; g < ng; ++g) scales[g] = ScaleOf(r, g0 + g);
      }
      const Runs runs{.run = p_.group_size, .skip = c0 % p_.group_size};
      if (p_.mode == Mode::kAffine) {
        MlxAffineDecode(q, n, runs, scales.data(), biases.data(), dtype_,
                        p_.bits, out);
      } else {
        MlxFloatDecode(q, n, runs, table_, p_.bits, scales.data(), out);
      }
      out += n;
      first += n;
      count -= n;
    }
    return absl::OkStatus();
  }

  // A row segment that starts at a group straight from the stored bytes
  // (mlx_packed_kernels.h), where the CPU has its vector paths; false,
  // having written nothing, otherwise.
  bool DecodePacked(int64_t r, int64_t c0, int64_t n, float* out) const {
    if (c0 % p_.group_size != 0 || p_.group_size % 16 != 0) return false;
    const uint8_t* codes =
        p_.weight->data.data() + r * row_bytes_ + c0 * p_.bits / 8;
    const int64_t g0 = r * groups_ + c0 / p_.group_size;
    if (p_.mode != Mode::kAffine) {
      return MlxFloatDecodePacked(float_mode_, codes,
                                  p_.scales->data.data() + g0, n, out);
    }
    thread_local std::vector<float> scales, biases;
    const int64_t ng = (n + p_.group_size - 1) / p_.group_size;
    scales.resize(static_cast<size_t>(ng));
    biases.resize(static_cast<size_t>(ng));
    (void)DecodeElements(p_.scales->dtype, p_.scales->data, g0, ng,
                         scales.data());
    (void)DecodeElements(p_.biases->dtype, p_.biases->data, g0, ng,
                         biases.data());
    return MlxAffineDecodePacked(codes, p_.bits, p_.group_size, scales.data(),
                                 biases.data(), dtype_, n, out);
  }

  absl::Status RawCodes(int64_t first, int64_t count,
                        uint8_t* out) const override {
    while (count > 0) {
      const int64_t r = first / p_.cols, c0 = first % p_.cols;
      const int64_t n = std::min(count, p_.cols - c0);
      Unpack(r, c0, n, out);
      out += n;
      first += n;
      count -= n;
    }
    return absl::OkStatus();
  }

  absl::Status GroupIds(absl::Span<const int64_t> indices,
                        int64_t* out) const override {
    for (size_t i = 0; i < indices.size(); ++i) {
      const int64_t r = indices[i] / p_.cols, c = indices[i] % p_.cols;
      out[i] = r * groups_ + c / p_.group_size;
    }
    return absl::OkStatus();
  }

  // Affine: one run per group segment (uniform levels, a bias as offset);
  // the float modes a run per element (CodebookRuns: a codebook's gaps
  // differ per code).
  absl::Status DecodeRuns(int64_t first, int64_t count, float* values,
                          std::vector<QuantRun>* runs) const override {
    TM_RETURN_IF_ERROR(Decode(first, count, values));
    runs->clear();
    if (p_.mode != Mode::kAffine) return CodebookRuns(first, count, runs);
    for (int64_t i = 0; i < count;) {
      const int64_t flat = first + i;
      const int64_t r = flat / p_.cols, c = flat % p_.cols;
      const int64_t g = c / p_.group_size;
      const int64_t len = RunLength(c, count - i);
      runs->push_back(GroupRun(len, r, g, ScaleOf(r, g), BiasOf(r, g)));
      i += len;
    }
    return absl::OkStatus();
  }

  // Codes of 4 bits or fewer (affine int2 to int4, mxfp4, nvfp4): the codes
  // as RawCodes unpacks them, a run per group segment of a row, and every
  // run's 16 levels decoded at once by Decode's kernels from codes 0..15 a
  // run, taken as 4-bit codes (a code's value does not depend on the
  // width its kernel is told).
  absl::Status CodeLevelRuns(int64_t first, int64_t count,
                             LevelCodes* out) const override {
    if (p_.bits > 4) return Encoding::CodeLevelRuns(first, count, out);
    out->codes.resize(static_cast<size_t>(count));
    TM_RETURN_IF_ERROR(RawCodes(first, count, out->codes.data()));
    out->runs.clear();
    thread_local std::vector<float> scales, biases;
    scales.clear();
    biases.clear();
    for (int64_t i = 0; i < count;) {
      const int64_t flat = first + i;
      const int64_t r = flat / p_.cols, c = flat % p_.cols;
      const int64_t g = c / p_.group_size;
      const int64_t len = RunLength(c, count - i);
      const float s = ScaleOf(r, g), b = BiasOf(r, g);
      out->runs.push_back(GroupRun(len, r, g, s, b));
      scales.push_back(s);
      biases.push_back(b);
      i += len;
    }
    const int64_t n = 16 * static_cast<int64_t>(out->runs.size());
    out->level.resize(static_cast<size_t>(n));
    const uint8_t* codes = SixteenCodesRepeated(n);
    const Runs runs{.run = 16, .skip = 0};
    if (p_.mode == Mode::kAffine) {
      MlxAffineDecode(codes, n, runs, scales.data(), biases.data(), dtype_, 4,
                      out->level.data());
    } else {
      MlxFloatDecode(codes, n, runs, table_, 4, scales.data(),
                     out->level.data());
    }
    return absl::OkStatus();
  }

  // The float modes: a run per element, the gaps around its level times
  // the group's scale.
  absl::Status CodebookRuns(int64_t first, int64_t count,
                            std::vector<QuantRun>* runs) const {
    thread_local std::vector<uint8_t> codes;
    codes.resize(static_cast<size_t>(count));
    TM_RETURN_IF_ERROR(RawCodes(first, count, codes.data()));
    for (int64_t i = 0; i < count; ++i) {
      const int64_t r = (first + i) / p_.cols, c = (first + i) % p_.cols;
      const int64_t g = c / p_.group_size;
      const float scale = ScaleOf(r, g);
      const double step = std::fabs(static_cast<double>(scale));
      const auto& gap = gaps_[codes[i]];
      QuantRun run = GroupRun(1, r, g, scale, 0);
      run.step_below = step * (scale < 0 ? gap.second : gap.first);
      run.step_above = step * (scale < 0 ? gap.first : gap.second);
      runs->push_back(run);
    }
    return absl::OkStatus();
  }

  absl::Status Inspect(int64_t flat, ScalarInfo* s) const override {
    const int64_t r = flat / p_.cols, c = flat % p_.cols;
    const int64_t g = c / p_.group_size;
    const uint32_t code = CodeAt(r, c);
    const float scale = ScaleOf(r, g), bias = BiasOf(r, g);
    *s = ScalarInfo();
    s->code_bits_value = code;
    s->code = code;
    s->code_width = p_.bits;
    s->code_is_float = p_.mode != Mode::kAffine;
    s->block = s->group = r * groups_ + g;
    s->scale = scale;
    s->value = Value(code, scale, bias);
    if (p_.mode == Mode::kAffine) {
      s->level = code;
      s->offset = bias;
      const uint32_t top = (1u << p_.bits) - 1;
      FillUniformSteps(scale, 0, top, bias, s);
      // The ends as they decode (in the scales' dtype, as AffineRuns has
      // them): an element on the first or last level is on the range's end.
      const double lo = Value(0, scale, bias), hi = Value(top, scale, bias);
      s->range_min = std::min(lo, hi);
      s->range_max = std::max(lo, hi);
      s->AddParam("scale", scale);
      s->AddParam("bias", bias);
    } else {
      s->level = table_[code];
      FillCodebookSteps(scale, levels_.data(), static_cast<int>(levels_.size()),
                        s->level, s);
      s->AddParam(p_.mode == Mode::kNvfp4 ? "scale_e4m3" : "scale_e8m0",
                  LoadFloat(p_.scales, r * groups_ + g));
      s->AddParam("scale", scale);
    }
    return absl::OkStatus();
  }

 private:
  // The reference's value of `code` in a group of scale `s`, bias `b`
  // (see the header for the op order).
  float Value(uint32_t code, float s, float b) const {
    return p_.mode == Mode::kAffine ? MlxAffineValue(code, s, b, dtype_)
                                    : MlxFloatValue(table_[code], s);
  }

  // How many of the next `left` elements of a row, from column c, share
  // c's group.
  int64_t RunLength(int64_t c, int64_t left) const {
    return std::min(
        {left, (c / p_.group_size + 1) * p_.group_size - c, p_.cols - c});
  }

  // DecodeRuns' run of `len` elements of row r's group g, of scale `s` and
  // bias `b`: the range its codes span as they decode; affine, the step.
  // (A float mode's steps depend on the code: CodebookRuns has them.)
  QuantRun GroupRun(int64_t len, int64_t r, int64_t g, float s, float b) const {
    double lo = 0, hi = 0;
    if (p_.mode == Mode::kAffine) {
      lo = Value(0, s, b);
      hi = Value((1u << p_.bits) - 1, s, b);
    } else {
      lo = static_cast<double>(s) * lo_level_;
      hi = static_cast<double>(s) * hi_level_;
    }
    return {len,          r * groups_ + g,  std::fabs(s),
            std::fabs(s), std::min(lo, hi), std::max(lo, hi)};
  }

  float ScaleOf(int64_t r, int64_t g) const {
    const int64_t i = r * groups_ + g;
    switch (p_.mode) {
      case Mode::kAffine:
        return LoadFloat(p_.scales, i);
      default:  // E4M3, or power(2, e - 127) in float32 (2^128: infinity)
        return MlxFloatScale(float_mode_, p_.scales->data[i]);
    }
  }
  float BiasOf(int64_t r, int64_t g) const {
    return p_.biases == nullptr ? 0.0f : LoadFloat(p_.biases, r * groups_ + g);
  }

  // Code (r, c): bits [c * bits, (c + 1) * bits) of row r's stream.
  uint32_t CodeAt(int64_t r, int64_t c) const {
    const uint8_t* row = p_.weight->data.data() + r * row_bytes_;
    const int64_t bit = c * p_.bits;
    uint32_t v = 0;
    const int64_t byte = bit / 8, end = (bit + p_.bits + 7) / 8;
    for (int64_t k = byte; k < end; ++k) {
      v |= static_cast<uint32_t>(row[k]) << (8 * (k - byte));
    }
    return (v >> (bit % 8)) & ((1u << p_.bits) - 1);
  }

  // Codes (r, c0 .. c0 + n) into out[0, n): eight codes of `bits` bits are
  // `bits` whole bytes (UnpackEights); a segment's ends that are not whole
  // eights code by code.
  void Unpack(int64_t r, int64_t c0, int64_t n, uint8_t* out) const {
    const uint8_t* row = p_.weight->data.data() + r * row_bytes_;
    if (p_.bits == 8) {
      std::memcpy(out, row + c0, static_cast<size_t>(n));
      return;
    }
    int64_t i = 0;
    for (; i < n && (c0 + i) % 8 != 0; ++i) out[i] = CodeAt(r, c0 + i);
    const int64_t eights = (n - i) / 8;
    const int64_t offset = (c0 + i) / 8 * p_.bits;
    const uint8_t* src = row + offset;
    // Groups that can load 8 bytes without reading past the row: the last
    // row's end may be the file's.
    const int64_t avail = row_bytes_ - offset;
    switch (p_.bits) {
      case 2:
        UnpackEights<2>(src, eights, avail, out + i);
        break;
      case 3:
        UnpackEights<3>(src, eights, avail, out + i);
        break;
      case 4:
        UnpackNibbles(src, eights * 4, out + i);
        break;
      case 5:
        UnpackEights<5>(src, eights, avail, out + i);
        break;
      case 6:
        UnpackEights<6>(src, eights, avail, out + i);
        break;
    }
    for (i += eights * 8; i < n; ++i) out[i] = CodeAt(r, c0 + i);
  }

  // `eights` groups of eight BITS-bit codes from BITS bytes each, into a
  // byte each (BMI2's pdep where the CPU has it), a 64-bit load at a time
  // where `avail` bytes from `src` leave room, byte-exact after that.
  template <int BITS>
  static void UnpackEights(const uint8_t* src, int64_t eights, int64_t avail,
                           uint8_t* out) {
    const int64_t wide =
        avail < 8 ? 0 : std::min(eights, (avail - 8) / BITS + 1);
#if defined(__x86_64__)
    static const bool bmi2 = __builtin_cpu_supports("bmi2");
    if (bmi2) return UnpackEightsBmi2<BITS>(src, eights, wide, out);
#endif
    constexpr uint64_t kMask = (uint64_t{1} << BITS) - 1;
    for (int64_t e = 0; e < eights; ++e, src += BITS, out += 8) {
      const uint64_t v = Load(src, e >= wide, BITS);
      for (int k = 0; k < 8; ++k) {
        out[k] = static_cast<uint8_t>((v >> (k * BITS)) & kMask);
      }
    }
  }

  static uint64_t Load(const uint8_t* src, bool exact, int bytes) {
    uint64_t v = 0;
    std::memcpy(&v, src, exact ? static_cast<size_t>(bytes) : 8);
    return v;
  }

#if defined(__x86_64__)
  template <int BITS>
  __attribute__((target("bmi2"))) static void UnpackEightsBmi2(
      const uint8_t* src, int64_t eights, int64_t wide, uint8_t* out) {
    constexpr uint64_t kDeposit = 0x0101010101010101ull * ((1u << BITS) - 1);
    for (int64_t e = 0; e < eights; ++e, src += BITS, out += 8) {
      uint64_t v;
      if (e < wide) {
        std::memcpy(&v, src, 8);
      } else {
        v = Load(src, true, BITS);
      }
      const uint64_t d = _pdep_u64(v, kDeposit);
      std::memcpy(out, &d, 8);
    }
  }
#endif

  // Two codes a byte, the first in the low nibble, 16 bytes at a time.
  static void UnpackNibbles(const uint8_t* src, int64_t bytes, uint8_t* out) {
    int64_t i = 0;
#if defined(__SSE2__)
    const __m128i mask = _mm_set1_epi8(0x0F);
    for (; i + 16 <= bytes; i += 16) {
      const __m128i x =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m128i lo = _mm_and_si128(x, mask);
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), mask);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i),
                       _mm_unpacklo_epi8(lo, hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i + 16),
                       _mm_unpackhi_epi8(lo, hi));
    }
#endif
    for (; i < bytes; ++i) {
      out[2 * i] = src[i] & 0xF;
      out[2 * i + 1] = src[i] >> 4;
    }
  }

  MlxParams p_;
  int64_t groups_;     // groups per row
  int64_t row_bytes_;  // bytes of a row's codes
  DType dtype_;        // of the arithmetic: the scales' (affine), else BF16
  MlxFloatMode float_mode_;  // the float modes' (unused for affine)
  float table_[256] = {};
  std::vector<double> levels_;  // the non-NaN levels of the float modes
  std::vector<std::pair<double, double>> gaps_;  // per code: below, above
  double lo_level_ = INFINITY, hi_level_ = -INFINITY;
};

absl::Status Invalid(const StoredTensor* t, absl::string_view rule) {
  return absl::DataLossError(absl::StrCat(
      "'", t->name, "' (", DescribeStored(t->dtype, t->shape), "): ", rule));
}

absl::Status Validate(const MlxParams& p) {
  if (p.weight == nullptr || p.scales == nullptr) {
    return absl::DataLossError("MLX encoding without weight or scales");
  }
  const bool affine = p.mode == Mode::kAffine;
  const bool ok_bits = affine ? (p.bits >= 2 && p.bits <= 8 && p.bits != 7)
                              : p.bits == (p.mode == Mode::kMxfp8 ? 8 : 4);
  const bool ok_group =
      affine ? p.group_size > 0
             : p.group_size == (p.mode == Mode::kNvfp4 ? 16 : 32);
  if (!ok_bits || !ok_group) {
    return Invalid(
        p.weight, absl::StrCat(p.bits, "-bit codes in groups of ", p.group_size,
                               " are not an MLX quantization"));
  }
  const auto n = CheckedProduct(p.shape);
  const auto rc = CheckedMul<int64_t>(p.rows, p.cols);
  if (p.shape.size() < 2 || !n || !rc || *n != *rc || p.cols <= 0 ||
      p.cols % p.group_size != 0 || (p.cols % 32) * p.bits % 32 != 0) {
    return Invalid(p.weight,
                   absl::StrCat("a row of ", p.cols, " elements is not whole ",
                                "groups of ", p.group_size, " and words of ",
                                32 / std::gcd(32, p.bits), " codes"));
  }
  const auto row_bits = CheckedMul<int64_t>(p.cols, p.bits);
  const auto words =
      row_bits ? CheckedMul<int64_t>(p.rows, *row_bits / 32) : std::nullopt;
  if (p.weight->dtype != DType::kU32 || !words ||
      p.weight->num_elements != *words ||
      static_cast<int64_t>(p.weight->data.size()) != *words * 4) {
    return Invalid(p.weight, absl::StrCat("must be U32 holding ", p.rows, "x",
                                          p.cols, " ", p.bits, "-bit codes"));
  }
  const int64_t groups = p.rows * (p.cols / p.group_size);
  for (const StoredTensor* t : {p.scales, p.biases}) {
    if (t == nullptr) continue;
    const DTypeInfo& d = GetDTypeInfo(t->dtype);
    const bool ok_dtype =
        affine ? (t->dtype == DType::kF16 || t->dtype == DType::kBF16 ||
                  t->dtype == DType::kF32) &&
                     t->dtype == p.scales->dtype
               : (t->dtype == DType::kU8 ||
                  t->dtype == (p.mode == Mode::kNvfp4 ? DType::kF8E4M3
                                                      : DType::kF8E8M0));
    if (!ok_dtype || t->num_elements != groups ||
        static_cast<int64_t>(t->data.size()) != groups * d.block_bytes) {
      return Invalid(t, absl::StrCat("must hold ", groups, " group ",
                                     t == p.biases ? "biases" : "scales",
                                     affine ? " in the scales' float dtype"
                                            : " as 8-bit codes"));
    }
  }
  if (affine != (p.biases != nullptr)) {
    return Invalid(p.weight, affine ? "affine quantization needs biases"
                                    : "float modes have no biases");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Encoding>> MakeMlxEncoding(
    MlxParams params) {
  TM_RETURN_IF_ERROR(Validate(params));
  return std::shared_ptr<const Encoding>(
      std::make_shared<MlxEncoding>(std::move(params)));
}

}  // namespace tensormorph
