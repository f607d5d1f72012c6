#include "core/quant/rounding_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/match.h"
#include "core/quant/encoding.h"

namespace tensormorph {

namespace {

using Codes = RoundingBound::Codes;
using Clip = RoundingBound::Clip;

// float32 arithmetic of a block quantizer and its decoder: a few roundings
// of values up to the run's largest magnitude, with room to spare.
constexpr double kBlockFloatSlack = 0x1p-20;

RoundingBound Make(Codes codes, Clip clip, double clip_steps, bool scale_f16,
                   double scale_levels, bool offset_f16, double float_slack,
                   const char* family) {
  RoundingBound b;
  b.codes = codes;
  b.clip = clip;
  b.clip_steps = clip_steps;
  b.scale_f16 = scale_f16;
  b.scale_levels = scale_levels;
  b.offset_f16 = offset_f16;
  b.float_slack = float_slack;
  b.family = family;
  return b;
}

// Rounded to nearest by a conversion (plain floats, a dtype cast).
RoundingBound Exact() {
  return Make(Codes::kNearest, Clip::kNone, 0, false, 0, false, 0, "nearest");
}

std::optional<DType> DTypeByName(const std::string& name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType t = static_cast<DType>(i);
    if (DTypeName(t) == name) return t;
  }
  return std::nullopt;
}

// BoundOfDType but for zeroes_groups.
RoundingBound StatementOf(DType dtype) {
  constexpr double s = kBlockFloatSlack;
  switch (dtype) {
    // d = amax / 127 in float32 picks the codes, fp16(d) is stored.
    case DType::kQ8_0:
    case DType::kQ8_1:
      return Make(Codes::kNearest, Clip::kNone, 0, true, 0, false, s,
                  "nearest, f16 scale");
    // The signed extreme sits on level -8 (-16); the opposite side's
    // extreme needs level +8 (+16), one past the last: clipped by design,
    // by up to one step.
    case DType::kQ4_0:
    case DType::kQ5_0:
      return Make(Codes::kNearest, Clip::kShortEnd, 0.5, true, 0, false, s,
                  "nearest, f16 scale, short end clips");
    // min/max quantizers: codes from the float32 d and min, both stored f16.
    case DType::kQ4_1:
    case DType::kQ5_1:
      return Make(Codes::kNearest, Clip::kNone, 0, true, 0, true, s,
                  "nearest, f16 scale and min");
    // ternary: d = amax stored f16, codes from the float32 d; Q2_0's four
    // levels (code - 1) * d likewise.
    case DType::kTQ1_0:
    case DType::kTQ2_0:
    case DType::kQ2_0:
      return Make(Codes::kNearest, Clip::kNone, 0, true, 0, false, s,
                  "nearest, f16 scale");
    // Codes are recomputed from the stored (rounded) sub-block scales, so
    // they are nearest for them; the scale search may clip any amount.
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return Make(Codes::kNearest, Clip::kAny, 0, false, 0, false, s,
                  "nearest for stored scales, searched scales clip");
    // One bit, the sign, times a block scale that is the mean magnitude,
    // not the largest: everything beyond it clips by design.
    case DType::kQ1_0:
      return Make(Codes::kNearest, Clip::kAny, 0, true, 0, false, s,
                  "sign, f16 mean-magnitude scale clips");
    case DType::kQ8_K:
      return Make(Codes::kNearest, Clip::kNone, 0, false, 0, false, s,
                  "nearest");
    // The codebook's nearest entry for the float32 scale (stored f16; its
    // largest |entry| is 127); the scale search may clip.
    case DType::kIQ4_NL:
      return Make(Codes::kNearest, Clip::kAny, 0, true, 127, false, s,
                  "nearest entry, f16 scale, searched scales clip");
    // IQ4_XS: codes from the float32 d times the 6-bit sub-block scale;
    // only d is stored f16, so the run's scale tells not its rounding.
    case DType::kIQ4_XS: {
      RoundingBound b =
          Make(Codes::kNearest, Clip::kAny, 0, false, 0, false, s,
               "nearest entry, f16 super-block scale, searched scales clip");
      // |d'| >= the run's scale / 32 and the scale >= max|value| / 127:
      // below f16's normals, its rounding 2^-25 against that least |d'|.
      b.scale_rel = 0x1p-11;
      b.scale_levels = 127 * 32;
      return b;
    }
    // A power-of-two scale 2^(floor(log2 amax) - 2): amax reaches 8 where
    // the last entry is 6, one gap (of 2) beyond it.
    case DType::kMXFP4:
      return Make(Codes::kNearest, Clip::kBothEnds, 0.5, false, 0, false, s,
                  "nearest entry, power-of-two scale clips");
    // Grid searches choose codes jointly (IQ1-IQ3), and NVFP4's e4m3
    // scales are not modelled: judged on clipping and SQNR.
    case DType::kIQ2_XXS:
    case DType::kIQ2_XS:
    case DType::kIQ2_S:
    case DType::kIQ3_XXS:
    case DType::kIQ3_S:
    case DType::kIQ1_S:
    case DType::kIQ1_M:
    case DType::kNVFP4:
      return Make(Codes::kChosen, Clip::kAny, 0, false, 0, false, s,
                  "chosen codes (grid search)");
    default:
      return Exact();
  }
}

}  // namespace

