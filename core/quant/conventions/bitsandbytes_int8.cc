// bitsandbytes LLM.int8 (`load_in_8bit` saves): `X.weight` I8 [out, in],
// `X.SCB` F32 [out] (per-row absmax) and `X.weight_format` U8 [] (0 = row,
// the only layout current bitsandbytes saves or loads; col32, col_turing and
// col_ampere are refused as UNIMPLEMENTED by name). The logical `X.weight`
// decodes as core/quant/int8_rowwise_encoding.h states.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/quant/conventions/context.h"
#include "core/quant/int8_rowwise_encoding.h"
#include "core/util/error_reason.h"
#include "core/util/status_macros.h"

namespace tensormorph::conventions {
namespace {

constexpr char kName[] = "bitsandbytes LLM.int8";

// bitsandbytes.utils.LINEAR_8BIT_WEIGHTS_FORMAT_MAPPING, inverted.
const char* FormatName(int64_t f) {
  switch (f) {
    case 0:
      return "row";
    case 1:
      return "col32";
    case 2:
      return "col_turing";
    case 3:
      return "col_ampere";
    default:
      return "unknown";
  }
}

absl::Status ResolveOne(Context& ctx, const StoredTensor* scb,
                        const std::string& prefix) {
  const std::string weight = prefix + "weight";
  TM_ASSIGN_OR_RETURN(
      const StoredTensor* w,
      ctx.Expect(kName, weight, weight, {DType::kI8}, ShapeRule::Rank(2)));
  TM_RETURN_IF_ERROR(ExpectDType(kName, scb, {DType::kF32}));
  TM_RETURN_IF_ERROR(
      ExpectShape(kName, scb, {w->shape[0]},
                  absl::StrCat("one absmax per row of '", weight, "'")));
  Int8RowwiseParams p;
  p.weight = w;
  p.scb = scb;
  p.parts = {w, scb};
  TM_ASSIGN_OR_RETURN(
      const StoredTensor* format,
      ctx.ExpectIfPresent(kName, weight, prefix + "weight_format",
                          {DType::kU8, DType::kI8, DType::kI32, DType::kI64},
                          ShapeRule::Any()));
  if (format != nullptr) {
    TM_ASSIGN_OR_RETURN(const std::vector<int64_t> f,
                        ReadIntVector(kName, format));
    if (f.size() != 1) {
      return Mismatch(kName, absl::StrCat("'", format->name, "' holds ",
                                          f.size(), " values, not one"));
    }
    if (f[0] != 0) {
      return WithReason(
          absl::UnimplementedError(absl::StrCat(
              kName, ": '", format->name, "' is ", f[0], " (", FormatName(f[0]),
              "); only the row layout (0) is supported")),
          ErrorReason::kUnsupportedConvention,
          {{"convention", std::string(kName)}});
    }
    p.parts.push_back(format);
  }
  EncodingInfo& info = p.info;
  info.convention = "bitsandbytes";
  info.scheme = "int8 (LLM.int8, row absmax)";
  info.bits = 8;
  info.quantized = true;
  info.symmetric = true;
  info.axis = "out";
  info.block_elems = w->shape[1];
  info.granularity = "per-channel (row absmax)";
  auto encoding = MakeInt8RowwiseEncoding(std::move(p));
  if (!encoding.ok()) {
    return Mismatch(
        kName, absl::StrCat("'", weight, "': ", encoding.status().message()));
  }
  ctx.AddEncoded(weight, w->shape, *std::move(encoding));
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveBitsandbytesInt8(Context& ctx) {
  for (const StoredTensor& t : ctx.stored()) {
    if (!absl::EndsWith(t.name, ".SCB")) continue;
    const std::string prefix = t.name.substr(0, t.name.size() - 3);
    TM_RETURN_IF_ERROR(
        ctx.Tolerate(ResolveOne(ctx, &t, prefix), prefix + "weight"));
  }
  return absl::OkStatus();
}

}  // namespace tensormorph::conventions
