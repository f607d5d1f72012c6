#include "core/quant/hqq_encoding.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/format/stored_tensor.h"
#include "core/quant/affine_kernels.h"
#include "core/quant/block_util.h"
#include "core/quant/codec.h"
#include "core/quant/float_formats.h"
#include "core/quant/hqq_kernels.h"
#include "core/util/checked_math.h"
#include "core/util/status_macros.h"

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
    word_ = p_.bits == 3 ? 4 : 1;
  }

  const EncodingInfo& info() const override { return p_.info; }
  std::vector<const StoredTensor*> parts() const override { return p_.parts; }

  // Axis 1: a group is one row of the grouped matrix, so the groups of one
  // slice lie in consecutive packed rows: a run of them is one span of
  // words with one shift, decoded by the group kernel (a group's values
  // computed once, its codes looked up). Axis 0: a row of the grouped
  // matrix crosses one group per column, so a span of a row is decoded
  // element-wise with the columns' scales and zeros side by side. Either
  // way, at most kBatch scales and zeros are loaded at a time.
  absl::Status Decode(int64_t first, int64_t count, float* out) const override {
    float s[kBatch], z[kBatch];
    const int64_t g_size = p_.group_size;
    while (count > 0) {
      const int64_t r = first / cols_, c = first % cols_;
      const int64_t j = r / step_, pr = r % step_;
      HqqCodes codes{.data = p_.w_q->data.data() + (pr * cols_ + c) * word_,
                     .word_bytes = static_cast<int>(word_),
                     .shift = ShiftOf(p_.bits, j),
                     .bits = p_.bits};
      int64_t n = 0;
      if (p_.axis == 1) {
        // Groups r .. up to the slice's end, kBatch at most.
        const int64_t groups = std::min(kBatch, step_ - pr);
        n = std::min(count, groups * g_size - c);
        const int64_t used = (c + n + g_size - 1) / g_size;
        TM_RETURN_IF_ERROR(LoadParams(r, used, s, z));
        HqqDecodeGroups(codes, n, Runs{.run = g_size, .skip = c}, s, z,
                        p_.compute, out);
      } else {
        n = std::min(count, cols_ - c);
        HqqParamRow sr = StoredRow(p_.scale, c), zr = StoredRow(p_.zero, c);
        if (sr.data == nullptr || zr.data == nullptr || sr.dtype != zr.dtype) {
          n = std::min(n, kBatch);
          TM_RETURN_IF_ERROR(LoadParams(c, n, s, z));
          sr = {.data = reinterpret_cast<const uint8_t*>(s),
                .dtype = DType::kF32};
          zr = {.data = reinterpret_cast<const uint8_t*>(z),
                .dtype = DType::kF32};
        }
        HqqDecodeColumns(codes, n, sr, zr, p_.compute, out);
      }
      first += n;
      count -= n;
      out += n;
    }
    return absl::OkStatus();
  }

  absl::Status GroupIds(absl::Span<const int64_t> indices,
                        int64_t* out) const override {
    for (size_t i = 0; i < indices.size(); ++i) out[i] = GroupOf(indices[i]);
    return absl::OkStatus();
  }

  // Axis 1 with codes of 4 bits or fewer: a run per group (G consecutive
  // elements), its codes read as Decode reads them, its levels those
  // Decode's table path computes (HqqGroupValues, from the scales and zeros
  // as Decode loads them); the run's range as Inspect gives it.
  absl::Status CodeLevelRuns(int64_t first, int64_t count,
                             LevelCodes* out) const override {
    if (p_.axis != 1 || p_.bits > 4) {
      return Encoding::CodeLevelRuns(first, count, out);
    }
    out->codes.resize(static_cast<size_t>(count));
    out->runs.clear();
    out->level.clear();
    const int64_t g_size = p_.group_size;
    float s[kBatch], z[kBatch];
    for (int64_t at = first, end = first + count; at < end;) {
      const int64_t g0 = at / g_size;
      const int64_t groups = std::min(kBatch, (end - 1) / g_size - g0 + 1);
      TM_RETURN_IF_ERROR(LoadParams(g0, groups, s, z));
      for (int64_t k = 0; k < groups; ++k) {
        const int64_t g = g0 + k, c = at - g * g_size;
        const int64_t n = std::min(end - at, g_size - c);
        const int64_t j = g / step_, pr = g % step_;
        const HqqCodes codes{
            .data = p_.w_q->data.data() + (pr * cols_ + c) * word_,
            .word_bytes = static_cast<int>(word_),
            .shift = ShiftOf(p_.bits, j),
            .bits = p_.bits};
        uint8_t* dst = out->codes.data() + (at - first);
        for (int64_t i = 0; i < n; ++i) {
          dst[i] = static_cast<uint8_t>(HqqCodeAt(codes, i));
        }
        const size_t l = out->level.size();
        out->level.resize(l + 16);
        float* level = out->level.data() + l;
        HqqGroupValues(s[k], z[k], p_.bits, p_.compute, level);
        const double lo = level[0], hi = level[mask_];
        out->runs.push_back({n, g, 0, 0, std::min(lo, hi), std::max(lo, hi)});
        at += n;
      }
    }
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
    // The ends as they decode, in the compute dtype: an element on the first
    // or last level sits on the range's end (stats' end-level count, the
    // diff's clipping), not a rounding error inside or outside it.
    const double lo = Value(0, scale, zero), hi = Value(mask_, scale, zero);
    s->range_min = std::min(lo, hi);
    s->range_max = std::max(lo, hi);
    s->AddParam("scale", scale);
    s->AddParam("zero", zero);
    return absl::OkStatus();
  }

 private:
  static constexpr int64_t kBatch = 1024;

  // Whether the compute dtype holds every value of stored dtype `d`.
  bool Holds(DType d) const {
    return d == p_.compute || (p_.compute == DType::kF32 &&
                               (d == DType::kF16 || d == DType::kBF16));
  }

  // Scales or zeros from group g on, read where they are stored; a null
  // row when they need rounding to the compute dtype first.
  HqqParamRow StoredRow(const StoredTensor* t, int64_t g) const {
    const bool plain = t->dtype == DType::kF16 || t->dtype == DType::kBF16 ||
                       t->dtype == DType::kF32;
    if (!plain || !Holds(t->dtype)) return {};
    const int64_t width = t->dtype == DType::kF32 ? 4 : 2;
    return {.data = t->data.data() + g * width, .dtype = t->dtype};
  }

  // Scales and zeros of groups [g, g + n) in the compute dtype. Scales
  // stored in a dtype the compute dtype holds exactly need no rounding.
  absl::Status LoadParams(int64_t g, int64_t n, float* s, float* z) const {
    for (auto [t, out] : {std::pair{p_.scale, s}, std::pair{p_.zero, z}}) {
      TM_RETURN_IF_ERROR(DecodeElements(t->dtype, t->data, g, n, out));
      if (Holds(t->dtype)) continue;
      for (int64_t k = 0; k < n; ++k) {
        out[k] = static_cast<float>(RoundToDType(out[k], p_.compute));
      }
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
    return HqqValue(code, static_cast<float>(s), static_cast<float>(z),
                    p_.compute);
  }

  HqqParams p_;
  int64_t numel_ = 0, rows_ = 0, cols_ = 0, step_ = 1;
  uint32_t mask_ = 0;
  int64_t word_ = 1;  // bytes per packed word
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