RoundingBound BoundOfDType(DType dtype) {
  RoundingBound b = StatementOf(dtype);
  switch (dtype) {
    // Sub-block scales quantized against the super-block's (K-quants'
    // 4-8-bit scales, IQ's 4-bit ones) round to 0 for a sub-block much
    // smaller than the largest; NVFP4's e4m3 block scale likewise.
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_XS:
    case DType::kIQ2_XXS:
    case DType::kIQ2_XS:
    case DType::kIQ2_S:
    case DType::kIQ3_XXS:
    case DType::kIQ3_S:
    case DType::kIQ1_S:
    case DType::kIQ1_M:
    case DType::kNVFP4:
      b.zeroes_groups = true;
      break;
    default:
      break;
  }
  return b;
}

RoundingBound BoundOfEncoding(const EncodingInfo& info) {
  const std::string& c = info.convention;
  if (c == "ggml" || c == "safetensors" || c.empty()) {
    if (std::optional<DType> t = DTypeByName(info.scheme)) {
      return BoundOfDType(*t);
    }
    return Exact();
  }
  constexpr double s = kBlockFloatSlack;
  // Error feedback: GPTQ moves each column's codes to absorb the error of
  // the columns before it. (compressed-tensors records no quantizer: its
  // checkpoints are held to nearest, as llm-compressor's RTN writes them.)
  if (absl::StartsWith(c, "gptq")) {
    return Make(Codes::kChosen, Clip::kNone, 0, false, 0, false, s,
                "chosen codes (error feedback)");
  }
  // AWQ quantizes activation-scaled weights with a searched clip: neither
  // the codes nor the range answer to the unscaled source.
  if (absl::StartsWith(c, "awq")) {
    return Make(Codes::kChosen, Clip::kAny, 0, false, 0, false, s,
                "chosen codes (scaled weights, searched clip)");
  }
  if (absl::StartsWith(c, "mxfp4")) return BoundOfDType(DType::kMXFP4);
  // llm-compressor casts the float32 scales it rounded with to the model's
  // dtype: bf16 at worst, a relative rounding of 2^-8.
  if (c == "compressed-tensors") {
    RoundingBound b = Make(Codes::kNearest, Clip::kNone, 0, false, 0, false, s,
                           "nearest, scale stored in the model's dtype");
    b.scale_rel = 0x1p-8;
    return b;
  }
  // fp8 casts of scaled weights: nearest on a float grid, where a bf16
  // source's own rounding is at most 1/16 of a step (see float_codes).
  if (c == "fp8") {
    RoundingBound b =
        Make(Codes::kNearest, Clip::kNone, 0, false, 0, false, s, "nearest");
    b.float_codes = true;
    return b;
  }
  // MLX (mx.quantize): affine codes are nearest for the float32 scale and
  // edge bias, both then stored in the model's dtype (bf16 at worst, 2^-8),
  // and the decode rounds q*s, +b and so the value to it: 2^-7 of the
  // group's magnitude covers bias, product and output rounding. The scale is
  // then adjusted so zero is a level (edge / round(edge / scale)), which can
  // shrink the range by up to one step at the end nearer zero (the edge is
  // the larger magnitude, so |edge| / scale >= (2^bits - 1) / 2). The float
  // modes round the scale (mx: 2^round(log2(amax / max)), up to sqrt(2)
  // short; nvfp4: amax / 6 to e4m3), so their ends clip.
  if (c == "mlx") {
    if (absl::StartsWith(info.scheme, "int")) {
      RoundingBound b =
          Make(Codes::kNearest, Clip::kShortEnd, 1, false, 0, false, 0x1p-7,
               "nearest, zero-exact scale, stored in the model's dtype");
      b.scale_rel = 0x1p-8;
      return b;
    }
    if (absl::StartsWith(info.scheme, "nvfp4")) {
      return Make(Codes::kNearest, Clip::kBothEnds, 0.25, false, 6, false, s,
                  "nearest entry, e4m3 scale clips");
    }
    return Make(Codes::kNearest, Clip::kAny, 0, false, 0, false, s,
                "nearest entry, rounded power-of-two scale clips");
  }
  // ModelOpt divides by the scale it stores (NVFP4: the FP8 block scale
  // times weight_scale_2, rounded as the decoder rounds it) and rounds to
  // the nearest level; an FP8-rounded block scale clips its absmax by at
  // most 1/16 of the top level, inside the end's half step. NVFP4_AWQ
  // quantizes activation-scaled weights, as AWQ does.
  // AWQ (NVFP4_AWQ, W4A8_AWQ) quantizes the weight divided by its
  // pre_quant_scale, rounded to the model's dtype (bf16: 2^-8 of the
  // largest magnitude, with room); decoded times that scale it is the
  // source's weight again. A scale ModelOpt folded into the previous layer
  // leaves the weight scaled against its source: codes chosen elsewhere.
  // W4A8_AWQ's INT4 scale is amax / 7: nearest, nothing clipped.
  if (c == "modelopt") {
    if (absl::StrContains(info.scheme, "AWQ")) {
      if (absl::StrContains(info.scheme, "pre_quant_scale")) {
        return Make(Codes::kNearest, Clip::kNone, 0, false, 0, false, 0x1p-8,
                    "nearest, stored scale, weights folded by pre_quant_scale");
      }
      return Make(Codes::kChosen, Clip::kAny, 0, false, 0, false, s,
                  "chosen codes (scaled weights)");
    }
    return Make(Codes::kNearest, Clip::kNone, 0, false, 0, false, s,
                "nearest, stored scale");
  }
  // HQQ picks codes with its float32 inverse scale and zero (optimized by
  // its proximal solver), then stores both in the compute dtype.
  if (c == "hqq") {
    return Make(Codes::kChosen, Clip::kAny, 0, false, 0, false, s,
                "chosen codes (optimized zero, rounded scale)");
  }
  // bitsandbytes (absmax codebooks, LLM.int8 rows): nearest.
  return Make(Codes::kNearest, Clip::kNone, 0, false, 0, false, s, "nearest");
}

