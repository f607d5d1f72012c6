// NVIDIA ModelOpt (TensorRT-Model-Optimizer) checkpoints, as its HF export
// writes them and vLLM's modelopt.py loads them. Per quantized Linear
// `<module>.weight` [out, in]:
//  - FP8: `weight` F8_E4M3, `weight_scale` F32 [] or [1] (per tensor);
//    FP8_PER_CHANNEL_PER_TOKEN: [out] or [out,1]; FP8_PB_WO: 128x128 blocks,
//    [out/128, 1, in/128, 1] as ModelOpt exports it, or [out/128, in/128].
//      x = fp8(q) * scale                        (float32, one rounding)
//  - NVFP4 (also NVFP4_AWQ, W4A16_NVFP4): `weight` U8 [out, in/2], two E2M1
//    codes a byte, the even element in the low nibble (NVFP4QTensor packs
//    q[1::2] << 4 | q[0::2]); `weight_scale` F8_E4M3 [out, in/16];
//    `weight_scale_2` F32 [] or [1] (amax / (6 * 448)), possibly in another
//    shard; `input_scale` acts on the activations and is left a tensor of
//    its own (AWQ's `pre_quant_scale`: below).
//      x = e2m1(q) * (float32(weight_scale) * weight_scale_2)
//    in float32, two roundings, the order of NVFP4QTensor.dequantize
//    (modelopt/torch/quantization/qtensor/nvfp4_tensor.py: the per-block
//    scale is q_per_block_scale.to(float32) * double_scale, then the
//    unpacked e2m1 values, a float32 table, are multiplied by it; the final
//    .to(dtype) casts to the source model's dtype, which the checkpoint does
//    not record: Tensormorph returns the float32 values before that cast).
//  - MXFP8: `weight` F8_E4M3, `weight_scale` U8 E8M0 [out, in/32]:
//      x = fp8(q) * 2^(e - 127)                  (exact in float32)
//  - W4A8_AWQ: `weight` U8 [out/2, in], signed INT4 codes in [-8, 7] paired
//    along out: byte (k, j) holds rows 2k (low nibble) and 2k+1 (high) of
//    column j (export/quant_utils.py pack_int4_in_uint8: q.T reshaped to
//    [in, out/2, 2], val0 | val1 << 4, transposed back); `weight_scale` F32
//    [out, in/group] = amax / 7 per group of `group_size` (128 in
//    W4A8_AWQ_BETA_CFG; get_weight_scaling_factor of the SequentialQuantizer's
//    INT4 stage); `weight_scale_2` F32 [] = amax / 448 of its FP8 stage;
//    `input_scale` F32 [].
//      x = float32(q) * weight_scale              (float32, one rounding)
//    the dequantization of TensorRT-LLM's W4A8_AWQ reference
//    (tests/unittest/_torch/modules/moe quantize utils: (q.float() *
//    scale.float()) / weight_scale_2, its GEMM output times weight_scale_2).
//    Its kernel (_torch/modules/linear.py W4A8_AWQ_LinearMethod) holds
//    fp16(weight_scale) / weight_scale_2 and rounds each q * that to FP8
//    inside the GEMM; that rounding, like the final cast to the model's
//    dtype, is the kernel's, not the checkpoint's, and is not applied.
//  - AWQ's `pre_quant_scale` [in] (NVFP4_AWQ, W4A8_AWQ): ModelOpt's AWQ
//    (quantization/model_calib.py apply_pre_quant_scale_and_smooth) stores
//    weight * (1 / pre_quant_scale)[None, :] and multiplies activations by
//    pre_quant_scale, so the weight a layer computes with, and the one to
//    compare with the source, is
//      x = dequant(q) * pre_quant_scale[in]     (float32, one more rounding)
//    Its export folds most of them away (fuse_prequant_layernorm into the
//    previous norm for q/k/v and gate/up; fuse_prequant_to_linear for
//    NVFP4_AWQ's o_proj/down_proj into v/up_proj): a weight without one is
//    the weight the layer computes with, and TensorRT-LLM loads it so.
// FP8 in float32 is the product vLLM's and TensorRT-LLM's FP8 GEMMs apply
// (ModelOpt's FP8QTensor.dequantize(dtype) would round scale and product to
// the model's dtype, again unrecorded); it is what these checkpoints read
// as when quant_method "modelopt" meant plain FP8 here.
// Modules matching `exclude_modules` (fnmatch wildcards, as vLLM matches
// them) are not quantized; MIXED_PRECISION names each quantized module's
// algo in `quantized_layers`.
#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/quant/conventions/context.h"
#include "core/util/checked_math.h"
#include "core/util/error_reason.h"
#include "core/util/status_macros.h"

