// gpt-oss MXFP4: `X_blocks` U8 [..., n/32, 16] (two FP4 E2M1 codes per byte,
// the even element in the low nibble) and `X_scales` U8 [..., n/32] (E8M0,
// 2^(s-127)) make the logical tensor `X` [..., n].
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/quant/conventions/context.h"
#include "core/util/status_macros.h"

namespace tensormorph::conventions {
namespace {

constexpr char kName[] = "MXFP4 (gpt-oss)";

// The logical tensor `name` of `t` (its _blocks) and its _scales.
absl::Status ResolveOne(Context& ctx, const StoredTensor& t,
                        const std::string& name) {
  if (auto s = ExpectDType(kName, &t, {DType::kU8}); !s.ok()) return s;
  if (t.shape.size() < 2 || t.shape.back() != 16) {
    return Mismatch(kName, absl::StrCat("'", t.name, "' is ",
                                        DescribeStored(t.dtype, t.shape),
                                        " but must be U8[..., n/32, 16]"));
  }
  std::vector<int64_t> want(t.shape.begin(), t.shape.end() - 1);
  TM_ASSIGN_OR_RETURN(
      const StoredTensor* sc,
      ctx.Expect(
          kName, name, name + "_scales", {DType::kU8, DType::kF8E8M0},
          ShapeRule::Exact(want, "one E8M0 scale per 32-element block")));
  AffineParams p;
  p.shape.assign(t.shape.begin(), t.shape.end() - 2);
  const int64_t blocks = t.shape[t.shape.size() - 2];
  p.shape.push_back(blocks * 32);
  p.cols = blocks * 32;
  p.rows = p.cols == 0 ? 0 : t.num_elements * 2 / p.cols;
  p.codes = {.tensor = &t,
             .kind = IntMatrix::Kind::kNibbles,
             .bits = 4,
             .rows = p.rows,
             .cols = p.cols,
             .stored_cols = p.cols};
  p.table = E2M1Table();
  p.float_codes = true;
  p.groups = AffineParams::Groups::kGroup;
  p.group_size = 32;
  p.scale_kind = AffineParams::Scales::kE8M0;
  p.scale_codes = {.tensor = sc,
                   .kind = IntMatrix::Kind::kDirect,
                   .bits = 8,
                   .rows = p.rows,
                   .cols = blocks,
                   .stored_cols = blocks};
  p.scale.cols = blocks;
  p.parts = {&t, sc};
  EncodingInfo& info = p.info;
  info.convention = "mxfp4 (gpt-oss)";
  info.scheme = "mxfp4 (fp4 e2m1, e8m0 scales)";
  info.bits = 4;
  info.quantized = true;
  info.group_size = info.block_elems = 32;
  info.axis = "last";
  info.granularity = "group 32 along the last dimension";
  return ctx.Add(kName, name, std::move(p));
}

}  // namespace

absl::Status ResolveMxfp4GptOss(Context& ctx) {
  for (const StoredTensor& t : ctx.stored()) {
    if (!absl::EndsWith(t.name, "_blocks")) continue;
    const std::string name = t.name.substr(0, t.name.size() - 7);
    TM_RETURN_IF_ERROR(ctx.Tolerate(ResolveOne(ctx, t, name), name));
  }
  return absl::OkStatus();
}

}  // namespace tensormorph::conventions
