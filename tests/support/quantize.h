// Simple reference quantizers for test and demo checkpoints. They produce
// valid blocks of each format (round-to-nearest with min/max scales), not
// ggml's optimised choices; decoding is what Tensormorph is tested on.
#ifndef TENSORMORPH_TESTS_SUPPORT_QUANTIZE_H_
#define TENSORMORPH_TESTS_SUPPORT_QUANTIZE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tensormorph::testing {

uint16_t F32ToF16Bits(float f);   // round to nearest even
uint16_t F32ToBF16Bits(float f);  // round to nearest even
std::string ToBF16Bytes(const std::vector<float>& v);
std::string ToF32Bytes(const std::vector<float>& v);

// ggml blocks for rows of `n` values (n a multiple of the block size).
std::string QuantizeQ8_0(const std::vector<float>& v);
std::string QuantizeQ4_0(const std::vector<float>& v);
// K-quants (rows a multiple of 256): min/max sub-block scales quantized to
// 6 bits (Q4_K) or 8 bits (Q6_K) against a float16 super-block scale.
std::string QuantizeQ4_K(const std::vector<float>& v);
std::string QuantizeQ6_K(const std::vector<float>& v);

// Deterministic gaussian values (Box-Muller over a fixed-seed PCG).
std::vector<float> Gaussian(size_t n, uint64_t seed, float stddev = 1.0f);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_QUANTIZE_H_
