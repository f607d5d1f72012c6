// An HQQ layer at a realistic size for decode_bench: a checkpoint directory
// (model.safetensors + config.json) holding `model.layers.0.mlp.down_proj`
// of [out, in] as transformers saves HQQLinear: 4-bit codes, groups of 64
// along in (axis 1) or 64 rows of the grouped matrix [64, out*in/64]
// (axis 0: a group is a column), float16 scales and zeros, float16
// arithmetic.
#ifndef TENSORMORPH_TESTS_BENCH_HQQ_LAYER_H_
#define TENSORMORPH_TESTS_BENCH_HQQ_LAYER_H_

#include <cstdint>
#include <string>

namespace tensormorph::bench {

// REQUIRES: out * in a multiple of 128.
std::string WriteHqqLayer(int64_t out, int64_t in, int axis = 1);

}  // namespace tensormorph::bench

#endif  // TENSORMORPH_TESTS_BENCH_HQQ_LAYER_H_
