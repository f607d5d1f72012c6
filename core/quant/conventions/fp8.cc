// FP8 checkpoints outside compressed-tensors: DeepSeek-V3 style blocks
// (`weight_scale_inv` [ceil(out/R), ceil(in/C)], multiplied despite its name,
// R x C from weight_block_size, possibly in another shard) and per-tensor or
// per-channel `weight_scale` (AutoFP8, ModelOpt). e4m3fn and e4m3fnuz.
//   x = fp8(q) * scale(group)
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/quant/conventions/context.h"
#include "core/util/checked_math.h"
#include "core/util/status_macros.h"

namespace tensormorph::conventions {
namespace {

constexpr char kName[] = "FP8";
constexpr std::initializer_list<DType> kScaleTypes = {DType::kF32, DType::kBF16,
                                                      DType::kF16};

absl::Status ResolveOne(Context& ctx, const StoredTensor* w,
                        const StoredTensor* scale, bool inverse,
                        const std::optional<std::array<int64_t, 2>>& block) {
  if (w->shape.size() != 2) {
    return Mismatch(kName, absl::StrCat("'", w->name, "' must be 2-D"));
  }
  const int64_t out = w->shape[0], in = w->shape[1];
  AffineParams p;
  p.shape = {out, in};
  p.rows = out;
  p.cols = in;
  p.codes = {.tensor = w,
             .kind = IntMatrix::Kind::kDirect,
             .bits = 8,
             .rows = out,
             .cols = in,
             .stored_cols = in};
  p.table = Fp8Table(w->dtype);
  p.float_codes = true;
  EncodingInfo& info = p.info;
  if (inverse) {
    if (!block) {
      return WithRule(
          Mismatch(kName, absl::StrCat("'", scale->name,
                                       "' needs weight_block_size [rows, "
                                       "cols] in the config")),
          "fp8-scale-layout");
    }
    const int64_t br = (*block)[0], bc = (*block)[1];
    const std::vector<int64_t> want = {CeilDiv(out, br), CeilDiv(in, bc)};
    if (auto s = ExpectShape(
            kName, scale, want,
            absl::StrCat("block ", br, "x", bc, " over [", out, ",", in, "]"));
        !s.ok()) {
      return WithRule(s, "fp8-scale-layout");
    }
    p.groups = AffineParams::Groups::kBlock;
    p.block_rows = br;
    p.block_cols = bc;
    p.scale = {.tensor = scale, .rows = want[0], .cols = want[1]};
    info.block_shape = {br, bc};
    info.block_elems = CheckedMul<int64_t>(br, bc).value_or(0);
    info.granularity = absl::StrCat("block ", br, "x", bc);
  } else if (scale->num_elements == 1) {
    p.groups = AffineParams::Groups::kTensor;
    p.scale = {.tensor = scale, .rows = 1, .cols = 1};
    info.granularity = "tensor";
  } else if (scale->num_elements == out &&
             (scale->shape == std::vector<int64_t>{out} ||
              scale->shape == std::vector<int64_t>{out, 1})) {
    p.groups = AffineParams::Groups::kChannel;
    p.scale = {.tensor = scale, .rows = out, .cols = 1};
    info.granularity = "channel along out";
    info.axis = "out";
  } else {
    return WithRule(
        Mismatch(kName,
                 absl::StrCat("'", scale->name, "' is ",
                              DescribeStored(scale->dtype, scale->shape),
                              " but a per-tensor or per-channel scale of '",
                              w->name, "' needs [1] or [", out, ",1]")),
        "fp8-scale-layout");
  }
  p.parts = {w, scale};
  info.convention = "fp8";
  info.scheme = absl::StrCat("fp8 ", DTypeName(w->dtype));
  info.bits = 8;
  info.quantized = true;
  return ctx.Add(kName, w->name, std::move(p));
}

// The FP8 weight `t` with its scale.
absl::Status ResolveWeight(Context& ctx, const StoredTensor& t,
                           const Fp8Config& config) {
  TM_ASSIGN_OR_RETURN(const StoredTensor* inv,
                      ctx.ExpectIfPresent(kName, t.name, t.name + "_scale_inv",
                                          kScaleTypes, ShapeRule::Any()));
  const StoredTensor* scale = inv;
  if (scale == nullptr) {
    TM_ASSIGN_OR_RETURN(scale,
                        ctx.ExpectIfPresent(kName, t.name, t.name + "_scale",
                                            kScaleTypes, ShapeRule::Any()));
  }
  if (scale == nullptr) {
    return WithRule(
        Mismatch(kName,
                 absl::StrCat("tensor '", t.name, "' is FP8 but has neither '",
                              t.name, "_scale_inv' nor '", t.name, "_scale'")),
        "missing-companion");
  }
  return ResolveOne(ctx, &t, scale, inv != nullptr, config.weight_block_size);
}

}  // namespace

absl::Status ResolveFp8(Context& ctx, const Fp8Config& config) {
  for (const StoredTensor& t : ctx.stored()) {
    if (t.dtype != DType::kF8E4M3 && t.dtype != DType::kF8E4M3Fnuz &&
        t.dtype != DType::kF8E5M2 && t.dtype != DType::kF8E5M2Fnuz) {
      continue;
    }
    TM_RETURN_IF_ERROR(ctx.Tolerate(ResolveWeight(ctx, t, config), t.name));
  }
  return absl::OkStatus();
}

}  // namespace tensormorph::conventions
