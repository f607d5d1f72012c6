// A run's codes (4 bits or fewer) counted in bulk, and its 16 levels computed
// as the decoder computes them: what ComputeStats needs to take a group's
// histogram, end levels and level usage once per level rather than once per
// element.
#ifndef TENSORMORPH_CORE_STATS_CODES_H_
#define TENSORMORPH_CORE_STATS_CODES_H_

#include <cstdint>

#include "core/quant/decode_simd.h"

namespace tensormorph {

// Sets count[k] to the number of codes k among c[0, n) (n < 2^31), for k <
// 16. Returns false when a code is 16 or more (then `count` is
// unspecified). Reads nothing past c + n. `simd`: the level to use (the
// caller's CPU runs it): with AVX2, 32 codes a load as four bit planes (a
// tail shorter than 32 copied first); with AVX-512, 64 codes a load by
// vector compares, the tail by a masked load. The same counts at every
// level.
bool CountCodes(const uint8_t* c, int64_t n, DecodeSimd simd,
                uint32_t count[16]);

// The codes of each of a ggml Q4_K block's eight sub-blocks counted, from
// its 128 code bytes `qs` (DecodeQ4_K's layout: 32 bytes a pair of
// sub-blocks, the first's codes in the low nibbles, the second's in the
// high): count[s][k] is the number of code k in sub-block s. With AVX2 (at
// `simd` kAvx2), 32 codes a compare; with AVX-512, 64; the same counts at
// every level.
void CountQ4KBlock(const uint8_t* qs, DecodeSimd simd, uint32_t count[8][16]);

// The same for a ggml Q4_0 block's one sub-block of 32, from its 16 code
// bytes `qs` (element l < 16 in the low nibble of qs[l], element 16 + l in
// its high nibble).
void CountQ4_0Block(const uint8_t* qs, bool avx2, uint32_t count[16]);

// The same for a ggml TQ2_0 block's one run of 256 2-bit codes, from its
// 64 code bytes `qs` (element e in bits 2 * ((e % 128) / 32) of byte
// (e / 128) * 32 + e % 32); count[k] is 0 for k >= 4.
void CountTq2_0Block(const uint8_t* qs, bool avx2, uint32_t count[16]);

// The same for a ggml Q2_K block's sixteen sub-blocks of 16, from its 64
// code bytes `qs` (DecodeQ2_K's layout: sub-block 8 * h + 2 * j + g is
// bits 2 * j of bytes 32 * h + 16 * g + [0, 16)): count[s][k], 0 for
// k >= 4.
void CountQ2KBlock(const uint8_t* qs, bool avx2, uint32_t count[16][16]);

// The same for a ggml Q3_K block's sixteen sub-blocks of 16, from its 32
// hmask bytes `hmask` and 64 code bytes `qs` (DecodeQ3_K's layout: the
// code of element l of sub-block 8 * h + 2 * j + g, w = 16 * g + l, is
// bits 2 * j of qs[32 * h + w] with bit h * 4 + j of hmask[w] above them):
// count[s][k], 0 for k >= 8.
void CountQ3KBlock(const uint8_t* hmask, const uint8_t* qs, bool avx2,
                   uint32_t count[16][16]);

// The 16 levels of a run whose values are
//   scale * float(int(code ^ flip) - bias)
// (Encoding::AffineCodeRuns: Decode's float expression, so each level has
// the bits of every element of its code), and which of them are finite
// and equal to the run's end levels `lo` and `hi` (floats; a NaN end
// equals none). The same bits with `avx2` (eight levels at a time) or not.
struct AffineLevels {
  float level[16];
  uint32_t finite = 0, low = 0, high = 0;  // bit k: level k is so
                                           // (high: and not low)
};
void ComputeAffineLevels(float scale, int32_t bias, uint8_t flip, float lo,
                         float hi, bool avx2, AffineLevels* out);

// The same for a run whose values are scale * float(code) - offset (ggml
// Q4_K's sub-blocks: d1 * q - m1, DecodeQ4_K's expression, a product and a
// difference each rounded once).
void ComputeOffsetLevels(float scale, float offset, float lo, float hi,
                         bool avx2, AffineLevels* out);

// The same for a run whose values are scale * float(table[code]) (ggml's
// codebook blocks: IQ4_NL and IQ4_XS d * kvalues_iq4nl[q], MXFP4 the halved
// E8M0 scale times the doubled E2M1 codebook; one product, rounded once).
void ComputeTableLevels(float scale, const int8_t table[16], float lo, float hi,
                        bool avx2, AffineLevels* out);

// The float equal to `d`, or NaN (equal to nothing) where no finite float
// is: a float compares equal to a double only when it is that value. What a
// run's end levels (QuantRun::range_min/max, doubles) become for the float
// compares of the levels above.
float AsFloatOrNaN(double d);

// The same for a run whose 16 levels are given (Encoding::CodeLevelRuns:
// each Decode's value of its code, whatever the expression): copied into
// out->level, and marked as ComputeAffineLevels marks its own.
void MarkLevels(const float level[16], float lo, float hi, bool avx2,
                AffineLevels* out);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_STATS_CODES_H_
