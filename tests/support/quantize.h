// Quantizers for test and demo checkpoints that write, bit for bit, what
// ggml's reference quantizers (quantize_row_*_ref, which llama.cpp uses
// when no importance matrix is given) write: the demo shows the errors a
// real llama.cpp file has. tests/oracle/quantize_ref_test.cc holds them to
// the pinned ggml (ggml_quantize_chunk).
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

// ggml blocks of `v` (its size a multiple of the block size).
// Q8_0: amax / 127 as the fp16 scale, codes rounded with the float32 one.
std::string QuantizeQ8_0(const std::vector<float>& v);
// Q4_0: the signed extreme on level -8 (the other side may clip by design).
std::string QuantizeQ4_0(const std::vector<float>& v);
// K-quants (a multiple of 256): per sub-block a weighted least-squares fit
// of scale and minimum (Q4_K) or of a symmetric scale (Q6_K), the fitted
// scales stored as 6-/8-bit multiples of an fp16 super-block scale, then
// every code chosen again against the stored scales.
std::string QuantizeQ4_K(const std::vector<float>& v);
std::string QuantizeQ6_K(const std::vector<float>& v);

// Deterministic gaussian values (Box-Muller over a fixed-seed PCG).
std::vector<float> Gaussian(size_t n, uint64_t seed, float stddev = 1.0f);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_QUANTIZE_H_
