#include "core/quant/convention_resolver.h"

#include <algorithm>
#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/quant/conventions/config_summary.h"
#include "core/quant/conventions/context.h"
#include "core/quant/conventions/quant_config.h"
#include "core/quant/stored_encoding.h"
#include "core/util/status_macros.h"

namespace tensormorph {
namespace {

using conventions::QuantMethod;

absl::StatusOr<ResolvedTensors> Resolve(const std::vector<StoredTensor>& stored,
                                        const QuantConfigs& configs,
                                        std::vector<ResolveProblem>* problems) {
  TM_ASSIGN_OR_RETURN(
      conventions::QuantConfig q,
      problems == nullptr
          ? conventions::ParseQuantConfig(configs)
          : conventions::ParseQuantConfigLenient(configs, problems));
  // Past this line nothing reads JSON: the resolvers see typed configs.
  conventions::Context ctx(stored, problems);
  ResolvedTensors out;
  absl::Status s = absl::OkStatus();
  switch (q.method) {
    case QuantMethod::kGptq:
      s = conventions::ResolveGptq(ctx, q.gptq);
      break;
    case QuantMethod::kAwq:
      s = conventions::ResolveAwq(ctx, q.awq);
      break;
    case QuantMethod::kCompressedTensors:
      s = conventions::ResolveCompressedTensors(ctx, q.compressed_tensors);
      break;
    case QuantMethod::kFp8:
      s = conventions::ResolveFp8(ctx, q.fp8);
      break;
    case QuantMethod::kMxfp4:
      s = conventions::ResolveMxfp4GptOss(ctx);
      break;
    case QuantMethod::kBitsandbytes:
      s = conventions::ResolveBitsandbytes(ctx);
      if (s.ok()) s = conventions::ResolveBitsandbytesInt8(ctx);
      break;
    case QuantMethod::kMlx:
      s = conventions::ResolveMlx(ctx, q.mlx);
      break;
    case QuantMethod::kModelOpt:
      s = conventions::ResolveModelOpt(ctx, q.modelopt);
      break;
    case QuantMethod::kHqq:
      s = conventions::ResolveHqq(ctx, q.hqq);
      break;
    case QuantMethod::kNone:
    case QuantMethod::kUnknown:
      // Conventions recognisable from the tensors alone.
      s = conventions::ResolveBitsandbytes(ctx);
      if (s.ok()) s = conventions::ResolveBitsandbytesInt8(ctx);
      if (s.ok()) s = conventions::ResolveMxfp4GptOss(ctx);
      if (s.ok() &&
          std::any_of(stored.begin(), stored.end(), [](const StoredTensor& t) {
            return absl::EndsWith(t.name, "_scale_inv");
          })) {
        s = conventions::ResolveFp8(ctx, conventions::Fp8Config{});
      }
      break;
  }
  if (!s.ok()) return s;
  out.notes = std::move(q.notes);
  out.config = conventions::SummarizeQuantConfig(q);
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

}  // namespace

absl::StatusOr<ResolvedTensors> ResolveConventions(
    const std::vector<StoredTensor>& stored, const QuantConfigs& configs,
    std::vector<ResolveProblem>* problems) {
  // The layer's one entry point: nothing below is meant to throw, and this
  // keeps it so should a future change slip (a worker thread must never see
  // an exception from a file's contents).
  try {
    return Resolve(stored, configs, problems);
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(
        absl::StrCat("quantization config could not be read: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("resolving quantization conventions failed: ", e.what()));
  } catch (...) {
    return absl::InternalError(
        "resolving quantization conventions failed with an unknown exception");
  }
}

}  // namespace tensormorph
