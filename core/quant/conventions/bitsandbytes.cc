// bitsandbytes 4-bit (NF4, FP4): `weight` U8 [n/2, 1] with the first element
// of each byte in the high nibble; `weight.absmax` per block of `blocksize`
// (F32, or U8 codes under double quantization: absmax = nested_quant_map[c] *
// nested_absmax[b / nested_blocksize] + nested_offset); `weight.quant_map`
// [16] the codebook; the quant state JSON (type, blocksize, dtype, shape) is
// stored as a U8 tensor `weight.quant_state.bitsandbytes__<type>`.
//   x = quant_map[code] * absmax[block]
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/format/json_header.h"
#include "core/quant/conventions/context.h"

namespace tensormorph::conventions {
namespace {

constexpr char kName[] = "bitsandbytes";

std::vector<float> ReadFloats(const StoredTensor* t) {
  std::vector<float> out(static_cast<size_t>(t->num_elements));
  FloatMatrix m{.tensor = t, .rows = 1, .cols = t->num_elements};
  for (int64_t i = 0; i < t->num_elements; ++i) out[i] = m.Get(0, i);
  return out;
}

absl::Status ResolveOne(Context& ctx, const StoredTensor* state,
                        const std::string& weight, const std::string& type) {
  const std::string text(reinterpret_cast<const char*>(state->data.data()),
                         state->nbytes);
  auto json =
      ParseStrictJson(text, absl::StrCat(kName, ": '", state->name, "'"));
  if (!json.ok()) return json.status();
  const int64_t blocksize = JsonInt(*json, "blocksize", 64);
  std::vector<int64_t> shape;
  if (json->contains("shape") && (*json)["shape"].is_array()) {
    for (const auto& d : (*json)["shape"]) {
      if (d.is_number_integer()) shape.push_back(d.get<int64_t>());
    }
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (shape.empty() || n <= 0 || blocksize <= 0) {
    return Mismatch(kName, absl::StrCat("'", state->name,
                                        "' has no usable shape/blocksize"));
  }
  auto w_or = ctx.Need(kName, weight, weight);
  auto absmax_or = ctx.Need(kName, weight, weight + ".absmax");
  auto map_or = ctx.Need(kName, weight, weight + ".quant_map");
  for (const auto* s : {&w_or, &absmax_or, &map_or}) {
    if (!s->ok()) return s->status();
  }
  const StoredTensor* w = *w_or;
  const StoredTensor* absmax = *absmax_or;
  const StoredTensor* qmap = *map_or;
  if (auto s = ExpectDType(kName, w, {DType::kU8}); !s.ok()) return s;
  if (w->num_elements * 2 != n) {
    return Mismatch(
        kName, absl::StrCat("'", w->name, "' holds ", w->num_elements * 2,
                            " 4-bit codes but the quant state's shape has ", n,
                            " elements"));
  }
  if (auto s = ExpectShape(kName, qmap, {16}, "a 4-bit codebook"); !s.ok())
    return s;
  const int64_t blocks = CeilDiv(n, blocksize);
  if (auto s =
          ExpectShape(kName, absmax, {blocks},
                      absl::StrCat(n, " elements in blocks of ", blocksize));
      !s.ok()) {
    return s;
  }
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
  p.table = ReadFloats(qmap);
  p.float_codes = type == "fp4";
  p.groups = AffineParams::Groups::kFlatBlock;
  p.group_size = blocksize;
  p.parts = {w, absmax, qmap, state};
  const bool nested = ctx.Find(weight + ".nested_absmax") != nullptr;
  if (nested) {
    auto nabs = ctx.Need(kName, weight, weight + ".nested_absmax");
    auto nmap = ctx.Need(kName, weight, weight + ".nested_quant_map");
    if (!nmap.ok()) return nmap.status();
    if (auto s = ExpectDType(kName, absmax, {DType::kU8}); !s.ok()) return s;
    if (auto s = ExpectShape(kName, *nmap, {256}, "an 8-bit codebook"); !s.ok())
      return s;
    const int64_t nbs = JsonInt(*json, "nested_blocksize", 256);
    if (nbs <= 0) return Mismatch(kName, "nested_blocksize must be positive");
    if (auto s = ExpectShape(
            kName, *nabs, {CeilDiv(blocks, nbs)},
            absl::StrCat(blocks, " absmax values in blocks of ", nbs));
        !s.ok()) {
      return s;
    }
    p.scale_kind = AffineParams::Scales::kNestedAbsmax;
    p.scale_codes = {.tensor = absmax,
                     .kind = IntMatrix::Kind::kDirect,
                     .bits = 8,
                     .rows = 1,
                     .cols = blocks,
                     .stored_cols = blocks};
    p.nested_table = ReadFloats(*nmap);
    p.nested_absmax = {
        .tensor = *nabs, .rows = 1, .cols = (*nabs)->num_elements};
    p.nested_blocksize = nbs;
    if (json->contains("nested_offset") &&
        (*json)["nested_offset"].is_number()) {
      p.nested_offset = (*json)["nested_offset"].get<float>();
    }
    p.parts.push_back(*nabs);
    p.parts.push_back(*nmap);
  } else {
    if (auto s = ExpectDType(kName, absmax,
                             {DType::kF32, DType::kF16, DType::kBF16});
        !s.ok()) {
      return s;
    }
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
  ctx.Add(weight, std::move(p));
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveBitsandbytes(Context& ctx) {
  for (const StoredTensor& t : ctx.stored()) {
    for (const std::string type : {"nf4", "fp4"}) {
      const std::string suffix = ".quant_state.bitsandbytes__" + type;
      if (!absl::EndsWith(t.name, suffix)) continue;
      const std::string weight =
          t.name.substr(0, t.name.size() - suffix.size());
      if (auto s = ResolveOne(ctx, &t, weight, type); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace tensormorph::conventions
