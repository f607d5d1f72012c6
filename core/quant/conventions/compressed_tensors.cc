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
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/quant/conventions/context.h"

namespace tensormorph::conventions {
namespace {

constexpr char kName[] = "compressed-tensors";

struct Scheme {
  std::string format;
  int bits = 8;
  std::string type = "int";  // "int" or "float"
  bool symmetric = true;
  std::string strategy = "tensor";
  int64_t group_size = 0;
  std::vector<int64_t> block = {};
  std::vector<std::string> targets;
};

bool Matches(const std::string& pattern, const std::string& module) {
  if (absl::StartsWith(pattern, "re:")) {
    try {
      return std::regex_match(module, std::regex(pattern.substr(3)));
    } catch (const std::regex_error&) {
      return false;
    }
  }
  // A class name ("Linear") matches every module; a module name itself.
  return pattern == module || absl::EndsWith(module, "." + pattern) ||
         (!pattern.empty() &&
          std::isupper(static_cast<unsigned char>(pattern[0])));
}

absl::StatusOr<std::vector<Scheme>> ParseSchemes(const nlohmann::json& q) {
  std::vector<Scheme> out;
  const std::string format = JsonString(q, "format", "int-quantized");
  if (!q.contains("config_groups") || !q["config_groups"].is_object()) {
    return Mismatch(kName, "quantization_config has no config_groups object");
  }
  for (const auto& [name, group] : q["config_groups"].items()) {
    if (!group.is_object() || !group.contains("weights") ||
        !group["weights"].is_object()) {
      continue;
    }
    const nlohmann::json& w = group["weights"];
    Scheme s;
    s.format = JsonString(group, "format", format);
    s.bits = static_cast<int>(JsonInt(w, "num_bits", 8));
    s.type = JsonString(w, "type", "int");
    s.symmetric = JsonBool(w, "symmetric", true);
    s.strategy = JsonString(w, "strategy", "tensor");
    s.group_size = JsonInt(w, "group_size", 0);
    if (w.contains("block_structure") && w["block_structure"].is_array() &&
        w["block_structure"].size() == 2) {
      s.block = {w["block_structure"][0].get<int64_t>(),
                 w["block_structure"][1].get<int64_t>()};
    }
    if (group.contains("targets") && group["targets"].is_array()) {
      for (const auto& t : group["targets"]) {
        if (t.is_string()) s.targets.push_back(t.get<std::string>());
      }
    }
    if (s.bits < 2 || s.bits > 8) {
      return absl::UnimplementedError(absl::StrCat(
          "compressed-tensors with ", s.bits, "-bit weights is not supported"));
    }
    out.push_back(std::move(s));
  }
  return out;
}

// Sets the groups and the expected scale shape of a strategy.
absl::Status ApplyStrategy(const Scheme& s, const StoredTensor* scale,
                           int64_t out, int64_t in, AffineParams* p,
                           std::vector<int64_t>* scale_shape) {
  EncodingInfo& info = p->info;
  if (s.strategy == "tensor") {
    p->groups = AffineParams::Groups::kTensor;
    *scale_shape =
        scale->shape.empty() ? std::vector<int64_t>{} : std::vector<int64_t>{1};
    if (scale->shape.size() == 2) *scale_shape = {1, 1};
    info.granularity = "tensor";
    return absl::OkStatus();
  }
  if (s.strategy == "channel") {
    p->groups = AffineParams::Groups::kChannel;
    *scale_shape = {out, 1};
    if (scale->shape.size() == 1) *scale_shape = {out};
    info.granularity = "channel along out";
    info.axis = "out";
    return absl::OkStatus();
  }
  if (s.strategy == "group" || s.strategy == "tensor_group") {
    if (s.group_size <= 0)
      return Mismatch(kName, "strategy 'group' without a group_size");
    p->groups = AffineParams::Groups::kGroup;
    p->group_size = s.group_size;
    *scale_shape = {out, CeilDiv(in, s.group_size)};
    info.group_size = s.group_size;
    info.block_elems = s.group_size;
    info.axis = "in";
    info.granularity = absl::StrCat("group ", s.group_size, " along in");
    return absl::OkStatus();
  }
  if (s.strategy == "block") {
    if (s.block.size() != 2 || s.block[0] <= 0 || s.block[1] <= 0) {
      return Mismatch(
          kName, "strategy 'block' without a [rows, cols] block_structure");
    }
    p->groups = AffineParams::Groups::kBlock;
    p->block_rows = s.block[0];
    p->block_cols = s.block[1];
    *scale_shape = {CeilDiv(out, s.block[0]), CeilDiv(in, s.block[1])};
    info.block_shape = s.block;
    info.block_elems = s.block[0] * s.block[1];
    info.granularity = absl::StrCat("block ", s.block[0], "x", s.block[1]);
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(
      "compressed-tensors strategy '", s.strategy, "' is not supported"));
}

absl::Status ResolveOne(Context& ctx, const Scheme& s,
                        const std::string& prefix) {
  const std::string weight = prefix + "weight";
  const bool packed = absl::StrContains(s.format, "pack-quantized");
  auto scale_or = ctx.Need(kName, weight, weight + "_scale");
  if (!scale_or.ok()) return scale_or.status();
  const StoredTensor* scale = *scale_or;
  AffineParams p;
  int64_t out = 0, in = 0;
  const StoredTensor* codes = nullptr;
  if (s.format == "pack-quantized") {
    auto packed_or = ctx.Need(kName, weight, weight + "_packed");
    auto shape_or = ctx.Need(kName, weight, weight + "_shape");
    if (!packed_or.ok()) return packed_or.status();
    if (!shape_or.ok()) return shape_or.status();
    codes = *packed_or;
    if (auto st = ExpectDType(kName, codes, {DType::kI32}); !st.ok()) return st;
    const std::vector<int64_t> shape = ReadInts(*shape_or);
    if (shape.size() != 2 || shape[0] <= 0 || shape[1] <= 0) {
      return Mismatch(
          kName, absl::StrCat("'", (*shape_or)->name, "' must hold [out, in]"));
    }
    out = shape[0];
    in = shape[1];
    const int per_word = 32 / s.bits;
    if (auto st =
            ExpectShape(kName, codes, {out, CeilDiv(in, per_word)},
                        absl::StrCat("weight_shape [", out, ",", in, "] at ",
                                     per_word, " codes per int32"));
        !st.ok()) {
      return st;
    }
    p.codes = {.tensor = codes,
               .kind = IntMatrix::Kind::kPackedAlongCols,
               .bits = s.bits,
               .per_word = per_word,
               .rows = out,
               .cols = in,
               .stored_cols = CeilDiv(in, per_word)};
    p.code_offset = int64_t{1} << (s.bits - 1);
    p.parts = {codes, *shape_or, scale};
  } else if (s.format == "nvfp4-pack-quantized" ||
             s.format == "mxfp4-pack-quantized") {
    auto packed_or = ctx.Need(kName, weight, weight + "_packed");
    if (!packed_or.ok()) return packed_or.status();
    codes = *packed_or;
    if (auto st = ExpectDType(kName, codes, {DType::kU8}); !st.ok()) return st;
    if (codes->shape.size() != 2)
      return Mismatch(kName, absl::StrCat("'", codes->name, "' must be 2-D"));
    out = codes->shape[0];
    in = codes->shape[1] * 2;
    p.codes = {.tensor = codes,
               .kind = IntMatrix::Kind::kNibbles,
               .bits = 4,
               .rows = out,
               .cols = in,
               .stored_cols = in};
    p.table = E2M1Table();
    p.float_codes = true;
    p.parts = {codes, scale};
  } else if (s.format == "int-quantized" || s.format == "naive-quantized" ||
             s.format == "float-quantized") {
    codes = ctx.Find(weight);
    if (codes == nullptr) {
      return Mismatch(
          kName, absl::StrCat("'", scale->name, "' has no '", weight, "'"));
    }
    if (codes->shape.size() != 2)
      return Mismatch(kName, absl::StrCat("'", codes->name, "' must be 2-D"));
    out = codes->shape[0];
    in = codes->shape[1];
    if (s.type == "float") {
      if (auto st = ExpectDType(kName, codes,
                                {DType::kF8E4M3, DType::kF8E5M2,
                                 DType::kF8E4M3Fnuz, DType::kF8E5M2Fnuz});
          !st.ok()) {
        return st;
      }
      p.table = Fp8Table(codes->dtype);
      p.float_codes = true;
      p.codes = {.tensor = codes,
                 .kind = IntMatrix::Kind::kDirect,
                 .bits = 8,
                 .rows = out,
                 .cols = in,
                 .stored_cols = in};
    } else {
      if (auto st = ExpectDType(
              kName, codes, {DType::kI8, DType::kU8, DType::kI16, DType::kI32});
          !st.ok()) {
        return st;
      }
      const int width = GetDTypeInfo(codes->dtype).block_bytes * 8;
      p.codes = {.tensor = codes,
                 .kind = IntMatrix::Kind::kDirect,
                 .bits = width,
                 .rows = out,
                 .cols = in,
                 .stored_cols = in};
      p.signed_codes = codes->dtype != DType::kU8;
    }
    p.parts = {codes, scale};
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "compressed-tensors format '", s.format, "' is not supported"));
  }
  p.shape = {out, in};
  p.rows = out;
  p.cols = in;

