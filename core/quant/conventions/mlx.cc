// MLX (mlx-lm saves): a quantized module `M` stores `M.weight` U32
// [..., out, in*bits/32], `M.scales` [..., out, in/group_size] and, in
// affine mode, `M.biases` like the scales; together the logical `M.weight`
// [..., out, in] (core/quant/mlx_encoding.h has the layout and arithmetic).
// A module is quantized when its scales are stored (mlx-lm's load does the
// same); its parameters are its entry in config.json's "quantization", else
// the base entry.
#include <climits>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/quant/conventions/context.h"
#include "core/quant/mlx_encoding.h"
#include "core/util/status_macros.h"

namespace tensormorph::conventions {
namespace {

constexpr char kName[] = "MLX";

const char* ModeName(MlxMode m) {
  switch (m) {
    case MlxMode::kAffine:
      return "affine";
    case MlxMode::kMxfp4:
      return "mxfp4";
    case MlxMode::kMxfp8:
      return "mxfp8";
    case MlxMode::kNvfp4:
      return "nvfp4";
  }
  return "?";
}

const char* SchemeOf(MlxMode m) {
  switch (m) {
    case MlxMode::kMxfp4:
      return "mxfp4 (fp4 e2m1, e8m0 scales)";
    case MlxMode::kMxfp8:
      return "mxfp8 (fp8 e4m3, e8m0 scales)";
    case MlxMode::kNvfp4:
      return "nvfp4 (fp4 e2m1, e4m3 scales)";
    default:
      return "";
  }
}

absl::Status ResolveOne(Context& ctx, const std::string& module,
                        const StoredTensor* scales, const MlxQuant& q) {
  const std::string weight = module + ".weight";
  const bool affine = q.mode == MlxMode::kAffine;
  TM_ASSIGN_OR_RETURN(
      const StoredTensor* w,
      ctx.Expect(kName, weight, weight, {DType::kU32}, ShapeRule::Any()));
  const std::string says =
      absl::StrCat("the config's ", q.bits, "-bit ", ModeName(q.mode),
                   " in groups of ", q.group_size);
  const int64_t words = w->shape.empty() ? 0 : w->shape.back();
  if (w->shape.size() < 2 || words > INT64_MAX / 32 ||
      (words * 32) % q.bits != 0 || (words * 32 / q.bits) % q.group_size != 0) {
    return Mismatch(
        kName,
        absl::StrCat("'", w->name, "' is ", DescribeStored(w->dtype, w->shape),
                     ", which does not hold whole groups of ", says));
  }
  std::vector<int64_t> shape = w->shape;
  shape.back() = words * 32 / q.bits;
  std::vector<int64_t> want = w->shape;
  want.back() = shape.back() / q.group_size;
  const std::string why = absl::StrCat(says, " over in=", shape.back());
  TM_RETURN_IF_ERROR(ExpectDType(
      kName, scales,
      affine
          ? std::initializer_list<DType>{DType::kBF16, DType::kF16, DType::kF32}
      : q.mode == MlxMode::kNvfp4
          ? std::initializer_list<DType>{DType::kU8, DType::kF8E4M3}
          : std::initializer_list<DType>{DType::kU8, DType::kF8E8M0}));
  TM_RETURN_IF_ERROR(ExpectShape(kName, scales, want, why));
  const StoredTensor* biases = nullptr;
  if (affine) {
    TM_ASSIGN_OR_RETURN(
        biases, ctx.Expect(kName, weight, module + ".biases", {scales->dtype},
                           ShapeRule::Exact(want, why)));
  } else if (ctx.Has(module + ".biases")) {
    return Mismatch(kName, absl::StrCat("'", module, ".biases' is stored but ",
                                        says, " has no biases"));
  }
  MlxParams p;
  p.mode = static_cast<MlxParams::Mode>(q.mode);
  p.bits = q.bits;
  p.group_size = q.group_size;
  p.cols = shape.back();
  p.rows = words == 0 ? 0 : w->num_elements / words;
  p.shape = shape;
  p.weight = w;
  p.scales = scales;
  p.biases = biases;
  p.parts = {w, scales};
  if (biases != nullptr) p.parts.push_back(biases);
  EncodingInfo& info = p.info;
  info.convention = "mlx";
  info.scheme = affine ? absl::StrCat("int", q.bits, " affine (scale, bias)")
                       : SchemeOf(q.mode);
  info.bits = q.bits;
  info.quantized = true;
  info.symmetric = !affine;
  info.group_size = info.block_elems = q.group_size;
  info.axis = "in";
  info.granularity = absl::StrCat("group ", q.group_size, " along in");
  auto encoding = MakeMlxEncoding(std::move(p));
  if (!encoding.ok()) {
    return Mismatch(
        kName, absl::StrCat("'", weight, "': ", encoding.status().message()));
  }
  ctx.AddEncoded(weight, std::move(shape), *std::move(encoding));
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveMlx(Context& ctx, const MlxConfig& config) {
  static_assert(static_cast<int>(MlxMode::kNvfp4) ==
                static_cast<int>(MlxParams::Mode::kNvfp4));
  absl::flat_hash_map<std::string, std::optional<MlxQuant>> modules;
  for (const auto& [path, q] : config.modules) modules[path] = q;
  for (const StoredTensor& t : ctx.stored()) {
    if (!absl::EndsWith(t.name, ".scales")) continue;
    const std::string module = t.name.substr(0, t.name.size() - 7);
    auto it = modules.find(module);
    absl::Status s;
    if (!ctx.Has(module + ".weight")) {
      // Scales whose weight is not stored: an orphan, not a weight missing
      // its codes.
      TM_RETURN_IF_ERROR(ctx.Tolerate(
          WithRule(
              Mismatch(kName, absl::StrCat("'", t.name, "' has no weight: '",
                                           module, ".weight' is not stored")),
              "orphan-companion"),
          t.name));
      continue;
    }
    if (it != modules.end() && !it->second.has_value()) {
      // The config excludes a module that was quantized anyway.
      s = WithRule(Mismatch(kName, absl::StrCat(config.file, ": ", config.path,
                                                ".", module,
                                                " is false (not quantized) "
                                                "but '",
                                                t.name, "' is stored")),
                   "companion-shape");
    } else {
      s = ResolveOne(ctx, module, &t,
                     it != modules.end() ? *it->second : config.base);
    }
    TM_RETURN_IF_ERROR(ctx.Tolerate(s, module + ".weight"));
  }
  return absl::OkStatus();
}

}  // namespace tensormorph::conventions
