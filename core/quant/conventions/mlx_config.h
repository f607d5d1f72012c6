// MLX's quantization config as mlx-lm saves it in config.json:
// "quantization": {"group_size", "bits", "mode", "<module path>": {...} or
// true / false}, mirrored in "quantization_config" (without quant_method)
// by newer saves. Parsed by ParseQuantConfig (quant_config.h) under its
// rules.
#ifndef TENSORMORPH_CORE_QUANT_CONVENTIONS_MLX_CONFIG_H_
#define TENSORMORPH_CORE_QUANT_CONVENTIONS_MLX_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tensormorph::conventions {

// MLX (mlx-lm): config.json "quantization" (mirrored in
// "quantization_config", without quant_method, by newer saves). A missing
// or null group_size / bits takes the mode's default, as mlx.nn.quantize
// does (affine 64 / 4, mxfp4 32 / 4, mxfp8 32 / 8, nvfp4 16 / 4).
enum class MlxMode { kAffine, kMxfp4, kMxfp8, kNvfp4 };
struct MlxQuant {
  MlxMode mode = MlxMode::kAffine;  // "mode": "affine" (default), "mxfp4",
                                    // "mxfp8", "nvfp4"
  int bits = 4;             // "bits": affine 2, 3, 4, 5, 6, 8; else the mode's
  int64_t group_size = 64;  // "group_size": affine 32, 64, 128; else the
                            // mode's (32, or 16 for nvfp4)
};
struct MlxConfig {
  MlxQuant base;
  // Per-module entries, keyed by module path ("model.layers.0.mlp.gate"):
  // an object of the keys above (defaults from its own mode), `true` (the
  // base), or `false` (left unquantized: nullopt). Values of other types
  // are unknown keys, ignored.
  std::vector<std::pair<std::string, std::optional<MlxQuant>>> modules;
  std::string file, path;  // where it was read, for messages
};

}  // namespace tensormorph::conventions

#endif  // TENSORMORPH_CORE_QUANT_CONVENTIONS_MLX_CONFIG_H_