double HalfUlpF16(double v) {
  v = std::fabs(v);
  if (v < 0x1p-14) return 0x1p-25;
  int e;
  std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1): ulp = 2^(e - 11)
  return std::ldexp(1.0, e - 12);
}

void ApplyBound(const RoundingBound& b, QuantRun* r) {
  const double mag = std::max(std::fabs(r->range_min), std::fabs(r->range_max));
  const double step = std::max(r->step_below, r->step_above);
  r->bound = 0.5;
  r->slack = b.float_codes ? 0 : b.float_slack * mag;
  r->slack_rel = 0;
  r->origin = 0;
  double u = 0;  // the stored scale's relative rounding
  if (b.scale_f16) {
    const double d = b.scale_levels > 0 ? mag / b.scale_levels : r->step_below;
    u = d > 0 ? HalfUlpF16(d) / d : 0;
    // |x - l d'| <= |x - l d| + |l| |d - d'| <= (d' + h) / 2 + |l| h.
    r->slack_rel = u;
    r->slack += 0.5 * u * step;
  }
  if (b.scale_rel > 0) {
    u = b.scale_rel;
    if (b.scale_levels > 0 && mag > 0) {
      u = std::max(u, HalfUlpF16(0) / (mag / b.scale_levels));
    }
    r->slack_rel = u;
    r->slack += 0.5 * u * step;
  }
  if (b.offset_f16) {
    r->origin = r->range_min;
    r->slack += HalfUlpF16(r->range_min);
  }
  // On a float grid x / s and s * level round relative to the element:
  // 2^-20 of the largest level is 0.22 of e4m3's finest step, and e5m2's is
  // infinite. The bound takes the source a step beyond its level, as
  // WidenForSourceRounding does.
  if (b.float_codes) {
    r->slack_rel += b.float_slack;
    r->bound += b.float_slack;
  }
  r->extra_below = r->extra_above = 0;
  // A source one level past the end, aimed with the unrounded scale.
  const double extra = b.clip_steps * (1 + u);
  switch (b.clip) {
    case Clip::kNone:
      break;
    case Clip::kShortEnd:
      if (std::fabs(r->range_max) < std::fabs(r->range_min)) {
        r->extra_above = extra;
      } else if (std::fabs(r->range_min) < std::fabs(r->range_max)) {
        r->extra_below = extra;
      }
      break;
    case Clip::kBothEnds:
      r->extra_below = r->extra_above = extra;
      break;
    case Clip::kAny:
      r->extra_below = r->extra_above = std::numeric_limits<double>::infinity();
      break;
  }
}

double SourceRoundingRel(const EncodingInfo& source) {
  if (source.quantized) return 0;
  if (source.scheme == "BF16") return 0x1p-8;
  if (source.scheme == "F16") return 0x1p-11;
  return 0;
}

void WidenForSourceRounding(double rel, bool f16, QuantRun* r) {
  if (rel == 0) return;
  // |x| <= |x^ - origin| + |origin| + |x - x^|: the error pass scales
  // slack_rel by |x^ - origin|, |origin| goes to the constant slack, and
  // |x - x^| of an element within its bound is under a step towards x, so
  // its share is under rel steps (not a slack in real units: divided by a
  // float grid's finer step below a power of two, it would count twice).
  r->slack_rel += rel;
  r->bound += rel;
  r->slack += rel * std::fabs(r->origin) + (f16 ? 0x1p-25 : 0);
}

double InteriorBoundSteps(const QuantRun& r) {
  const double far = std::max(std::fabs(r.range_max - r.origin),
                              std::fabs(r.range_min - r.origin));
  return LevelBoundSteps(r, r.origin + far);
}

double LevelBoundSteps(const QuantRun& r, double level) {
  const double step = std::min(r.step_below, r.step_above);
  if (!(step > 0)) return 0;
  return r.bound + (r.slack + r.slack_rel * std::fabs(level - r.origin)) / step;
}

}  // namespace tensormorph
