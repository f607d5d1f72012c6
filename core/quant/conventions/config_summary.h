// The quantization config as Tensormorph read it, for people: the typed
// fields ParseQuantConfig produced (defaults applied, names normalised), as
// key/value lines in the configs' own key names. What a user compares with
// the config file to see what the decoders were told, without reading JSON.
#ifndef TENSORMORPH_CORE_QUANT_CONVENTIONS_CONFIG_SUMMARY_H_
#define TENSORMORPH_CORE_QUANT_CONVENTIONS_CONFIG_SUMMARY_H_

#include <string>
#include <utility>
#include <vector>

#include "core/quant/conventions/quant_config.h"

namespace tensormorph::conventions {

// Lines in a fixed order: "quant_method" first (its name as given, or
// "(none)"), then the method's fields; list-valued fields (targets,
// ignore, skip_modules, per-module overrides) one line each, keyed by
// their path ("config_groups.group_0.weights.num_bits",
// "quantized_layers.model.layers.0.mlp.down_proj"). Values are rendered
// as the config spells them: integers in decimal, booleans true/false,
// strings unquoted, an absent optional "null". Never fails.
std::vector<std::pair<std::string, std::string>> SummarizeQuantConfig(
    const QuantConfig& config);

}  // namespace tensormorph::conventions

#endif  // TENSORMORPH_CORE_QUANT_CONVENTIONS_CONFIG_SUMMARY_H_
