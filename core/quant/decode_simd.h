// Vector fast paths of the block and float decoders (F16, BF16, Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, Q8_1, Q2_K..Q6_K, TQ1_0, IQ4_NL, IQ4_XS, MXFP4, NVFP4),
// chosen at run time by what the CPU has. Each returns false, having written
// nothing, when the CPU (or the cap below) rules its path out; the caller then
// runs its scalar reference. Every path gives the reference's bits: the same
// integer level times the same float scale, one rounding each (tests hold them
// to it on random blocks, at every level the CPU supports).
#ifndef TENSORMORPH_CORE_QUANT_DECODE_SIMD_H_
#define TENSORMORPH_CORE_QUANT_DECODE_SIMD_H_

#include <cstdint>

namespace tensormorph {

enum class DecodeSimd { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// The best level this CPU runs (kAvx2 needs AVX2 and F16C; kAvx512 adds
// AVX-512 F, BW and VL), and the level in use: the lower of that and the cap.
DecodeSimd SupportedDecodeSimd();
DecodeSimd ActiveDecodeSimd();
// Tests only: caps the level so every path, down to the scalar references,
// can be run on one machine. Not thread-safe against running decodes.
void CapDecodeSimdForTesting(DecodeSimd cap);

// `n` elements (F16, BF16) or `nb` blocks (the rest) at `src` into `out`.
bool DecodeF16Simd(const uint8_t* src, int64_t n, float* out);
bool DecodeBF16Simd(const uint8_t* src, int64_t n, float* out);
bool DecodeQ4_0Simd(const uint8_t* src, int64_t nb, float* out);
bool DecodeQ4_1Simd(const uint8_t* src, int64_t nb, float* out);
bool DecodeQ5_0Simd(const uint8_t* src, int64_t nb, float* out);
bool DecodeQ5_1Simd(const uint8_t* src, int64_t nb, float* out);
bool DecodeQ8_0Simd(const uint8_t* src, int64_t nb, float* out);
bool DecodeQ8_1Simd(const uint8_t* src, int64_t nb, float* out);
bool DecodeTq1_0Simd(const uint8_t* src, int64_t nb, float* out);
bool DecodeQ2_KSimd(const uint8_t* src, int64_t nb, float* out);
bool DecodeQ3_KSimd(const uint8_t* src, int64_t nb, float* out);
bool DecodeQ4_KSimd(const uint8_t* src, int64_t nb, float* out);
bool DecodeQ5_KSimd(const uint8_t* src, int64_t nb, float* out);
bool DecodeQ6_KSimd(const uint8_t* src, int64_t nb, float* out);
bool DecodeIq4NlSimd(const uint8_t* src, int64_t nb, float* out);
bool DecodeIq4XsSimd(const uint8_t* src, int64_t nb, float* out);
bool DecodeMxfp4Simd(const uint8_t* src, int64_t nb, float* out);
bool DecodeNvfp4Simd(const uint8_t* src, int64_t nb, float* out);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_DECODE_SIMD_H_
