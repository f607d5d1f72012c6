#include "core/quant/affine_encoding.h"

#include <algorithm>
#include <cmath>

#include "core/quant/block_util.h"
#include "core/quant/float_formats.h"

namespace tensormorph {
namespace {

class AffineEncoding final : public Encoding {
 public:
  explicit AffineEncoding(AffineParams p) : p_(std::move(p)) {
    for (float t : p_.table) {
      if (!std::isnan(t)) levels_.push_back(t);  // FP8 NaN codes are no level
    }
    // Per code, the gaps to the neighbouring levels, for DecodeDetailed.
    for (float t : p_.table) {
      ScalarInfo s;
      if (std::isnan(t)) {
        gaps_.push_back({NAN, NAN});
        continue;
      }
      FillCodebookSteps(1.0, levels_.data(), static_cast<int>(levels_.size()),
                        t, &s);
      gaps_.push_back({s.step_below, s.step_above});
      lo_level_ = std::min(lo_level_, static_cast<double>(t));
      hi_level_ = std::max(hi_level_, static_cast<double>(t));
    }
  }

  absl::Status DecodeDetailed(int64_t first, int64_t count,
                              ElementQuant* out) const override {
    int64_t cached = -1;
    float scale = 0;
    int64_t zero = 0;
    double range_min = 0, range_max = 0, step = 0;
    int64_t group = 0;
    const int64_t lo =
        p_.signed_codes ? -(int64_t{1} << (p_.codes.bits - 1)) : 0;
    const int64_t hi = lo + (int64_t{1} << p_.codes.bits) - 1;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t flat = first + i;
      const int64_t r = flat / p_.cols, c = flat % p_.cols;
      int64_t gr = 0, gc = 0;
      GroupOf(r, c, flat, &gr, &gc);
      const int64_t key = gr * kGroupStride + gc;
      if (key != cached) {
        cached = key;
        scale = ScaleOf(gr, gc);
        zero = ZeroOf(gr, gc);
        group = GroupIndex(gr, gc);
        const double a =
            p_.table.empty()
                ? static_cast<double>(scale) * (lo - p_.code_offset - zero)
                : static_cast<double>(scale) * lo_level_;
        const double b =
            p_.table.empty()
                ? static_cast<double>(scale) * (hi - p_.code_offset - zero)
                : static_cast<double>(scale) * hi_level_;
        range_min = std::min(a, b);
        range_max = std::max(a, b);
        step = std::fabs(static_cast<double>(scale));
      }
      const uint32_t code = p_.codes.Get(r, c);
      ElementQuant& e = out[i];
      e.value = scale * Level(code, zero);
      e.range_min = range_min;
      e.range_max = range_max;
      e.group = group;
      if (p_.table.empty()) {
        e.step_below = e.step_above = step;
      } else {
        const auto& g = gaps_[code];
        e.step_below = step * (scale < 0 ? g.second : g.first);
        e.step_above = step * (scale < 0 ? g.first : g.second);
      }
    }
    return absl::OkStatus();
  }

  const EncodingInfo& info() const override { return p_.info; }
  std::vector<const StoredTensor*> parts() const override { return p_.parts; }

  // Row by row: each row's codes unpacked in one run, then runs of one
  // group decoded with that group's scale and zero-point fetched once, from
  // a table of its values when the run is long enough to pay for one. Every
  // value is the same float expression as Inspect's, so the two agree bit
  // for bit (tests hold them to it on random codes).
  absl::Status Decode(int64_t first, int64_t count, float* out) const override {
    thread_local std::vector<uint32_t> codes;
    thread_local std::vector<float> table;
    while (count > 0) {
      const int64_t r = first / p_.cols, c0 = first % p_.cols;
      const int64_t n = std::min(count, p_.cols - c0);
      codes.resize(static_cast<size_t>(n));
      p_.codes.GetRun(r, c0, n, codes.data());
      for (int64_t i = 0; i < n;) {
        const int64_t c = c0 + i;
        int64_t gr = 0, gc = 0;
        GroupOf(r, c, first + i, &gr, &gc);
        const int64_t end = i + RunOfGroup(c, first + i, gc, n - i);
        const float scale = ScaleOf(gr, gc);
        const int64_t zero = ZeroOf(gr, gc);
        const uint32_t* code = codes.data();
        if (!p_.table.empty()) {
          const float* levels = p_.table.data();
          for (; i < end; ++i) out[i] = scale * levels[code[i]];
        } else if (p_.codes.bits <= 8 &&
                   end - i >= (int64_t{2} << p_.codes.bits)) {
          const uint32_t levels = uint32_t{1} << p_.codes.bits;
          table.resize(levels);
          for (uint32_t k = 0; k < levels; ++k)
            table[k] = scale * Level(k, zero);
          for (; i < end; ++i) out[i] = table[code[i]];
        } else {
          for (; i < end; ++i) out[i] = scale * Level(code[i], zero);
        }
      }
      out += n;
      first += n;
      count -= n;
    }
    return absl::OkStatus();
  }

