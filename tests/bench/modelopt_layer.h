// ModelOpt layers at a realistic size for decode_bench: one checkpoint
// directory (model.safetensors + hf_quant_config.json) holding
// `model.layers.0.mlp.down_proj` of [out, in] with random codes and scales
// of the magnitudes ModelOpt writes.
#ifndef TENSORMORPH_TESTS_BENCH_MODELOPT_LAYER_H_
#define TENSORMORPH_TESTS_BENCH_MODELOPT_LAYER_H_

#include <cstdint>
#include <string>

namespace tensormorph::bench {

enum class ModelOptLayer {
  kNvfp4,     // U8 E2M1 pairs, F8_E4M3 scales per 16, F32 weight_scale_2
  kFp8,       // F8_E4M3, per-tensor F32 weight_scale
  kMxfp8,     // F8_E4M3, E8M0 scales per 32
  kW4a8Awq,   // U8 INT4 pairs of rows, F32 scales per 128, BF16
              // pre_quant_scale [in]
  kNvfp4Awq,  // NVFP4 with a BF16 pre_quant_scale [in]
};
const char* ModelOptLayerName(ModelOptLayer l);
// REQUIRES: out even, in a multiple of 128.
std::string WriteModelOptLayer(ModelOptLayer l, int64_t out, int64_t in);

}  // namespace tensormorph::bench

#endif  // TENSORMORPH_TESTS_BENCH_MODELOPT_LAYER_H_