namespace tensormorph::conventions {
namespace {

constexpr char kName[] = "ModelOpt";
constexpr int64_t kPbBlock = 128;  // FP8_PB_WO's block, fixed by ModelOpt
constexpr std::initializer_list<DType> kScalarTypes = {
    DType::kF32, DType::kBF16, DType::kF16};

bool IsNvfp4(ModelOptAlgo a) {
  return a == ModelOptAlgo::kNvfp4 || a == ModelOptAlgo::kNvfp4Awq ||
         a == ModelOptAlgo::kW4A16Nvfp4;
}

// What one module was quantized with.
struct Scheme {
  ModelOptAlgo algo;
  std::string name;
  int64_t group_size = 0;  // the config's (W4A8_AWQ: 128 unless given)
};

void DescribeCommon(const Scheme& s, AffineParams* p) {
  EncodingInfo& info = p->info;
  info.convention = "modelopt";
  info.quantized = true;
  info.symmetric = true;
  if (IsNvfp4(s.algo)) {
    info.scheme = absl::StrCat(s.name, " (fp4 e2m1, fp8 scales x global)");
    info.bits = 4;
  } else if (s.algo == ModelOptAlgo::kMxfp8) {
    info.scheme = "MXFP8 (fp8 e4m3, e8m0 scales)";
    info.bits = 8;
  } else if (s.algo == ModelOptAlgo::kW4a8Awq) {
    info.scheme = "W4A8_AWQ (int4, float scales)";
    info.bits = 4;
  } else {
    info.scheme = absl::StrCat(s.name, " (fp8 e4m3)");
    info.bits = 8;
  }
}

// FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO: the scale layout the algo
// names, checked against `weight_scale`.
// The FP8 codes of weight `w` [out, in], one byte an element, as the
// FP8 and MXFP8 algorithms store them; their scales are set by the caller.
AffineParams Fp8Codes(const StoredTensor& w, int64_t out, int64_t in) {
  AffineParams p;
  p.shape = {out, in};
  p.rows = out;
  p.cols = in;
  p.codes = {.tensor = &w,
             .kind = IntMatrix::Kind::kDirect,
             .bits = 8,
             .rows = out,
             .cols = in,
             .stored_cols = in};
  p.table = Fp8Table(w.dtype);
  p.float_codes = true;
  return p;
}

absl::Status ResolveFp8Weight(Context& ctx, const StoredTensor& w,
                              const Scheme& s) {
  if (w.shape.size() != 2) {
    return Mismatch(kName, absl::StrCat("'", w.name, "' is ",
                                        DescribeStored(w.dtype, w.shape),
                                        " but must be 2-D [out, in]"));
  }
  const int64_t out = w.shape[0], in = w.shape[1];
  TM_ASSIGN_OR_RETURN(const StoredTensor* sc,
                      ctx.Expect(kName, w.name, w.name + "_scale", kScalarTypes,
                                 ShapeRule::Any()));
  AffineParams p = Fp8Codes(w, out, in);
  EncodingInfo& info = p.info;
  const std::vector<int64_t>& ss = sc->shape;
  auto layout = [&](const std::vector<int64_t>& want, absl::string_view why) {
    return WithRule(ExpectShape(kName, sc, want, why), "fp8-scale-layout");
  };
  switch (s.algo) {
    case ModelOptAlgo::kFp8:
      if (sc->num_elements != 1 || ss.size() > 1) {
        return layout({1}, absl::StrCat(s.name, "'s per-tensor scale"));
      }
      p.groups = AffineParams::Groups::kTensor;
      p.scale = {.tensor = sc, .rows = 1, .cols = 1};
      info.granularity = "tensor";
      break;
    case ModelOptAlgo::kFp8PerChannelPerToken:
      if (ss != std::vector<int64_t>{out} &&
          ss != std::vector<int64_t>{out, 1}) {
        return layout({out}, absl::StrCat(s.name, "'s per-channel scale"));
      }
      p.groups = AffineParams::Groups::kChannel;
      p.scale = {.tensor = sc, .rows = out, .cols = 1};
      info.granularity = "channel along out";
      info.axis = "out";
      break;
    default: {  // FP8_PB_WO
      const int64_t ob = CeilDiv(out, kPbBlock), ib = CeilDiv(in, kPbBlock);
      if (ss != std::vector<int64_t>{ob, 1, ib, 1} &&
          ss != std::vector<int64_t>{ob, ib}) {
        return layout({ob, 1, ib, 1},
                      absl::StrCat(s.name, "'s 128x128 blocks over [", out, ",",
                                   in, "]"));
      }
      p.groups = AffineParams::Groups::kBlock;
      p.block_rows = p.block_cols = kPbBlock;
      p.scale = {.tensor = sc, .rows = ob, .cols = ib};
      info.block_shape = {kPbBlock, kPbBlock};
      info.block_elems = kPbBlock * kPbBlock;
      info.granularity = "block 128x128";
      break;
    }
  }
  p.parts = {&w, sc};
  DescribeCommon(s, &p);
  return ctx.Add(kName, w.name, std::move(p));
}

// The per-tensor `weight_scale_2` of an NVFP4 weight, as one float.
absl::StatusOr<std::pair<const StoredTensor*, float>> GlobalScale(
    const Context& ctx, const StoredTensor& w) {
  TM_ASSIGN_OR_RETURN(const StoredTensor* g,
                      ctx.Expect(kName, w.name, w.name + "_scale_2",
                                 kScalarTypes, ShapeRule::Any()));
  TM_ASSIGN_OR_RETURN(const std::vector<float> v, ReadFloatVector(kName, g));
  // A value of 0, NaN or Inf is data, decoded as such (every group zero,
  // NaN, Inf), as a NaN block scale is: `check` reports it on this tensor
  // (zero-scale, nan-scale, inf-scale).
  if (v.size() != 1 || g->shape.size() > 1) {
    return WithRule(
        Mismatch(kName, absl::StrCat("'", g->name, "' is ",
                                     DescribeStored(g->dtype, g->shape),
                                     " but must be one per-tensor scale")),
        "companion-shape");
  }
  return std::make_pair(g, v[0]);
}

// AWQ's `pre_quant_scale` [in] beside weight `w`, as the column scale of
// its logical [out, in] tensor; none when ModelOpt's export folded it into
// the previous layer (see the top of this file).
absl::Status AttachPreQuantScale(const Context& ctx, const StoredTensor& w,
                                 AffineParams* p) {
  const std::string module = w.name.substr(0, w.name.size() - 6);  // "weight"
  TM_ASSIGN_OR_RETURN(
      const StoredTensor* pqs,
      ctx.ExpectIfPresent(
          kName, w.name, module + "pre_quant_scale", kScalarTypes,
          ShapeRule::Exact({p->cols},
                           absl::StrCat("one scale per input "
                                        "column of [",
                                        p->rows, ",", p->cols, "]"))));
  if (pqs == nullptr) return absl::OkStatus();
  p->column_scale = {.tensor = pqs, .rows = 1, .cols = p->cols};
  p->parts.push_back(pqs);
  // Names the factor for the rounding bound (rounding_bound.cc): with it the
  // value is the source's weight; without, part of it sits in another layer.
  absl::StrAppend(&p->info.scheme, " x pre_quant_scale");
  return absl::OkStatus();
}

absl::Status ResolveNvfp4Weight(Context& ctx, const StoredTensor& w,
                                const Scheme& s) {
  TM_RETURN_IF_ERROR(ExpectDType(kName, &w, {DType::kU8}));
  if (w.shape.size() != 2) {
    return Mismatch(kName, absl::StrCat("'", w.name, "' is ",
                                        DescribeStored(w.dtype, w.shape),
                                        " but must be U8[out, in/2]"));
  }
  const int64_t out = w.shape[0];
  TM_ASSIGN_OR_RETURN(const int64_t in, [&]() -> absl::StatusOr<int64_t> {
    auto v = CheckedMul<int64_t>(w.shape[1], 2);
    if (!v) return Mismatch(kName, "weight is too wide");
    return *v;
  }());
  const int64_t groups = CeilDiv(in, 16);
  TM_ASSIGN_OR_RETURN(
      const StoredTensor* sc,
      ctx.Expect(kName, w.name, w.name + "_scale", {DType::kF8E4M3},
                 ShapeRule::Exact({out, groups},
                                  absl::StrCat("one FP8 scale per 16 of [", out,
                                               ",", in, "]"))));
  TM_ASSIGN_OR_RETURN(const auto global, GlobalScale(ctx, w));
  AffineParams p;
  p.shape = {out, in};
  p.rows = out;
  p.cols = in;
  p.codes = {.tensor = &w,
             .kind = IntMatrix::Kind::kNibbles,
             .bits = 4,
             .rows = out,
             .cols = in,
             .stored_cols = in};
  p.table = E2M1Table();
  p.float_codes = true;
  p.groups = AffineParams::Groups::kGroup;
  p.group_size = 16;
  p.scale = {.tensor = sc, .rows = out, .cols = groups};
  p.multiply_scale = true;
  p.scale_multiplier = global.second;
  p.parts = {&w, sc, global.first};
  EncodingInfo& info = p.info;
  info.group_size = info.block_elems = 16;
  info.axis = "in";
  info.granularity = "group 16 along in";
  DescribeCommon(s, &p);
  if (s.algo == ModelOptAlgo::kNvfp4Awq) {
    TM_RETURN_IF_ERROR(AttachPreQuantScale(ctx, w, &p));
  }
  return ctx.Add(kName, w.name, std::move(p));
}

absl::Status ResolveW4a8Weight(Context& ctx, const StoredTensor& w,
                               const Scheme& s) {
  TM_RETURN_IF_ERROR(ExpectDType(kName, &w, {DType::kU8, DType::kI8}));
  if (w.shape.size() != 2) {
    return Mismatch(kName, absl::StrCat("'", w.name, "' is ",
                                        DescribeStored(w.dtype, w.shape),
                                        " but must be U8[out/2, in]"));
  }
  const int64_t in = w.shape[1];
  TM_ASSIGN_OR_RETURN(const int64_t out, [&]() -> absl::StatusOr<int64_t> {
    auto v = CheckedMul<int64_t>(w.shape[0], 2);
    if (!v) return Mismatch(kName, "weight is too tall");
    return *v;
  }());
  const int64_t gs = s.group_size > 0 ? s.group_size : 128;
  const int64_t groups = CeilDiv(in, gs);
  TM_ASSIGN_OR_RETURN(
      const StoredTensor* sc,
      ctx.Expect(kName, w.name, w.name + "_scale", kScalarTypes,
                 ShapeRule::Exact({out, groups},
                                  absl::StrCat("one scale per ", gs, " of [",
                                               out, ",", in, "]"))));
  TM_ASSIGN_OR_RETURN(const auto global, GlobalScale(ctx, w));
  AffineParams p;
  p.shape = {out, in};
  p.rows = out;
  p.cols = in;
  p.codes = {.tensor = &w,
             .kind = IntMatrix::Kind::kNibblePairsOfRows,
             .bits = 4,
             .rows = out,
             .cols = in,
             .stored_cols = in};
  p.signed_codes = true;
  p.groups = AffineParams::Groups::kGroup;
  p.group_size = gs;
  p.scale = {.tensor = sc, .rows = out, .cols = groups};
  p.shown_weight_scale_2 = global.second;
  p.parts = {&w, sc, global.first};
  EncodingInfo& info = p.info;
  info.group_size = info.block_elems = gs;
  info.axis = "in";
  info.granularity = absl::StrCat("group ", gs, " along in");
  DescribeCommon(s, &p);
  TM_RETURN_IF_ERROR(AttachPreQuantScale(ctx, w, &p));
  return ctx.Add(kName, w.name, std::move(p));
}

absl::Status ResolveMxfp8Weight(Context& ctx, const StoredTensor& w,
                                const Scheme& s) {
  if (w.shape.size() != 2) {
    return Mismatch(kName, absl::StrCat("'", w.name, "' is ",
                                        DescribeStored(w.dtype, w.shape),
                                        " but must be 2-D [out, in]"));
  }
  const int64_t out = w.shape[0], in = w.shape[1];
  const int64_t groups = CeilDiv(in, 32);
  TM_ASSIGN_OR_RETURN(
      const StoredTensor* sc,
      ctx.Expect(kName, w.name, w.name + "_scale", {DType::kU8, DType::kF8E8M0},
                 ShapeRule::Exact({out, groups},
                                  absl::StrCat("one E8M0 scale per 32 of [",
                                               out, ",", in, "]"))));
  AffineParams p = Fp8Codes(w, out, in);
  p.groups = AffineParams::Groups::kGroup;
  p.group_size = 32;
  p.scale_kind = AffineParams::Scales::kE8M0;
  p.scale_codes = {.tensor = sc,
                   .kind = IntMatrix::Kind::kDirect,
                   .bits = 8,
                   .rows = out,
                   .cols = groups,
                   .stored_cols = groups};
  p.scale.cols = groups;
  p.parts = {&w, sc};
  EncodingInfo& info = p.info;
  info.group_size = info.block_elems = 32;
  info.axis = "in";
  info.granularity = "group 32 along in";
  DescribeCommon(s, &p);
  return ctx.Add(kName, w.name, std::move(p));
}

bool IsFp8(DType d) { return d == DType::kF8E4M3; }

// Whether `w` is stored quantized at all: FP8 codes, or NVFP4's U8 with its
// block scales. Everything else (norms, embeddings, excluded modules) is
// left as stored.
bool LooksQuantized(const Context& ctx, const StoredTensor& w) {
  return ModelOptStoredQuantized(
      w, [&](const std::string& name) { return ctx.Has(name); });
}

absl::Status ResolveWeight(Context& ctx, const StoredTensor& w,
                           const Scheme& s) {
  if (IsNvfp4(s.algo)) return ResolveNvfp4Weight(ctx, w, s);
  if (s.algo == ModelOptAlgo::kW4a8Awq) return ResolveW4a8Weight(ctx, w, s);
  if (!IsFp8(w.dtype)) {
    return Mismatch(
        kName, absl::StrCat("'", w.name, "' is ", DTypeName(w.dtype), " but ",
                            s.name, " stores F8_E4M3 weights"));
  }
  if (s.algo == ModelOptAlgo::kMxfp8) return ResolveMxfp8Weight(ctx, w, s);
  return ResolveFp8Weight(ctx, w, s);
}

// Whether the pattern element at `p` (a character, '?', or a '[...]' set,
// '[!...]' negated, with ranges) matches `ch`; `*next` is the index after
// it. An unclosed '[' is a literal, as in Python's fnmatch.
bool MatchElement(const std::string& pat, size_t p, char ch, size_t* next) {
  *next = p + 1;
  if (pat[p] == '?') return true;
  if (pat[p] == '[') {
    size_t i = p + 1;
    const bool negate = i < pat.size() && pat[i] == '!';
    if (negate) ++i;
    const size_t first = i;
    bool hit = false;
    while (i < pat.size() && (pat[i] != ']' || i == first)) {
      if (i + 2 < pat.size() && pat[i + 1] == '-' && pat[i + 2] != ']') {
        hit |= pat[i] <= ch && ch <= pat[i + 2];
        i += 3;
      } else {
        hit |= pat[i] == ch;
        ++i;
      }
    }
    if (i < pat.size()) {
      *next = i + 1;
      return hit != negate;
    }
  }
  return pat[p] == ch;
}

}  // namespace

bool ModelOptExcludes(const ModelOptConfig& c, const std::string& module) {
  for (const std::string& pattern : c.exclude_modules) {
    if (pattern == module || ModelOptWildcardMatch(pattern, module)) {
      return true;
    }
  }
  return false;
}

bool ModelOptWildcardMatch(const std::string& pattern,
                           const std::string& module) {
  // Iterative, with one backtrack point for the last '*': never recursive,
  // so a hostile pattern costs at most |pattern| x |module| steps.
  size_t p = 0, m = 0, star = std::string::npos, mark = 0;
  while (m < module.size()) {
    size_t next = 0;
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = m;
      continue;
    }
    if (p < pattern.size() && MatchElement(pattern, p, module[m], &next)) {
      p = next;
      ++m;
      continue;
    }
    if (star == std::string::npos) return false;
    p = star + 1;
    m = ++mark;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

absl::Status ResolveModelOpt(Context& ctx, const ModelOptConfig& config) {
  const bool mixed = config.algo == ModelOptAlgo::kMixedPrecision;
  absl::flat_hash_map<std::string, const ModelOptLayer*> layers;
  for (const ModelOptLayer& l : config.quantized_layers) {
    layers[l.module] = &l;
    // A map naming a module the checkpoint lacks contradicts the tensors.
    if (!ctx.Has(l.module + ".weight")) {
      TM_RETURN_IF_ERROR(ctx.Tolerate(
          WithRule(
              HeaderInvalidError(absl::StrCat(config.file, ": ", l.key_path,
                                              ": names module '", l.module,
                                              "' but the checkpoint has no '",
                                              l.module, ".weight'"),
                                 config.file, "config-key"),
              "config-key"),
          l.module));
    }
  }
  for (const StoredTensor& t : ctx.stored()) {
    if (t.name != "weight" && !absl::EndsWith(t.name, ".weight")) continue;
    if (!LooksQuantized(ctx, t)) continue;
    const std::string module =
        t.name.size() > 7 ? t.name.substr(0, t.name.size() - 7) : "";
    Scheme s{config.algo, config.algo_name, config.group_size};
    if (mixed) {
      auto it = layers.find(module);
      if (it == layers.end()) continue;  // not quantized by the config
      s = {it->second->algo, it->second->algo_name, it->second->group_size};
    }
    // An excluded module stored quantized anyway stays its stored tensors;
    // `tensormorph check` reports it (excluded-quantized).
    if (ModelOptExcludes(config, module)) continue;
    TM_RETURN_IF_ERROR(ctx.Tolerate(ResolveWeight(ctx, t, s), t.name));
  }
  return absl::OkStatus();
}

}  // namespace tensormorph::conventions
