// NVIDIA ModelOpt (TensorRT-Model-Optimizer) quantization configs, typed:
// `hf_quant_config.json` ({"producer": {...}, "quantization": {...}}) or
// config.json's `quantization_config` with quant_method "modelopt" (either
// the nested {"quantization": {...}} form or the flat one vLLM also reads,
// whose exclusions are "ignore" or "exclude_modules").
// Parsed by ParseQuantConfig (quant_config.h) under its rules: a wrong type
// or range is DATA_LOSS naming file, key path, expected vs actual.
#ifndef TENSORMORPH_CORE_QUANT_CONVENTIONS_MODELOPT_CONFIG_H_
#define TENSORMORPH_CORE_QUANT_CONVENTIONS_MODELOPT_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/format/stored_tensor.h"

namespace tensormorph::conventions {

// The `quant_algo` values Tensormorph decodes. ModelOpt's others (INT4_AWQ,
// INT8_SQ, W4A8_NVFP4_FP8, ...) are UNIMPLEMENTED naming the key;
// any other string is DATA_LOSS.
enum class ModelOptAlgo {
  kFp8,                    // F8_E4M3 weight, F32 per-tensor weight_scale
  kFp8PerChannelPerToken,  // F8_E4M3 weight, weight_scale [out]
  kFp8PbWo,                // F8_E4M3 weight, 128x128 block weight_scale
  kNvfp4,                  // U8 [out, in/2] E2M1 pairs, F8_E4M3 scale / 16,
                           // F32 weight_scale_2
  kNvfp4Awq,               // NVFP4 plus pre_quant_scale [in]
  kW4A16Nvfp4,             // NVFP4 weights, no activation quantization
  kMxfp8,                  // F8_E4M3 weight, U8 E8M0 weight_scale / 32
  kW4a8Awq,                // U8 [out/2, in] INT4 pairs of rows, F32 scale
                           // per group along in, pre_quant_scale [in]
  kMixedPrecision,         // per-layer algos in `quantized_layers`
};

// One entry of MIXED_PRECISION's "quantized_layers".
struct ModelOptLayer {
  std::string module;    // the key: a module path ("model.layers.0.mlp...")
  std::string key_path;  // where it sits in `file`, for messages
  ModelOptAlgo algo = ModelOptAlgo::kFp8;
  std::string algo_name;   // upper case, as named
  int64_t group_size = 0;  // "group_size" when given, else the algo's own
};

struct ModelOptConfig {
  std::string file;  // "hf_quant_config.json" or "config.json"
  ModelOptAlgo algo = ModelOptAlgo::kFp8;
  // "quant_algo": a string, any case (stored upper case); required.
  std::string algo_name;
  // "group_size" (null = absent): NVFP4 16, MXFP8 32; another value for
  // those is DATA_LOSS; W4A8_AWQ's INT4 groups (128 when absent); others
  // ignore it. In [1, 65536].
  int64_t group_size = 0;
  // "kv_cache_quant_algo" (null = absent): a string, reported only.
  std::optional<std::string> kv_cache_quant_algo;
  // "exclude_modules" (flat form: also "ignore"; null = absent): strings,
  // fnmatch-style wildcards over module paths, as vLLM matches them.
  std::vector<std::string> exclude_modules;
  std::string exclude_key;  // the key path of that list, for messages
  // MIXED_PRECISION: "quantized_layers", an object of module -> {quant_algo,
  // group_size}; required there. Another MIXED_PRECISION inside is DATA_LOSS.
  std::vector<ModelOptLayer> quantized_layers;
  std::string producer_version;  // "producer.version", reported only
};

// fnmatch(3) without flags over module paths: '*' any run (dots too), '?'
// one character, '[...]' a set; as Python's fnmatch, which vLLM uses.
bool ModelOptWildcardMatch(const std::string& pattern,
                           const std::string& module);

// Whether `module` is excluded from quantization by `c`'s exclude_modules:
// equal to an entry or matching it as a wildcard (vLLM's rule).
bool ModelOptExcludes(const ModelOptConfig& c, const std::string& module);

// Whether the stored weight `w` holds ModelOpt codes: F8_E4M3, or U8 with
// a `<name>_scale` beside it (NVFP4: its weight_scale_2 is then required,
// and its absence a missing companion). `has` says which names are stored.
// The resolver decodes these; `check` reports excluded ones.
template <typename Has>
bool ModelOptStoredQuantized(const StoredTensor& w, const Has& has) {
  return w.dtype == DType::kF8E4M3 ||
         (w.dtype == DType::kU8 && has(w.name + "_scale"));
}

}  // namespace tensormorph::conventions

#endif  // TENSORMORPH_CORE_QUANT_CONVENTIONS_MODELOPT_CONFIG_H_
