// Checkpoints generated for benchmarks: sizes chosen by the benchmark,
// written once per process into a temporary directory.
#ifndef TENSORMORPH_TESTS_BENCH_BENCH_DATA_H_
#define TENSORMORPH_TESTS_BENCH_BENCH_DATA_H_

#include <cstdint>
#include <string>

namespace tensormorph::bench {

// A pair of GGUF files under a fresh directory: `source.gguf` with
// `tensors` F32 tensors of [rows, 4096] and `q8_0.gguf` with the same values
// in Q8_0. Returns the directory.
std::string WriteDiffPair(int tensors, int64_t rows);

// A GGUF `big.gguf` under a fresh directory holding one Q8_0 tensor `big`
// of [rows, cols] (cols a multiple of 32): random codes, every block's
// scale 1/128, so values lie in [-1, 1). Returns the directory.
std::string WriteBigQ8_0(int64_t rows, int64_t cols);

// The safetensors quantization conventions at a realistic size, each as a
// checkpoint directory (model.safetensors + config.json) holding one
// quantized linear layer `model.layers.0.mlp.down_proj` of [out, in] (for
// gpt-oss, experts.down_proj_blocks of [2, out, in]): random codes, scales
// and zero-points of the magnitudes quantizers produce. Groups are 128 wide.
enum class Convention {
  kGptqInt4,       // GPTQ v1, asymmetric, group 128
  kAwqInt4,        // AWQ GEMM, group 128
  kCtInt4Group,    // compressed-tensors pack-quantized, symmetric, group 128
  kCtInt8Channel,  // compressed-tensors int-quantized, per channel
  kFp8Block,       // DeepSeek-style FP8 E4M3 with 128x128 block scales
  kBnbNf4,         // bitsandbytes NF4, blocks of 64
  kGptOssMxfp4,    // gpt-oss MXFP4 experts
  kMlxInt4,        // MLX affine 4-bit, bf16 scales and biases, group 64
  kMlxInt3,        // MLX affine 3-bit (codes straddle words), group 64
  kMlxInt8,        // MLX affine 8-bit, group 64
  kMlxMxfp4,       // MLX mxfp4, group 32
  kBnbInt8,        // bitsandbytes LLM.int8, per-row SCB
  kMlxMxfp8,       // MLX mxfp8: E4M3 codes, E8M0 scales per 32
  kMlxNvfp4,       // MLX nvfp4: E2M1 codes, E4M3 scales per 16
  kMlxInt2,        // MLX affine 2-bit, group 64
  kMlxInt5,        // MLX affine 5-bit (codes straddle words), group 64
  kMlxInt6,        // MLX affine 6-bit (codes straddle words), group 64
};
const char* ConventionName(Convention c);
std::string WriteConventionCheckpoint(Convention c, int64_t out, int64_t in);

}  // namespace tensormorph::bench

#endif  // TENSORMORPH_TESTS_BENCH_BENCH_DATA_H_
