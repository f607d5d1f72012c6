// GPTQ (AutoGPTQ / GPTQModel): qweight I32 [in*bits/32, out] packed along the
// input dimension as an LSB-first bit stream, qzeros I32 [groups,
// out*bits/32], scales [groups, out], g_idx I32 [in]. Logical [out, in]:
//   x[n, k] = scales[g, n] * (q[k, n] - z[g, n]),  g = g_idx[k]
// with z stored minus one in checkpoint_format "gptq" (v1), as is in
// "gptq_v2".
#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "core/quant/conventions/context.h"
#include "core/quant/conventions/resolver_steps.h"
#include "core/util/status_macros.h"

namespace tensormorph::conventions {
namespace {

constexpr char kName[] = "GPTQ";

absl::Status ResolveOne(Context& ctx, const std::string& prefix,
                        const GptqConfig& c) {
  const int bits = c.bits;
  const bool v1 = c.v1, sym = c.sym, desc_act = c.desc_act;
  const std::string weight = prefix + "weight";
  auto packed = NeedPackedInt(ctx, kName, prefix);
  if (!packed.ok()) return packed.status();
  const StoredTensor* qw = packed->qweight;
  const StoredTensor* qz = packed->qzeros;
  const StoredTensor* sc = packed->scales;
  if (qw->shape[0] > INT64_MAX / 32 || (qw->shape[0] * 32) % bits != 0) {
    return Mismatch(kName,
                    absl::StrCat("'", qw->name, "' is ",
                                 DescribeStored(qw->dtype, qw->shape),
                                 " but must be I32[in*", bits, "/32, out]"));
  }
  const int64_t in = qw->shape[0] * 32 / bits;
  const int64_t out = qw->shape[1];
  // group_size -1: one group per row (a row of none, when empty).
  const int64_t g = c.group_size > 0 ? c.group_size : std::max<int64_t>(in, 1);
  const int64_t groups = CeilDiv(in, g);
  if (auto s = ExpectShape(
          kName, sc, {groups, out},
          absl::StrCat("group size ", g, " over in=", in, ", out=", out));
      !s.ok()) {
    return s;
  }
  if (out > INT64_MAX / 32 || (out * bits) % 32 != 0) {
    return Mismatch(
        kName,
        absl::StrCat("out=", out, " does not pack into 32-bit zero words"));
  }
  if (auto s =
          ExpectShape(kName, qz, {groups, out * bits / 32},
                      absl::StrCat(groups, " groups of ", bits, "-bit zeros"));
      !s.ok()) {
    return s;
  }
  AffineParams p = GroupedAlongIn(*packed, out, in, g);
  p.codes = {.tensor = qw,
             .kind = IntMatrix::Kind::kPackedAlongRows,
             .bits = bits,
             .rows = out,
             .cols = in,
             .transposed = true,
             .stored_cols = out};
  p.scale = {.tensor = sc, .rows = out, .cols = groups, .transposed = true};
  p.has_zero = true;
  p.zeros = {.tensor = qz,
             .kind = IntMatrix::Kind::kPackedAlongCols,
             .bits = bits,
             .rows = out,
             .cols = groups,
             .transposed = true,
             .stored_cols = out * bits / 32};
  if (v1) {
    p.zero_add = 1;
    p.zero_mask = (1u << bits) - 1;
  }
  bool act_order = desc_act;
  TM_ASSIGN_OR_RETURN(
      const StoredTensor* gi,
      ctx.ExpectIfPresent(kName, weight, prefix + "g_idx",
                          {DType::kI8, DType::kU8, DType::kI16, DType::kU16,
                           DType::kI32, DType::kU32, DType::kI64, DType::kU64},
                          ShapeRule::Exact({in}, absl::StrCat("in=", in))));
  if (gi != nullptr) {
    TM_ASSIGN_OR_RETURN(const std::vector<int64_t> idx,
                        ReadIntVector(kName, gi));
    for (int64_t k = 0; k < in; ++k) {
      if (idx[k] < 0 || idx[k] >= groups) {
        return Mismatch(kName,
                        absl::StrCat("'", gi->name, "'[", k, "] = ", idx[k],
                                     " is outside the ", groups, " groups"));
      }
      if (idx[k] != k / g) act_order = true;
    }
    if (act_order) p.g_idx.assign(idx.begin(), idx.end());
    p.parts.push_back(gi);
  } else if (desc_act) {
    return Mismatch(kName, absl::StrCat("desc_act is set but '", prefix,
                                        "g_idx' is missing"));
  }
  p.info = GroupedIntInfo(v1 ? "gptq" : "gptq_v2", bits, sym, g, act_order);
  return ctx.Add(kName, weight, std::move(p));
}

}  // namespace

absl::Status ResolveGptq(Context& ctx, const GptqConfig& config) {
  return ResolveEach(
      ctx, {"qweight"}, "weight",
      [&](const StoredTensor&, const std::string& prefix, absl::string_view) {
        return ResolveOne(ctx, prefix, config);
      });
}

}  // namespace tensormorph::conventions
