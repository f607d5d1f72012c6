#include "core/quant/conventions/config_summary.h"

#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensormorph::conventions {
namespace {

using Lines = std::vector<std::pair<std::string, std::string>>;

std::string Bool(bool b) { return b ? "true" : "false"; }

std::string Optional(const std::optional<int64_t>& v) {
  return v ? absl::StrCat(*v) : "null";
}

std::string Strategy(CtStrategy s, const std::string& name) {
  if (!name.empty()) return name;
  switch (s) {
    case CtStrategy::kTensor:
      return "tensor";
    case CtStrategy::kChannel:
      return "channel";
    case CtStrategy::kGroup:
      return "group";
    case CtStrategy::kBlock:
      return "block";
    case CtStrategy::kOther:
      break;
  }
  return "other";
}

std::string MlxModeName(MlxMode m) {
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
  return "affine";
}

void AddCompressedTensors(const CompressedTensorsConfig& c, Lines* out) {
  if (!c.quantization_status.empty())
    out->emplace_back("quantization_status", c.quantization_status);
  for (const CtScheme& s : c.schemes) {
    const std::string at = absl::StrCat("config_groups.", s.group, ".");
    out->emplace_back(at + "format", s.format_name);
    out->emplace_back(at + "weights.num_bits", absl::StrCat(s.bits));
    out->emplace_back(at + "weights.type",
                      s.type == CtType::kInt ? "int" : "float");
    out->emplace_back(at + "weights.symmetric", Bool(s.symmetric));
    out->emplace_back(at + "weights.strategy",
                      Strategy(s.strategy, s.strategy_name));
    out->emplace_back(at + "weights.group_size", Optional(s.group_size));
    if (s.block) {
      out->emplace_back(at + "weights.block_structure",
                        absl::StrCat((*s.block)[0], "x", (*s.block)[1]));
    }
    out->emplace_back(at + "targets", absl::StrJoin(s.targets, ", "));
  }
  if (!c.ignore.empty())
    out->emplace_back("ignore", absl::StrJoin(c.ignore, ", "));
}

void AddMlx(const MlxConfig& c, Lines* out) {
  out->emplace_back("mode", MlxModeName(c.base.mode));
  out->emplace_back("bits", absl::StrCat(c.base.bits));
  out->emplace_back("group_size", absl::StrCat(c.base.group_size));
  for (const auto& [module, q] : c.modules) {
    out->emplace_back(module,
                      q ? absl::StrCat(MlxModeName(q->mode), ", bits ", q->bits,
                                       ", group_size ", q->group_size)
                        : "false (not quantized)");
  }
}

void AddModelOpt(const ModelOptConfig& c, Lines* out) {
  out->emplace_back("quant_algo", c.algo_name);
  if (c.group_size != 0)
    out->emplace_back("group_size", absl::StrCat(c.group_size));
  if (c.kv_cache_quant_algo)
    out->emplace_back("kv_cache_quant_algo", *c.kv_cache_quant_algo);
  if (!c.exclude_modules.empty()) {
    out->emplace_back(c.exclude_key.empty() ? "exclude_modules" : c.exclude_key,
                      absl::StrJoin(c.exclude_modules, ", "));
  }
  for (const ModelOptLayer& l : c.quantized_layers) {
    out->emplace_back(
        absl::StrCat("quantized_layers.", l.module),
        l.group_size != 0
            ? absl::StrCat(l.algo_name, ", group_size ", l.group_size)
            : l.algo_name);
  }
  if (!c.producer_version.empty())
    out->emplace_back("producer.version", c.producer_version);
}

void AddHqq(const HqqConfig& c, Lines* out) {
  for (const HqqConfig::Layer& l : c.layers) {
    const std::string at = l.tag.empty()
                               ? "weight_quant_params."
                               : absl::StrCat(l.tag, ".weight_quant_params.");
    out->emplace_back(at + "nbits", absl::StrCat(l.weights.bits));
    out->emplace_back(at + "group_size", Optional(l.weights.group_size));
    out->emplace_back(at + "axis", absl::StrCat(l.weights.axis));
  }
  if (!c.skip_modules.empty())
    out->emplace_back("skip_modules", absl::StrJoin(c.skip_modules, ", "));
}

}  // namespace

Lines SummarizeQuantConfig(const QuantConfig& q) {
  Lines out;
  out.emplace_back("quant_method",
                   q.method_name.empty() ? "(none)" : q.method_name);
  switch (q.method) {
    case QuantMethod::kGptq:
      out.emplace_back("bits", absl::StrCat(q.gptq.bits));
      out.emplace_back("group_size", absl::StrCat(q.gptq.group_size));
      out.emplace_back("sym", Bool(q.gptq.sym));
      out.emplace_back("desc_act", Bool(q.gptq.desc_act));
      out.emplace_back("checkpoint_format", q.gptq.v1 ? "gptq" : "gptq_v2");
      break;
    case QuantMethod::kAwq:
      out.emplace_back("bits", absl::StrCat(q.awq.bits));
      out.emplace_back("group_size", absl::StrCat(q.awq.group_size));
      out.emplace_back("zero_point", Bool(q.awq.zero_point));
      out.emplace_back("version", q.awq.gemv ? "gemv" : "gemm");
      break;
    case QuantMethod::kCompressedTensors:
      AddCompressedTensors(q.compressed_tensors, &out);
      break;
    case QuantMethod::kFp8:
      out.emplace_back("weight_block_size",
                       q.fp8.weight_block_size
                           ? absl::StrCat((*q.fp8.weight_block_size)[0], "x",
                                          (*q.fp8.weight_block_size)[1])
                           : "null");
      break;
    case QuantMethod::kMlx:
      AddMlx(q.mlx, &out);
      break;
    case QuantMethod::kModelOpt:
      AddModelOpt(q.modelopt, &out);
      break;
    case QuantMethod::kHqq:
      AddHqq(q.hqq, &out);
      break;
    case QuantMethod::kMxfp4:
    case QuantMethod::kBitsandbytes:
    case QuantMethod::kNone:
    case QuantMethod::kUnknown:
      // Their parameters live in the tensors (bitsandbytes' quant state,
      // gpt-oss' blocks and scales), not in the config.
      break;
  }
  return out;
}

}  // namespace tensormorph::conventions
