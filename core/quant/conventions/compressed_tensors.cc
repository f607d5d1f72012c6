// compressed-tensors (llm-compressor / vLLM). Formats:
//  - int-quantized, naive-quantized: `weight` holds signed integer codes;
//  - pack-quantized: `weight_packed` I32 [out, ceil(in/(32/b))], codes stored
//    unsigned with a 2^(b-1) offset, 32/b per word; `weight_shape` [out, in];
//    asymmetric zero points packed the same way along dim 0;
//  - float-quantized: `weight` FP8;
//  - nvfp4-pack-quantized: `weight_packed` U8 (low nibble first), FP8
//    `weight_scale` per 16, divided by `weight_global_scale`;
//  - mxfp4-pack-quantized: `weight_packed` U8, E8M0 `weight_scale` per 32.
// Strategies: tensor, channel, group (group_size, optional weight_g_idx),
// block.
//   x = scale(group) * (q - zero(group))   or   scale(group) * fp(q)
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/quant/conventions/context.h"
#include "core/quant/conventions/targets.h"
#include "core/util/checked_math.h"
#include "core/util/status_macros.h"

namespace tensormorph::conventions {
namespace {

constexpr char kName[] = "compressed-tensors";

constexpr std::initializer_list<DType> kIntTypes = {
    DType::kI8,  DType::kU8,  DType::kI16, DType::kU16,
    DType::kI32, DType::kU32, DType::kI64, DType::kU64};
constexpr std::initializer_list<DType> kFloatScaleTypes = {
    DType::kF64,  DType::kF32,    DType::kF16,
    DType::kBF16, DType::kF8E4M3, DType::kF8E5M2};

bool IsFp4Pack(CtFormat f) {
  return f == CtFormat::kNvfp4PackQuantized ||
         f == CtFormat::kMxfp4PackQuantized;
}

// One weight being resolved: its scheme, its names, its scale, and the
// parameters built so far.
struct Weight {
  const CtScheme& s;
  std::string name;  // "<prefix>weight"
  const StoredTensor* scale = nullptr;
  const StoredTensor* codes = nullptr;
  int64_t out = 0, in = 0;
  AffineParams p = {};
};

// pack-quantized: `weight_packed` I32 [out, ceil(in/(32/b))] of codes stored
// unsigned with a 2^(b-1) offset, the logical shape in `weight_shape`.
absl::Status PackQuantizedCodes(const Context& ctx, Weight* w) {
  TM_ASSIGN_OR_RETURN(const StoredTensor* shape_t,
                      ctx.Expect(kName, w->name, w->name + "_shape", kIntTypes,
                                 ShapeRule::Exact({2}, "[out, in]")));
  TM_ASSIGN_OR_RETURN(const std::vector<int64_t> shape,
                      ReadIntVector(kName, shape_t));
  if (shape[0] <= 0 || shape[1] <= 0) {
    return Mismatch(
        kName, absl::StrCat("'", shape_t->name, "' holds [", shape[0], ",",
                            shape[1], "] but must hold [out, in], each >= 1"));
  }
  w->out = shape[0];
  w->in = shape[1];
  const int bits = w->s.bits;
  const int per_word = 32 / bits;
  const int64_t words = CeilDiv(w->in, per_word);
  TM_ASSIGN_OR_RETURN(
      w->codes,
      ctx.Expect(kName, w->name, w->name + "_packed", {DType::kI32},
                 ShapeRule::Exact(
                     {w->out, words},
                     absl::StrCat("weight_shape [", w->out, ",", w->in, "] at ",
                                  per_word, " codes per int32"))));
  w->p.codes = {.tensor = w->codes,
                .kind = IntMatrix::Kind::kPackedAlongCols,
                .bits = bits,
                .per_word = per_word,
                .rows = w->out,
                .cols = w->in,
                .stored_cols = words};
  w->p.code_offset = int64_t{1} << (bits - 1);
  w->p.parts = {w->codes, shape_t, w->scale};
  return absl::OkStatus();
}

// nvfp4- and mxfp4-pack-quantized: `weight_packed` U8 [out, in/2], FP4 E2M1
// codes two per byte, low nibble first.
absl::Status Fp4PackCodes(const Context& ctx, Weight* w) {
  TM_ASSIGN_OR_RETURN(w->codes, ctx.Expect(kName, w->name, w->name + "_packed",
                                           {DType::kU8}, ShapeRule::Rank(2)));
  w->out = w->codes->shape[0];
  w->in = w->codes->shape[1] * 2;
  w->p.codes = {.tensor = w->codes,
                .kind = IntMatrix::Kind::kNibbles,
                .bits = 4,
                .rows = w->out,
                .cols = w->in,
                .stored_cols = w->in};
  w->p.table = E2M1Table();
  w->p.float_codes = true;
  w->p.parts = {w->codes, w->scale};
  return absl::OkStatus();
}

// int-quantized, naive-quantized: `weight` holds signed (or U8) integer codes
// one per element.
absl::Status IntCodes(const Context& ctx, Weight* w) {
  TM_ASSIGN_OR_RETURN(
      w->codes, ctx.Expect(kName, w->name, w->name,
                           {DType::kI8, DType::kU8, DType::kI16, DType::kI32},
                           ShapeRule::Rank(2)));
  w->out = w->codes->shape[0];
  w->in = w->codes->shape[1];
  const int width = GetDTypeInfo(w->codes->dtype).block_bytes * 8;
  w->p.codes = {.tensor = w->codes,
                .kind = IntMatrix::Kind::kDirect,
                .bits = width,
                .rows = w->out,
                .cols = w->in,
                .stored_cols = w->in};
  w->p.signed_codes = w->codes->dtype != DType::kU8;
  w->p.parts = {w->codes, w->scale};
  return absl::OkStatus();
}

// float-quantized (or type "float"): `weight` holds FP8 codes.
absl::Status FloatCodes(const Context& ctx, Weight* w) {
  TM_ASSIGN_OR_RETURN(
      w->codes, ctx.Expect(kName, w->name, w->name,
                           {DType::kF8E4M3, DType::kF8E5M2, DType::kF8E4M3Fnuz,
                            DType::kF8E5M2Fnuz},
                           ShapeRule::Rank(2)));
  w->out = w->codes->shape[0];
  w->in = w->codes->shape[1];
  w->p.table = Fp8Table(w->codes->dtype);
  w->p.float_codes = true;
  w->p.codes = {.tensor = w->codes,
                .kind = IntMatrix::Kind::kDirect,
                .bits = 8,
                .rows = w->out,
                .cols = w->in,
                .stored_cols = w->in};
  w->p.parts = {w->codes, w->scale};
  return absl::OkStatus();
}

// The groups of the scheme's strategy (FP4 formats: their fixed groups) and
// the scale shape they imply.
absl::StatusOr<std::vector<int64_t>> ApplyStrategy(Weight* w) {
  const CtScheme& s = w->s;
  AffineParams& p = w->p;
  EncodingInfo& info = p.info;
  const int64_t out = w->out, in = w->in;
  if (IsFp4Pack(s.format)) {
    const int64_t g = s.format == CtFormat::kNvfp4PackQuantized ? 16 : 32;
    p.groups = AffineParams::Groups::kGroup;
    p.group_size = g;
    info.group_size = info.block_elems = g;
    info.axis = "in";
    info.granularity = absl::StrCat("group ", g, " along in");
    return std::vector<int64_t>{out, CeilDiv(in, g)};
  }
  const StoredTensor* scale = w->scale;
  switch (s.strategy) {
    case CtStrategy::kTensor: {
      p.groups = AffineParams::Groups::kTensor;
      info.granularity = "tensor";
      if (scale->shape.size() == 2) return std::vector<int64_t>{1, 1};
      if (scale->shape.empty()) return std::vector<int64_t>{};
      return std::vector<int64_t>{1};
    }
    case CtStrategy::kChannel:
      p.groups = AffineParams::Groups::kChannel;
      info.granularity = "channel along out";
      info.axis = "out";
      if (scale->shape.size() == 1) return std::vector<int64_t>{out};
      return std::vector<int64_t>{out, 1};
    case CtStrategy::kGroup: {
      if (!s.group_size || *s.group_size <= 0) {
        return Mismatch(kName, absl::StrCat("config group '", s.group,
                                            "': strategy '", s.strategy_name,
                                            "' without a group_size >= 1"));
      }
      const int64_t g = *s.group_size;
      p.groups = AffineParams::Groups::kGroup;
      p.group_size = g;
      info.group_size = g;
      info.block_elems = g;
      info.axis = "in";
      info.granularity = absl::StrCat("group ", g, " along in");
      return std::vector<int64_t>{out, CeilDiv(in, g)};
    }
    case CtStrategy::kBlock: {
      if (!s.block) {
        return Mismatch(kName, absl::StrCat("config group '", s.group,
                                            "': strategy 'block' without a "
                                            "[rows, cols] block_structure"));
      }
      const auto [br, bc] = *s.block;
      p.groups = AffineParams::Groups::kBlock;
      p.block_rows = br;
      p.block_cols = bc;
      info.block_shape = {br, bc};
      info.block_elems = CheckedMul<int64_t>(br, bc).value_or(0);
      info.granularity = absl::StrCat("block ", br, "x", bc);
      return std::vector<int64_t>{CeilDiv(out, br), CeilDiv(in, bc)};
    }
    case CtStrategy::kOther:
      break;
  }
  return absl::UnimplementedError(absl::StrCat(
      "compressed-tensors strategy '", s.strategy_name, "' is not supported"));
}

// The scales over the group grid (E8M0 codes for mxfp4, floats otherwise),
// and nvfp4's global divisor.
absl::Status ApplyScales(const Context& ctx, const std::vector<int64_t>& shape,
                         Weight* w) {
  AffineParams& p = w->p;
  if (auto st = ExpectShape(
          kName, w->scale, shape,
          absl::StrCat(p.info.granularity, " over [", w->out, ",", w->in, "]"));
      !st.ok()) {
    // FP8 scales of the wrong layout: what the strategy implies is not
    // what was stored (a block scale under a channel config, ...).
    return w->s.type == CtType::kFloat ? WithRule(st, "fp8-scale-layout") : st;
  }
  const int64_t rows = shape.empty() ? 1 : shape[0];
  const int64_t cols = shape.size() == 2 ? shape[1] : 1;
  if (w->s.format == CtFormat::kMxfp4PackQuantized) {
    TM_RETURN_IF_ERROR(
        ExpectDType(kName, w->scale, {DType::kU8, DType::kF8E8M0}));
    p.scale_kind = AffineParams::Scales::kE8M0;
    p.scale_codes = {.tensor = w->scale,
                     .kind = IntMatrix::Kind::kDirect,
                     .bits = 8,
                     .rows = rows,
                     .cols = cols,
                     .stored_cols = cols};
    return absl::OkStatus();
  }
  TM_RETURN_IF_ERROR(ExpectDType(kName, w->scale, kFloatScaleTypes));
  p.scale = {.tensor = w->scale, .rows = rows, .cols = cols};
  if (w->s.format != CtFormat::kNvfp4PackQuantized) return absl::OkStatus();
  TM_ASSIGN_OR_RETURN(const StoredTensor* global,
                      ctx.Expect(kName, w->name, w->name + "_global_scale",
                                 kFloatScaleTypes, ShapeRule::Any()));
  TM_ASSIGN_OR_RETURN(const std::vector<float> g,
                      ReadFloatVector(kName, global));
  if (g.size() != 1 || !(g[0] != 0) || !std::isfinite(g[0])) {
    return Mismatch(kName,
                    absl::StrCat("'", global->name, "' is ",
                                 DescribeStored(global->dtype, global->shape),
                                 g.size() == 1 ? absl::StrCat(" = ", g[0]) : "",
                                 " but must be one finite non-zero divisor"));
  }
  p.scale_divisor = g[0];
  p.parts.push_back(global);
  return absl::OkStatus();
}

// `weight_g_idx` (act-order): the group of each input column.
absl::Status ApplyGroupIndex(const Context& ctx, Weight* w) {
  AffineParams& p = w->p;
  TM_ASSIGN_OR_RETURN(
      const StoredTensor* gi,
      ctx.ExpectIfPresent(
          kName, w->name, w->name + "_g_idx", kIntTypes,
          ShapeRule::Exact({w->in}, absl::StrCat("in=", w->in))));
  if (gi == nullptr) return absl::OkStatus();
  if (p.groups != AffineParams::Groups::kGroup) {
    return Mismatch(kName,
                    absl::StrCat("'", gi->name, "' needs strategy 'group'"));
  }
  TM_ASSIGN_OR_RETURN(const std::vector<int64_t> idx, ReadIntVector(kName, gi));
  const int64_t groups = p.scale_kind == AffineParams::Scales::kE8M0
                             ? p.scale_codes.cols
                             : p.scale.cols;
  for (size_t k = 0; k < idx.size(); ++k) {
    if (idx[k] < 0 || idx[k] >= groups) {
      return Mismatch(kName,
                      absl::StrCat("'", gi->name, "'[", k, "] = ", idx[k],
                                   " is outside the ", groups, " groups"));
    }
  }
  p.g_idx.assign(idx.begin(), idx.end());
  p.info.act_order = true;
  p.info.granularity += ", act-order";
  p.parts.push_back(gi);
  return absl::OkStatus();
}

// Asymmetric integer schemes: `weight_zero_point`, packed along dim 0 for
// pack-quantized, shaped like the scales otherwise.
absl::Status ApplyZeroPoints(const Context& ctx,
                             const std::vector<int64_t>& scale_shape,
                             Weight* w) {
  const CtScheme& s = w->s;
  AffineParams& p = w->p;
  if (s.symmetric || s.type != CtType::kInt || IsFp4Pack(s.format))
    return absl::OkStatus();
  const int64_t rows = scale_shape.empty() ? 1 : scale_shape[0];
  const int64_t cols = scale_shape.size() == 2 ? scale_shape[1] : 1;
  const StoredTensor* z = nullptr;
  if (s.format == CtFormat::kPackQuantized) {
    const int per_word = 32 / s.bits;
    TM_ASSIGN_OR_RETURN(
        z, ctx.Expect(kName, w->name, w->name + "_zero_point", {DType::kI32},
                      ShapeRule::Exact({CeilDiv(rows, per_word), cols},
                                       "zero points packed along dim 0")));
    p.zeros = {.tensor = z,
               .kind = IntMatrix::Kind::kPackedAlongRows,
               .bits = s.bits,
               .per_word = per_word,
               .rows = rows,
               .cols = cols,
               .stored_cols = cols};
    p.zero_offset = int64_t{1} << (s.bits - 1);
  } else {
    TM_ASSIGN_OR_RETURN(
        z, ctx.Expect(kName, w->name, w->name + "_zero_point",
                      {DType::kI8, DType::kU8, DType::kI32},
                      ShapeRule::Exact(scale_shape,
                                       "zero points shaped like the scales")));
    p.zeros = {.tensor = z,
               .kind = IntMatrix::Kind::kDirect,
               .bits = GetDTypeInfo(z->dtype).block_bytes * 8,
               .rows = rows,
               .cols = cols,
               .stored_cols = cols};
    p.signed_zeros = z->dtype != DType::kU8;
  }
  p.has_zero = true;
  p.parts.push_back(z);
  return absl::OkStatus();
}

void Describe(Weight* w) {
  const CtScheme& s = w->s;
  EncodingInfo& info = w->p.info;
  info.convention = "compressed-tensors";
  info.bits = IsFp4Pack(s.format) ? 4 : s.bits;
  info.quantized = true;
  info.symmetric = !w->p.has_zero;
  if (s.format == CtFormat::kNvfp4PackQuantized) {
    info.scheme = "nvfp4 (fp4 e2m1, fp8 scales / global)";
  } else if (s.format == CtFormat::kMxfp4PackQuantized) {
    info.scheme = "mxfp4 (fp4 e2m1, e8m0 scales)";
  } else if (s.type == CtType::kFloat) {
    info.scheme = absl::StrCat("fp8 ", DTypeName(w->codes->dtype));
  } else {
    info.scheme = absl::StrCat("int", s.bits,
                               w->p.has_zero ? " asymmetric" : " symmetric");
  }
}

absl::Status ResolveOne(Context& ctx, const CtScheme& s,
                        const std::string& prefix) {
  Weight w{.s = s, .name = prefix + "weight"};
  // A scale whose weight is not stored at all is an orphan, not a weight
  // missing its codes.
  if (!ctx.Has(w.name) && !ctx.Has(w.name + "_packed")) {
    return WithRule(Mismatch(kName, absl::StrCat("'", w.name,
                                                 "_scale' has no weight: "
                                                 "neither '",
                                                 w.name, "' nor '", w.name,
                                                 "_packed' is stored")),
                    "orphan-companion");
  }
  TM_ASSIGN_OR_RETURN(w.scale, ctx.Expect(kName, w.name, w.name + "_scale", {},
                                          ShapeRule::Any()));
  switch (s.format) {
    case CtFormat::kPackQuantized:
      if (s.bits < 2 || s.bits > 8) {
        return absl::UnimplementedError(
            absl::StrCat("compressed-tensors pack-quantized with ", s.bits,
                         "-bit weights is not supported (2 to 8 are)"));
      }
      TM_RETURN_IF_ERROR(PackQuantizedCodes(ctx, &w));
      break;
    case CtFormat::kNvfp4PackQuantized:
    case CtFormat::kMxfp4PackQuantized:
      TM_RETURN_IF_ERROR(Fp4PackCodes(ctx, &w));
      break;
    case CtFormat::kIntQuantized:
    case CtFormat::kNaiveQuantized:
    case CtFormat::kFloatQuantized:
      TM_RETURN_IF_ERROR(s.type == CtType::kFloat ? FloatCodes(ctx, &w)
                                                  : IntCodes(ctx, &w));
      break;
    case CtFormat::kOther:
      return absl::UnimplementedError(absl::StrCat(
          "compressed-tensors format '", s.format_name, "' is not supported"));
  }
  w.p.shape = {w.out, w.in};
  w.p.rows = w.out;
  w.p.cols = w.in;
  TM_ASSIGN_OR_RETURN(const std::vector<int64_t> scale_shape,
                      ApplyStrategy(&w));
  TM_RETURN_IF_ERROR(ApplyScales(ctx, scale_shape, &w));
  TM_RETURN_IF_ERROR(ApplyGroupIndex(ctx, &w));
  TM_RETURN_IF_ERROR(ApplyZeroPoints(ctx, scale_shape, &w));
  Describe(&w);
  return ctx.Add(kName, w.name, std::move(w.p));
}

}  // namespace

absl::Status ResolveCompressedTensors(Context& ctx,
                                      const CompressedTensorsConfig& config) {
  const std::vector<CtScheme>& schemes = config.schemes;
  if (schemes.empty()) return absl::OkStatus();
  // With one scheme there is nothing to choose: no pattern is matched.
  std::vector<Targets> targets;
  if (schemes.size() > 1) {
    for (const CtScheme& s : schemes) targets.emplace_back(s.targets);
  }
  for (const StoredTensor& t : ctx.stored()) {
    if (!absl::EndsWith(t.name, "weight_scale")) continue;
    const std::string prefix =
        t.name.substr(0, t.name.size() - std::string("weight_scale").size());
    const std::string module =
        prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1);
    size_t chosen = 0;  // the first scheme when none targets the module
    for (size_t i = 0; i < targets.size(); ++i) {
      if (targets[i].Match(module)) {
        chosen = i;
        break;
      }
    }
    absl::Status s = ResolveOne(ctx, schemes[chosen], prefix);
    // An orphan is the scale itself; anything else is about the weight.
    TM_RETURN_IF_ERROR(ctx.Tolerate(
        s, RuleOf(s) == "orphan-companion" ? t.name : prefix + "weight"));
  }
  return absl::OkStatus();
}

}  // namespace tensormorph::conventions
