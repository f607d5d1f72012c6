// HQQ layers as transformers saves HQQLinear (hqq >= 0.2, an encoded state
// dict): `<module>.W_q` packed codes beside `scale` and `zero` (one per
// group) and the layer's metadata as small tensors: `shape` (I64 [2]),
// `nbits`, `group_size`, `axis` (U8 scalars), `packing`, `compute_dtype`,
// `unpack_view_dtype` (U8 text), flags (`view_as_float`, `quant_scale`,
// `quant_zero`, ...). One logical `<module>.weight` of `shape`, decoded by
// the HQQ encoding (core/quant/hqq_encoding.h). The stored metadata must
// agree with the config's weight_quant_params.
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/quant/conventions/context.h"
#include "core/quant/hqq_encoding.h"
#include "core/util/status_macros.h"

namespace tensormorph::conventions {
namespace {

constexpr char kName[] = "HQQ";
constexpr std::initializer_list<DType> kInts = {DType::kU8, DType::kI8,
                                                DType::kI32, DType::kI64};
constexpr std::initializer_list<DType> kFloats = {DType::kF16, DType::kBF16,
                                                  DType::kF32};
// Metadata HQQLinear.state_dict stores that decoding does not read: claimed
// as parts of the layer so they do not list as tensors of their own.
constexpr const char* kOtherMeta[] = {
    "channel_wise",     "optimize",           "round_zero",
    "offload_meta",     "encoded_state_dict", "stores_quant_config",
    "unpack_view_dtype"};

// The layer's config: the one for every layer, or the tag its name ends with.
const HqqWeightParams* ConfigOf(const HqqConfig& c, const std::string& module) {
  for (const HqqConfig::Layer& l : c.layers) {
    if (l.tag.empty() || module == l.tag ||
        absl::EndsWith(module, "." + l.tag)) {
      return &l.weights;
    }
  }
  return nullptr;
}

// A stored integer scalar `<prefix>key`, or nullopt when absent.
absl::StatusOr<std::optional<int64_t>> StoredInt(
    const Context& ctx, const std::string& weight, const std::string& name,
    std::vector<const StoredTensor*>* parts) {
  TM_ASSIGN_OR_RETURN(
      const StoredTensor* t,
      ctx.ExpectIfPresent(kName, weight, name, kInts, ShapeRule::Any()));
  if (t == nullptr) return std::nullopt;
  TM_ASSIGN_OR_RETURN(const std::vector<int64_t> v, ReadIntVector(kName, t));
  if (v.size() != 1) {
    return Mismatch(kName, absl::StrCat("'", name, "' holds ", v.size(),
                                        " values but must hold one"));
  }
  parts->push_back(t);
  return v[0];
}

// A stored text `<prefix>key` (U8 codes of its characters), or "".
absl::StatusOr<std::string> StoredText(
    const Context& ctx, const std::string& weight, const std::string& name,
    std::vector<const StoredTensor*>* parts) {
  TM_ASSIGN_OR_RETURN(const StoredTensor* t,
                      ctx.ExpectIfPresent(kName, weight, name, {DType::kU8},
                                          ShapeRule::Rank(1)));
  if (t == nullptr) return std::string();
  TM_ASSIGN_OR_RETURN(const absl::string_view text, ReadText(kName, t));
  parts->push_back(t);
  return std::string(text.substr(0, 64));
}

// `stored` (the layer's own metadata) must equal what the config says.
absl::Status Agree(const std::string& weight, const char* what,
                   std::optional<int64_t> stored, int64_t config,
                   const HqqWeightParams* c) {
  if (!stored || c == nullptr || *stored == config) return absl::OkStatus();
  return Mismatch(kName, absl::StrCat("'", weight, "' stores ", what, " ",
                                      *stored, " but the config's ",
                                      c->key_path, ".", what, " is ", config));
}

absl::Status ResolveOne(Context& ctx, const StoredTensor& wq,
                        const std::string& prefix, const HqqConfig& config) {
  const std::string module =
      prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1);
  const std::string weight = prefix + "weight";
  const HqqWeightParams* c = ConfigOf(config, module);
  HqqParams p;
  p.w_q = &wq;
  std::vector<const StoredTensor*> meta;
  TM_ASSIGN_OR_RETURN(p.scale, ctx.Expect(kName, weight, prefix + "scale",
                                          kFloats, ShapeRule::Any()));
  TM_ASSIGN_OR_RETURN(p.zero, ctx.Expect(kName, weight, prefix + "zero",
                                         kFloats, ShapeRule::Any()));
  TM_ASSIGN_OR_RETURN(
      const StoredTensor* shape_t,
      ctx.Expect(kName, weight, prefix + "shape", kInts, ShapeRule::Rank(1)));
  TM_ASSIGN_OR_RETURN(p.shape, ReadIntVector(kName, shape_t));
  for (int64_t d : p.shape) {
    if (d < 1) {
      return Mismatch(kName, absl::StrCat("'", shape_t->name,
                                          "' holds a "
                                          "dimension ",
                                          d, " < 1"));
    }
  }
  for (const char* flag : {"view_as_float", "quant_scale", "quant_zero"}) {
    TM_ASSIGN_OR_RETURN(auto v, StoredInt(ctx, weight, prefix + flag, &meta));
    if (v && *v != 0) {
      return absl::UnimplementedError(
          absl::StrCat("HQQ: '", weight, "' is stored with ", flag,
                       " set, which Tensormorph does not decode"));
    }
  }
  TM_ASSIGN_OR_RETURN(auto bits,
                      StoredInt(ctx, weight, prefix + "nbits", &meta));
  TM_ASSIGN_OR_RETURN(auto group,
                      StoredInt(ctx, weight, prefix + "group_size", &meta));
  TM_ASSIGN_OR_RETURN(auto axis,
                      StoredInt(ctx, weight, prefix + "axis", &meta));
  if (c != nullptr) {
    TM_RETURN_IF_ERROR(Agree(weight, "nbits", bits, c->bits, c));
    TM_RETURN_IF_ERROR(Agree(weight, "axis", axis, c->axis, c));
    if (c->group_size) {
      TM_RETURN_IF_ERROR(Agree(weight, "group_size", group, *c->group_size, c));
    }
  }
  p.bits = static_cast<int>(bits.value_or(c ? c->bits : 4));
  p.axis = static_cast<int>(axis.value_or(c ? c->axis : 1));
  const int64_t whole = p.shape.empty() ? 1
                        : p.axis == 1   ? p.shape.back()
                                        : p.shape.front();
  p.group_size = group.value_or(c && c->group_size ? *c->group_size : whole);
  TM_ASSIGN_OR_RETURN(const std::string packing,
                      StoredText(ctx, weight, prefix + "packing", &meta));
  const std::string want = p.bits == 3   ? "3bit_32"
                           : p.bits >= 5 ? "8bit_u8"
                                         : absl::StrCat(p.bits, "bit_u8");
  if (!packing.empty() && packing != want) {
    return Mismatch(kName, absl::StrCat("'", prefix, "packing' is \"", packing,
                                        "\" but ", p.bits,
                                        "-bit codes pack "
                                        "as \"",
                                        want, "\""));
  }
  TM_ASSIGN_OR_RETURN(const std::string compute,
                      StoredText(ctx, weight, prefix + "compute_dtype", &meta));
  if (compute.empty() || compute == "torch.float16") {
    p.compute = DType::kF16;  // Quantizer.dequantize's default
  } else if (compute == "torch.bfloat16") {
    p.compute = DType::kBF16;
  } else if (compute == "torch.float32") {
    p.compute = DType::kF32;
  } else {
    return Mismatch(kName,
                    absl::StrCat("'", prefix, "compute_dtype' is \"", compute,
                                 "\"; torch.float16, torch.bfloat16 or "
                                 "torch.float32 are decoded"));
  }
  for (const char* other : kOtherMeta) {
    TM_ASSIGN_OR_RETURN(const StoredTensor* t,
                        ctx.ExpectIfPresent(kName, weight, prefix + other, {},
                                            ShapeRule::Any()));
    if (t != nullptr) meta.push_back(t);
  }
  p.parts = {&wq, p.scale, p.zero, shape_t};
  p.parts.insert(p.parts.end(), meta.begin(), meta.end());
  EncodingInfo& info = p.info;
  info.convention = "hqq";
  info.scheme = absl::StrCat("int", p.bits, " asymmetric (",
                             DTypeName(p.compute), " arithmetic)");
  info.bits = p.bits;
  info.quantized = true;
  info.symmetric = false;
  info.group_size = info.block_elems = p.group_size;
  info.axis = p.axis == 1 ? "in" : "out";
  info.granularity =
      p.axis == 1 ? absl::StrCat("group ", p.group_size, " along in")
                  : absl::StrCat("group ", p.group_size,
                                 " strided (axis 0: a column of [",
                                 p.group_size, ", n/", p.group_size, "])");
  std::vector<int64_t> shape = p.shape;
  auto encoding = MakeHqqEncoding(std::move(p));
  if (!encoding.ok()) return encoding.status();
  ctx.AddEncoded(weight, std::move(shape), *std::move(encoding));
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveHqq(Context& ctx, const HqqConfig& config) {
  for (const StoredTensor& t : ctx.stored()) {
    if (t.name != "W_q" && !absl::EndsWith(t.name, ".W_q")) continue;
    const std::string prefix = t.name.substr(0, t.name.size() - 3);
    TM_RETURN_IF_ERROR(
        ctx.Tolerate(ResolveOne(ctx, t, prefix, config), prefix + "weight"));
  }
  return absl::OkStatus();
}

}  // namespace tensormorph::conventions
