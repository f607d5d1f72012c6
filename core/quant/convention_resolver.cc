#include "core/quant/convention_resolver.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/quant/conventions/context.h"
#include "core/quant/stored_encoding.h"

namespace tensormorph {
namespace {

// Methods transformers knows that Tensormorph does not decode (yet).
constexpr const char* kUnsupported[] = {"hqq",
                                        "eetq",
                                        "quanto",
                                        "aqlm",
                                        "exl2",
                                        "higgs",
                                        "vptq",
                                        "torchao",
                                        "spqr",
                                        "bitnet",
                                        "fbgemm_fp8_rowwise",
                                        "squeezellm",
                                        "marlin"};

}  // namespace

absl::StatusOr<ResolvedTensors> ResolveConventions(
    const std::vector<StoredTensor>& stored, const QuantConfigs& configs) {
  nlohmann::json q;
  std::string method;
  if (configs.config.is_object() &&
      configs.config.contains("quantization_config") &&
      configs.config["quantization_config"].is_object()) {
    q = configs.config["quantization_config"];
    method = conventions::JsonString(q, "quant_method");
  } else if (configs.quantize_config.is_object()) {
    q = configs.quantize_config;
    method = conventions::JsonString(q, "quant_method", "gptq");
  } else if (configs.quant_config.is_object()) {
    q = configs.quant_config;
    method = conventions::JsonString(q, "quant_method", "awq");
  }
  method = absl::AsciiStrToLower(method);
  conventions::Context ctx(stored, q);
  ResolvedTensors out;
  absl::Status s = absl::OkStatus();
  if (method == "gptq") {
    s = conventions::ResolveGptq(ctx);
  } else if (method == "awq") {
    s = conventions::ResolveAwq(ctx);
  } else if (method == "compressed-tensors") {
    s = conventions::ResolveCompressedTensors(ctx);
  } else if (method == "fp8" || method == "fbgemm_fp8" ||
             method == "modelopt") {
    s = conventions::ResolveFp8(ctx);
  } else if (method == "mxfp4") {
    s = conventions::ResolveMxfp4GptOss(ctx);
  } else if (method == "bitsandbytes") {
    s = conventions::ResolveBitsandbytes(ctx);
  } else if (std::find(std::begin(kUnsupported), std::end(kUnsupported),
                       method) != std::end(kUnsupported)) {
    return absl::UnimplementedError(
        absl::StrCat("quantization method '", method,
                     "' is recognised but not supported; supported: gptq, awq, "
                     "compressed-tensors, "
                     "fp8, mxfp4, bitsandbytes"));
  } else {
    // No (known) method named: conventions recognisable from the tensors.
    s = conventions::ResolveBitsandbytes(ctx);
    if (s.ok()) s = conventions::ResolveMxfp4GptOss(ctx);
    if (s.ok() &&
        std::any_of(stored.begin(), stored.end(), [](const StoredTensor& t) {
          return absl::EndsWith(t.name, "_scale_inv");
        })) {
      s = conventions::ResolveFp8(ctx);
    }
  }
  if (!s.ok()) return s;
  out.tensors = ctx.TakeTensors();
  for (const LogicalTensor& t : out.tensors) {
    const std::string& c = t.encoding->info().convention;
    if (std::find(out.conventions.begin(), out.conventions.end(), c) ==
        out.conventions.end()) {
      out.conventions.push_back(c);
    }
  }
  for (const StoredTensor& t : stored) {
    if (ctx.claimed(t.name)) continue;
    out.tensors.push_back(LogicalTensor{t.name, t.shape, t.num_elements,
                                        MakeStoredEncoding(t, "safetensors")});
  }
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const LogicalTensor& a, const LogicalTensor& b) {
              return a.name < b.name;
            });
  for (size_t i = 1; i < out.tensors.size(); ++i) {
    if (out.tensors[i].name == out.tensors[i - 1].name) {
      return absl::DataLossError(
          absl::StrCat("logical tensor '", out.tensors[i].name,
                       "' is produced twice (a convention's output collides "
                       "with a stored tensor)"));
    }
  }
  return out;
}

}  // namespace tensormorph
