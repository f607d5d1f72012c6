// AutoAWQ, 4-bit. GEMM: qweight I32 [in, out/8] packed along the output
// dimension in the interleaved order [0,2,4,6,1,3,5,7] (slot i of word w holds
// column 8w + order[i]); qzeros I32 [in/G, out/8] the same way, no offset;
// scales [in/G, out]. GEMV: qweight I32 [out, in/8], scales [out, >=in/G],
// qzeros I32 [out, >=in/G/8], all sequential along the input dimension.
//   x[n, k] = scales(g, n) * (q(k, n) - z(g, n)),  g = k / G
#include <climits>

#include "absl/strings/str_cat.h"
#include "core/quant/conventions/context.h"
#include "core/quant/conventions/resolver_steps.h"
#include "core/util/status_macros.h"

namespace tensormorph::conventions {
namespace {

constexpr char kName[] = "AWQ";
// slot_of[j]: the word slot holding column 8w + j (inverse of the order).
constexpr std::array<uint8_t, 8> kGemmSlots = {0, 4, 1, 5, 2, 6, 3, 7};

absl::Status ResolveOne(Context& ctx, const std::string& prefix, int64_t g,
                        bool gemv, bool zero_point) {
  const std::string weight = prefix + "weight";
  auto packed = NeedPackedInt(ctx, kName, prefix);
  if (!packed.ok()) return packed.status();
  const StoredTensor* qw = packed->qweight;
  const StoredTensor* qz = packed->qzeros;
  const StoredTensor* sc = packed->scales;
  if (qw->shape[1] > INT64_MAX / 8) return Mismatch(kName, "qweight too wide");
  // GEMM stores [in, out/8], GEMV [out, in/8].
  const int64_t in = gemv ? qw->shape[1] * 8 : qw->shape[0];
  const int64_t out = gemv ? qw->shape[0] : qw->shape[1] * 8;
  AffineParams p = GroupedAlongIn(*packed, out, in, g);
  if (!gemv) {
    const int64_t groups = CeilDiv(in, g);
    if (auto s = ExpectShape(kName, sc, {groups, out},
                             absl::StrCat("group size ", g, " over in=", in));
        !s.ok()) {
      return s;
    }
    if (auto s = ExpectShape(kName, qz, {groups, out / 8},
                             absl::StrCat(groups, " groups of packed zeros"));
        !s.ok()) {
      return s;
    }
    p.codes = {.tensor = qw,
               .kind = IntMatrix::Kind::kPackedAlongCols,
               .bits = 4,
               .rows = out,
               .cols = in,
               .transposed = true,
               .stored_cols = out / 8,
               .interleaved = true,
               .slot_of = kGemmSlots};
    p.zeros = {.tensor = qz,
               .kind = IntMatrix::Kind::kPackedAlongCols,
               .bits = 4,
               .rows = out,
               .cols = groups,
               .transposed = true,
               .stored_cols = out / 8,
               .interleaved = true,
               .slot_of = kGemmSlots};
    p.scale = {.tensor = sc, .rows = out, .cols = groups, .transposed = true};
  } else {
    const int64_t groups = CeilDiv(in, g);
    if (sc->shape[0] != out || sc->shape[1] < groups) {
      return Mismatch(
          kName, absl::StrCat("'", sc->name, "' is ",
                              DescribeStored(sc->dtype, sc->shape),
                              " but GEMV needs [", out, ", >=", groups, "]"));
    }
    if (qz->shape[0] != out || qz->shape[1] < CeilDiv(groups, 8)) {
      return Mismatch(kName, absl::StrCat("'", qz->name, "' is ",
                                          DescribeStored(qz->dtype, qz->shape),
                                          " but GEMV needs [", out,
                                          ", >=", CeilDiv(groups, 8), "]"));
    }
    p.codes = {.tensor = qw,
               .kind = IntMatrix::Kind::kPackedAlongCols,
               .bits = 4,
               .rows = out,
               .cols = in,
               .stored_cols = in / 8};
    p.zeros = {.tensor = qz,
               .kind = IntMatrix::Kind::kPackedAlongCols,
               .bits = 4,
               .rows = out,
               .cols = groups,
               .stored_cols = qz->shape[1]};
    p.scale = {.tensor = sc, .rows = out, .cols = sc->shape[1]};
  }
  p.has_zero = zero_point;
  p.info = GroupedIntInfo(gemv ? "awq-gemv" : "awq-gemm", 4, !zero_point, g,
                          /*act_order=*/false);
  return ctx.Add(kName, weight, std::move(p));
}

}  // namespace

absl::Status ResolveAwq(Context& ctx, const AwqConfig& config) {
  return ResolveEach(
      ctx, {"qweight"}, "weight",
      [&](const StoredTensor&, const std::string& prefix, absl::string_view) {
        return ResolveOne(ctx, prefix, config.group_size, config.gemv,
                          config.zero_point);
      });
}

}  // namespace tensormorph::conventions