  absl::Status Inspect(int64_t flat, ScalarInfo* s) const override {
    const int64_t r = flat / p_.cols, c = flat % p_.cols;
    int64_t gr = 0, gc = 0;
    GroupOf(r, c, flat, &gr, &gc);
    const uint32_t code = p_.codes.Get(r, c);
    const float scale = ScaleOf(gr, gc);
    const int64_t zero = ZeroOf(gr, gc);
    *s = ScalarInfo();
    s->code_bits_value = code;
    s->code = p_.signed_codes ? SignExtend(code, p_.codes.bits) : code;
    s->code_width = p_.codes.bits;
    s->code_is_float = p_.float_codes;
    s->block = GroupIndex(gr, gc);
    s->scale = scale;
    s->level = Level(code, zero);
    s->value = scale * static_cast<float>(s->level);
    if (p_.table.empty()) {
      s->zero_point = static_cast<double>(zero + p_.code_offset);
      const int64_t lo =
          p_.signed_codes ? -(int64_t{1} << (p_.codes.bits - 1)) : 0;
      const int64_t hi = lo + (int64_t{1} << p_.codes.bits) - 1;
      FillUniformSteps(scale, static_cast<double>(lo - p_.code_offset - zero),
                       static_cast<double>(hi - p_.code_offset - zero), 0, s);
    } else {
      FillCodebookSteps(scale, levels_.data(), static_cast<int>(levels_.size()),
                        s->level, s);
    }
    if (p_.groups == AffineParams::Groups::kGroup && !p_.g_idx.empty()) {
      s->AddParam("g_idx", p_.g_idx[c]);
    }
    s->AddParam("scale", scale);
    if (p_.has_zero) s->AddParam("zero", static_cast<double>(zero));
    return absl::OkStatus();
  }

 private:
  static constexpr int64_t kGroupStride = int64_t{1} << 32;

  static int64_t SignExtend(uint32_t v, int bits) {
    const int64_t sign = int64_t{1} << (bits - 1);
    return (static_cast<int64_t>(v) ^ sign) - sign;
  }

  void GroupOf(int64_t r, int64_t c, int64_t flat, int64_t* gr,
               int64_t* gc) const {
    switch (p_.groups) {
      case AffineParams::Groups::kTensor:
        *gr = 0, *gc = 0;
        return;
      case AffineParams::Groups::kChannel:
        *gr = r, *gc = 0;
        return;
      case AffineParams::Groups::kGroup:
        *gr = r;
        *gc = p_.g_idx.empty() ? c / p_.group_size : p_.g_idx[c];
        return;
      case AffineParams::Groups::kBlock:
        *gr = r / p_.block_rows, *gc = c / p_.block_cols;
        return;
      case AffineParams::Groups::kFlatBlock:
        *gr = 0, *gc = flat / p_.group_size;
        return;
    }
  }

  // How many of the next `left` elements of a row, from column c (flat index
  // `flat`, group column gc), share c's group.
  int64_t RunOfGroup(int64_t c, int64_t flat, int64_t gc, int64_t left) const {
    switch (p_.groups) {
      case AffineParams::Groups::kTensor:
      case AffineParams::Groups::kChannel:
        return left;
      case AffineParams::Groups::kGroup:
        if (p_.g_idx.empty()) {
          return std::min(left, (gc + 1) * p_.group_size - c);
        } else {
          int64_t k = 1;
          while (k < left && p_.g_idx[c + k] == gc) ++k;
          return k;
        }
      case AffineParams::Groups::kBlock:
        return std::min(left, (gc + 1) * p_.block_cols - c);
      case AffineParams::Groups::kFlatBlock:
        return std::min(left, (gc + 1) * p_.group_size - flat);
    }
    return 1;
  }

  // A single index for the group, row-major over the group grid.
  int64_t GroupIndex(int64_t gr, int64_t gc) const {
    switch (p_.groups) {
      case AffineParams::Groups::kTensor:
        return 0;
      case AffineParams::Groups::kChannel:
        return gr;
      case AffineParams::Groups::kGroup:
      case AffineParams::Groups::kBlock:
        return gr * ScaleCols() + gc;
      case AffineParams::Groups::kFlatBlock:
        return gc;
    }
    return 0;
  }

  int64_t ScaleCols() const {
    return p_.scale_kind == AffineParams::Scales::kFloat ? p_.scale.cols
                                                         : p_.scale_codes.cols;
  }

  float ScaleOf(int64_t gr, int64_t gc) const {
    float s = 0;
    switch (p_.scale_kind) {
      case AffineParams::Scales::kFloat:
        s = p_.scale.Get(gr, gc);
        break;
      case AffineParams::Scales::kE8M0:
        s = E8M0ToF32(static_cast<uint8_t>(p_.scale_codes.Get(gr, gc)));
        break;
      case AffineParams::Scales::kNestedAbsmax: {
        const int64_t g = gc;
        s = p_.nested_table[p_.scale_codes.Get(0, g)] *
                p_.nested_absmax.Get(0, g / p_.nested_blocksize) +
            p_.nested_offset;
        break;
      }
    }
    return p_.scale_divisor != 0 ? s / p_.scale_divisor : s;
  }

  int64_t ZeroOf(int64_t gr, int64_t gc) const {
    if (!p_.has_zero) return 0;
    uint32_t z = p_.zeros.Get(gr, gc) + static_cast<uint32_t>(p_.zero_add);
    if (p_.zero_mask != 0) z &= p_.zero_mask;
    const int64_t v = p_.signed_zeros ? SignExtend(z, p_.zeros.bits) : z;
    return v - p_.zero_offset;
  }

  float Level(uint32_t code, int64_t zero) const {
    if (!p_.table.empty()) return p_.table[code];
    const int64_t q = p_.signed_codes ? SignExtend(code, p_.codes.bits) : code;
    return static_cast<float>(q - p_.code_offset - zero);
  }

  AffineParams p_;
  std::vector<double> levels_;
  std::vector<std::pair<double, double>> gaps_;  // per code: below, above
  double lo_level_ = INFINITY, hi_level_ = -INFINITY;
};

}  // namespace

std::shared_ptr<const Encoding> MakeAffineEncoding(AffineParams params) {
  return std::make_shared<AffineEncoding>(std::move(params));
}

}  // namespace tensormorph
