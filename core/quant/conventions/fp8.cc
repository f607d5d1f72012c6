// FP8 checkpoints outside compressed-tensors: DeepSeek-V3 style blocks
// (`weight_scale_inv` [ceil(out/R), ceil(in/C)], multiplied despite its name,
// R x C from weight_block_size, possibly in another shard) and per-tensor or
// per-channel `weight_scale` (AutoFP8, ModelOpt). e4m3fn and e4m3fnuz.
//   x = fp8(q) * scale(group)
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/quant/conventions/context.h"

namespace tensormorph::conventions {
namespace {

constexpr char kName[] = "FP8";

absl::Status ResolveOne(Context& ctx, const StoredTensor* w,
                        const StoredTensor* scale, bool inverse,
                        const std::vector<int64_t>& block) {
  if (w->shape.size() != 2) {
    return Mismatch(kName, absl::StrCat("'", w->name, "' must be 2-D"));
  }
  if (auto s =
          ExpectDType(kName, scale, {DType::kF32, DType::kBF16, DType::kF16});
      !s.ok()) {
    return s;
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
    if (block.size() != 2 || block[0] <= 0 || block[1] <= 0) {
      return Mismatch(
          kName,
          absl::StrCat("'", scale->name,
                       "' needs weight_block_size [rows, cols] in the config"));
    }
    const std::vector<int64_t> want = {CeilDiv(out, block[0]),
                                       CeilDiv(in, block[1])};
    if (auto s = ExpectShape(kName, scale, want,
                             absl::StrCat("block ", block[0], "x", block[1],
                                          " over [", out, ",", in, "]"));
        !s.ok()) {
      return s;
    }
    p.groups = AffineParams::Groups::kBlock;
    p.block_rows = block[0];
    p.block_cols = block[1];
    p.scale = {.tensor = scale, .rows = want[0], .cols = want[1]};
    info.block_shape = block;
    info.block_elems = block[0] * block[1];
    info.granularity = absl::StrCat("block ", block[0], "x", block[1]);
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
    return Mismatch(kName,
                    absl::StrCat("'", scale->name, "' is ",
                                 DescribeStored(scale->dtype, scale->shape),
                                 " but a per-tensor or per-channel scale of '",
                                 w->name, "' needs [1] or [", out, ",1]"));
  }
  p.parts = {w, scale};
  info.convention = "fp8";
  info.scheme = absl::StrCat("fp8 ", DTypeName(w->dtype));
  info.bits = 8;
  info.quantized = true;
  ctx.Add(w->name, std::move(p));
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveFp8(Context& ctx) {
  std::vector<int64_t> block;
  const nlohmann::json& q = ctx.config();
  if (q.is_object() && q.contains("weight_block_size") &&
      q["weight_block_size"].is_array()) {
    for (const auto& v : q["weight_block_size"]) {
      if (v.is_number_integer()) block.push_back(v.get<int64_t>());
    }
  }
  for (const StoredTensor& t : ctx.stored()) {
    if (t.dtype != DType::kF8E4M3 && t.dtype != DType::kF8E4M3Fnuz &&
        t.dtype != DType::kF8E5M2 && t.dtype != DType::kF8E5M2Fnuz) {
      continue;
    }
    const StoredTensor* inv = ctx.Find(t.name + "_scale_inv");
    const StoredTensor* scale =
        inv != nullptr ? inv : ctx.Find(t.name + "_scale");
    if (scale == nullptr) {
      return Mismatch(
          kName, absl::StrCat("tensor '", t.name, "' is FP8 but has neither '",
                              t.name, "_scale_inv' nor '", t.name, "_scale'"));
    }
    if (auto s = ResolveOne(ctx, &t, scale, inv != nullptr, block); !s.ok())
      return s;
  }
  return absl::OkStatus();
}

}  // namespace tensormorph::conventions