  std::vector<int64_t> scale_shape;
  if (auto st = ApplyStrategy(s, scale, out, in, &p, &scale_shape); !st.ok())
    return st;
  if (s.format == "nvfp4-pack-quantized" ||
      s.format == "mxfp4-pack-quantized") {
    const int64_t g = s.format[0] == 'n' ? 16 : 32;
    p.groups = AffineParams::Groups::kGroup;
    p.group_size = g;
    scale_shape = {out, CeilDiv(in, g)};
    p.info.group_size = p.info.block_elems = g;
    p.info.axis = "in";
    p.info.granularity = absl::StrCat("group ", g, " along in");
  }
  if (auto st = ExpectShape(
          kName, scale, scale_shape,
          absl::StrCat(p.info.granularity, " over [", out, ",", in, "]"));
      !st.ok()) {
    return st;
  }
  const int64_t scale_cols = scale_shape.size() == 2 ? scale_shape[1] : 1;
  const int64_t scale_rows = scale_shape.empty() ? 1 : scale_shape[0];
  if (s.format == "mxfp4-pack-quantized") {
    if (auto st = ExpectDType(kName, scale, {DType::kU8, DType::kF8E8M0});
        !st.ok())
      return st;
    p.scale_kind = AffineParams::Scales::kE8M0;
    p.scale_codes = {.tensor = scale,
                     .kind = IntMatrix::Kind::kDirect,
                     .bits = 8,
                     .rows = scale_rows,
                     .cols = scale_cols,
                     .stored_cols = scale_cols};
  } else {
    p.scale = {.tensor = scale, .rows = scale_rows, .cols = scale_cols};
  }
  if (s.format == "nvfp4-pack-quantized") {
    auto global = ctx.Need(kName, weight, weight + "_global_scale");
    if (!global.ok()) return global.status();
    float g = 0;
    FloatMatrix gm{.tensor = *global, .rows = 1, .cols = 1};
    g = gm.Get(0, 0);
    if (!(g != 0)) {
      return Mismatch(kName, absl::StrCat("'", (*global)->name, "' is ", g,
                                          " but must be a non-zero divisor"));
    }
    p.scale_divisor = g;
    p.parts.push_back(*global);
  }
  if (const StoredTensor* gi = ctx.Find(weight + "_g_idx")) {
    if (p.groups != AffineParams::Groups::kGroup) {
      return Mismatch(kName,
                      absl::StrCat("'", gi->name, "' needs strategy 'group'"));
    }
    if (auto st = ExpectShape(kName, gi, {in}, absl::StrCat("in=", in));
        !st.ok())
      return st;
    const std::vector<int64_t> idx = ReadInts(gi);
    for (int64_t k = 0; k < in; ++k) {
      if (idx[k] < 0 || idx[k] >= scale_cols) {
        return Mismatch(
            kName, absl::StrCat("'", gi->name, "'[", k, "] = ", idx[k],
                                " is outside the ", scale_cols, " groups"));
      }
    }
    p.g_idx.assign(idx.begin(), idx.end());
    p.info.act_order = true;
    p.info.granularity += ", act-order";
    p.parts.push_back(gi);
  }
  if (!s.symmetric && s.type == "int") {
    auto zp = ctx.Need(kName, weight, weight + "_zero_point");
    if (!zp.ok()) return zp.status();
    const StoredTensor* z = *zp;
    if (packed) {
      const int per_word = 32 / s.bits;
      if (auto st = ExpectDType(kName, z, {DType::kI32}); !st.ok()) return st;
      if (auto st =
              ExpectShape(kName, z, {CeilDiv(scale_rows, per_word), scale_cols},
                          "zero points packed along dim 0");
          !st.ok()) {
        return st;
      }
      p.zeros = {.tensor = z,
                 .kind = IntMatrix::Kind::kPackedAlongRows,
                 .bits = s.bits,
                 .per_word = per_word,
                 .rows = scale_rows,
                 .cols = scale_cols,
                 .stored_cols = scale_cols};
      p.zero_offset = int64_t{1} << (s.bits - 1);
    } else {
      if (auto st = ExpectShape(kName, z, scale_shape,
                                "zero points shaped like the scales");
          !st.ok()) {
        return st;
      }
      if (auto st =
              ExpectDType(kName, z, {DType::kI8, DType::kU8, DType::kI32});
          !st.ok()) {
        return st;
      }
      const int width = GetDTypeInfo(z->dtype).block_bytes * 8;
      p.zeros = {.tensor = z,
                 .kind = IntMatrix::Kind::kDirect,
                 .bits = width,
                 .rows = scale_rows,
                 .cols = scale_cols,
                 .stored_cols = scale_cols};
      p.signed_zeros = z->dtype != DType::kU8;
    }
    p.has_zero = true;
    p.parts.push_back(z);
  }
  EncodingInfo& info = p.info;
  info.convention = "compressed-tensors";
  info.bits =
      s.format == "nvfp4-pack-quantized" || s.format == "mxfp4-pack-quantized"
          ? 4
          : s.bits;
  info.quantized = true;
  info.symmetric = !p.has_zero;
  if (s.format == "nvfp4-pack-quantized") {
    info.scheme = "nvfp4 (fp4 e2m1, fp8 scales / global)";
  } else if (s.format == "mxfp4-pack-quantized") {
    info.scheme = "mxfp4 (fp4 e2m1, e8m0 scales)";
  } else if (s.type == "float") {
    info.scheme = absl::StrCat("fp8 ", DTypeName(codes->dtype));
  } else {
    info.scheme =
        absl::StrCat("int", s.bits, p.has_zero ? " asymmetric" : " symmetric");
  }
  ctx.Add(weight, std::move(p));
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveCompressedTensors(Context& ctx) {
  auto schemes = ParseSchemes(ctx.config());
  if (!schemes.ok()) return schemes.status();
  if (schemes->empty()) return absl::OkStatus();
  for (const StoredTensor& t : ctx.stored()) {
    std::string prefix;
    if (absl::EndsWith(t.name, "weight_scale")) {
      prefix =
          t.name.substr(0, t.name.size() - std::string("weight_scale").size());
    } else {
      continue;
    }
    const std::string module =
        prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1);
    auto targets = [&module](const Scheme& s) {
      for (const std::string& target : s.targets) {
        if (Matches(target, module)) return true;
      }
      return false;
    };
    auto it = std::find_if(schemes->begin(), schemes->end(), targets);
    const Scheme& scheme = it != schemes->end() ? *it : schemes->front();
    if (auto s = ResolveOne(ctx, scheme, prefix); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace tensormorph::conventions
