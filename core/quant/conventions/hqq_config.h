// HQQ's quantization config as transformers saves it (HqqConfig.to_dict):
// quantization_config {"quant_method": "hqq", "quant_config":
// {"weight_quant_params": {"nbits", "group_size", "axis", ...},
// "scale_quant_params", "zero_quant_params", ...}, "skip_modules": [...]},
// or "quant_config" as a map of layer tags ("self_attn.q_proj") to such
// configs. Parsed by ParseQuantConfig (quant_config.h) under its rules.
#ifndef TENSORMORPH_CORE_QUANT_CONVENTIONS_HQQ_CONFIG_H_
#define TENSORMORPH_CORE_QUANT_CONVENTIONS_HQQ_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tensormorph::conventions {

struct HqqWeightParams {
  std::string key_path;  // where it sits, for messages
  int bits = 4;          // "nbits": 1, 2, 3, 4, 5, 6 or 8 (1.58 refused)
  std::optional<int64_t> group_size = 64;  // "group_size": [1, 2^20]; null =
                                           // none (one group per channel)
  int axis = 1;                            // "axis": 0 or 1
};

struct HqqConfig {
  // One config for every layer (tag empty), or one per layer tag.
  struct Layer {
    std::string tag;  // "" or "self_attn.q_proj"
    HqqWeightParams weights;
  };
  std::vector<Layer> layers;
  std::vector<std::string> skip_modules;  // "skip_modules": strings
};

}  // namespace tensormorph::conventions

#endif  // TENSORMORPH_CORE_QUANT_CONVENTIONS_HQQ_CONFIG_H_
