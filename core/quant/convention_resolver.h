// Turns a checkpoint's stored tensors into logical tensors, following the
// quantization convention its config names (GPTQ, AWQ, compressed-tensors,
// FP8, gpt-oss MXFP4, bitsandbytes).
#ifndef TENSORMORPH_CORE_QUANT_CONVENTION_RESOLVER_H_
#define TENSORMORPH_CORE_QUANT_CONVENTION_RESOLVER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/format/stored_tensor.h"
#include "core/tensor.h"
#include "nlohmann/json.hpp"

namespace tensormorph {

// The configs found beside a safetensors checkpoint (null when absent).
struct QuantConfigs {
  nlohmann::json config;           // config.json
  nlohmann::json quantize_config;  // quantize_config.json (AutoGPTQ)
  nlohmann::json quant_config;     // quant_config.json (AutoAWQ)
};

struct ResolvedTensors {
  std::vector<LogicalTensor> tensors;    // sorted by name
  std::vector<std::string> conventions;  // detected, e.g. "gptq"
};

// Stored tensors that no convention claims stay logical tensors of their own
// (modules in `ignore` / `modules_to_not_convert` are simply not claimed).
// REQUIRES: `stored` outlives the result.
// Errors: DATA_LOSS when a convention's metadata contradicts its tensors
// (naming the tensors and the mismatch); UNIMPLEMENTED for a recognised but
// unsupported method or variant, naming it.
absl::StatusOr<ResolvedTensors> ResolveConventions(
    const std::vector<StoredTensor>& stored, const QuantConfigs& configs);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_CONVENTION_RESOLVER_H_
