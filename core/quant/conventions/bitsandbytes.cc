// bitsandbytes 4-bit (NF4, FP4): `weight` U8 [n/2, 1] with the first element
// of each byte in the high nibble; `weight.absmax` per block of `blocksize`
// (F32, or U8 codes under double quantization: absmax = nested_quant_map[c] *
// nested_absmax[b / nested_blocksize] + nested_offset); `weight.quant_map`
// [16] the codebook; the quant state JSON (type, blocksize, dtype, shape) is
// stored as a U8 tensor `weight.quant_state.bitsandbytes__<type>`.
//   x = quant_map[code] * absmax[block]
#include <climits>

#include "absl/strings/str_cat.h"
#include "core/quant/conventions/context.h"
#include "core/quant/conventions/resolver_steps.h"
#include "core/util/checked_math.h"
#include "core/util/status_macros.h"

namespace tensormorph::conventions {
namespace {

constexpr char kName[] = "bitsandbytes";

absl::Status ResolveOne(Context& ctx, const StoredTensor* state,
                        const std::string& weight, const std::string& type) {
  TM_ASSIGN_OR_RETURN(const absl::string_view text, ReadText(kName, state));
  TM_ASSIGN_OR_RETURN(const BnbQuantState qs,
                      ParseBnbQuantState(text, state->name));
  const std::vector<int64_t>& shape = qs.shape;
  const int64_t blocksize = qs.blocksize;
  const std::optional<int64_t> n_or = CheckedProduct(shape);
  if (!n_or) {
    return Mismatch(kName,
                    absl::StrCat("'", state->name, "': shape overflows int64"));
  }
  const int64_t n = *n_or;
  TM_ASSIGN_OR_RETURN(
      const StoredTensor* w,
      ctx.Expect(kName, weight, weight, {DType::kU8}, ShapeRule::Any()));
  if (w->num_elements > INT64_MAX / 2 || w->num_elements * 2 != n) {
    return Mismatch(kName,
                    absl::StrCat("'", w->name, "' holds ", w->num_elements,
                                 " bytes of 4-bit codes but the quant state's "
                                 "shape has ",
                                 n, " elements"));
  }
  TM_ASSIGN_OR_RETURN(const StoredTensor* qmap,
                      ctx.Expect(kName, weight, weight + ".quant_map", {},
                                 ShapeRule::Exact({16}, "a 4-bit codebook")));
  const int64_t blocks = CeilDiv(n, blocksize);
  const bool nested = ctx.Has(weight + ".nested_absmax");
  TM_ASSIGN_OR_RETURN(
      const StoredTensor* absmax,
      ctx.Expect(
          kName, weight, weight + ".absmax",
          nested ? std::initializer_list<DType>{DType::kU8}
                 : std::initializer_list<DType>{DType::kF32, DType::kF16,
                                                DType::kBF16},
          ShapeRule::Exact({blocks}, absl::StrCat(n, " elements in blocks of ",
                                                  blocksize))));
  AffineParams p;
  p.shape = shape;
  p.cols = shape.back();
  p.rows = n / p.cols;
  p.codes = {.tensor = w,
             .kind = IntMatrix::Kind::kNibbles,
             .bits = 4,
             .rows = p.rows,
             .cols = p.cols,
             .stored_cols = p.cols,
             .high_nibble_first = true};
  TM_ASSIGN_OR_RETURN(p.table, ReadFloatVector(kName, qmap));
  p.float_codes = type == "fp4";
  p.groups = AffineParams::Groups::kFlatBlock;
  p.group_size = blocksize;
  p.parts = {w, absmax, qmap, state};
  if (nested) {
    const int64_t nbs = qs.nested_blocksize;
    TM_ASSIGN_OR_RETURN(
        const StoredTensor* nmap,
        ctx.Expect(kName, weight, weight + ".nested_quant_map", {},
                   ShapeRule::Exact({256}, "an 8-bit codebook")));
    TM_ASSIGN_OR_RETURN(
        const StoredTensor* nabs,
        ctx.Expect(
            kName, weight, weight + ".nested_absmax",
            {DType::kF32, DType::kF16, DType::kBF16},
            ShapeRule::Exact(
                {CeilDiv(blocks, nbs)},
                absl::StrCat(blocks, " absmax values in blocks of ", nbs))));
    p.scale_kind = AffineParams::Scales::kNestedAbsmax;
    p.scale_codes = {.tensor = absmax,
                     .kind = IntMatrix::Kind::kDirect,
                     .bits = 8,
                     .rows = 1,
                     .cols = blocks,
                     .stored_cols = blocks};
    TM_ASSIGN_OR_RETURN(p.nested_table, ReadFloatVector(kName, nmap));
    p.nested_absmax = {.tensor = nabs, .rows = 1, .cols = nabs->num_elements};
    p.nested_blocksize = nbs;
    p.nested_offset = qs.nested_offset;
    p.parts.push_back(nabs);
    p.parts.push_back(nmap);
  } else {
    p.scale = {.tensor = absmax, .rows = 1, .cols = blocks};
  }
  p.scale.cols = blocks;
  EncodingInfo& info = p.info;
  info.convention = "bitsandbytes";
  info.scheme =
      nested ? absl::StrCat(type, " (double-quantized absmax)") : type;
  info.bits = 4;
  info.quantized = true;
  info.group_size = info.block_elems = blocksize;
  info.axis = "flat";
  info.granularity = absl::StrCat("block ", blocksize, " (flat)");
  return ctx.Add(kName, weight, std::move(p));
}

}  // namespace

absl::Status ResolveBitsandbytes(Context& ctx) {
  constexpr absl::string_view kNf4 = ".quant_state.bitsandbytes__nf4";
  constexpr absl::string_view kFp4 = ".quant_state.bitsandbytes__fp4";
  return ResolveEach(ctx, {kNf4, kFp4}, "",
                     [&](const StoredTensor& state, const std::string& weight,
                         absl::string_view suffix) {
                       return ResolveOne(ctx, &state, weight,
                                         suffix == kNf4 ? "nf4" : "fp4");
                     });
}

}  // namespace tensormorph::conventions
