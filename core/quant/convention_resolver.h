// Turns a checkpoint's stored tensors into logical tensors, following the
// quantization convention its config names (GPTQ, AWQ, compressed-tensors,
// FP8, gpt-oss MXFP4, bitsandbytes).
#ifndef TENSORMORPH_CORE_QUANT_CONVENTION_RESOLVER_H_
#define TENSORMORPH_CORE_QUANT_CONVENTION_RESOLVER_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/format/stored_tensor.h"
#include "core/quant/resolve_problem.h"
#include "core/tensor.h"
#include "nlohmann/json.hpp"

namespace tensormorph {

// The configs found beside a safetensors checkpoint, as parsed JSON (empty
// when the file is absent; a file holding `null` is present and refused).
struct QuantConfigs {
  std::optional<nlohmann::json> config;           // config.json
  std::optional<nlohmann::json> quantize_config;  // quantize_config.json
                                                  // (AutoGPTQ)
  std::optional<nlohmann::json> quant_config;     // quant_config.json
                                                  // (AutoAWQ)
  std::optional<nlohmann::json> hf_quant_config;  // hf_quant_config.json
                                                  // (NVIDIA ModelOpt)
};

struct ResolvedTensors {
  std::vector<LogicalTensor> tensors;    // sorted by name
  std::vector<std::string> conventions;  // detected, e.g. "gptq"
  // How the configs were read, for the user: e.g. an unknown quant_method
  // whose conventions were recognised from the stored tensors instead.
  std::vector<std::string> notes;
  // The quantization config as parsed (SummarizeQuantConfig): key/value
  // lines, "quant_method" first.
  std::vector<std::pair<std::string, std::string>> config;
};

// Stored tensors that no convention claims stay logical tensors of their own
// (modules in `ignore` / `modules_to_not_convert` are simply not claimed).
// REQUIRES: `stored` outlives the result.
// The configs are parsed once, typed and range-checked, by ParseQuantConfig
// (core/quant/conventions/quant_config.h); the resolvers see typed structs
// and reach companion tensors only through checked views. Never throws: an
// exception from below is caught here.
// Errors: DATA_LOSS when a config key has a wrong type or range (naming the
// file, the key path, expected vs actual) or when a convention's metadata
// contradicts its tensors (naming the tensors and the mismatch);
// UNIMPLEMENTED for a recognised but unsupported method or variant, naming
// it; INTERNAL for an exception caught at this boundary.
//
// With `problems` (a lenient open, for `tensormorph check`), config key
// problems and tensors that cannot be resolved are appended there instead
// (ParseQuantConfigLenient, Context::Tolerate): every such tensor is left
// unclaimed, its stored tensors tensors of their own, and the rest resolve.
absl::StatusOr<ResolvedTensors> ResolveConventions(
    const std::vector<StoredTensor>& stored, const QuantConfigs& configs,
    std::vector<ResolveProblem>* problems = nullptr);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_CONVENTION_RESOLVER_H_
