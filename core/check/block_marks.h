// MarkOrdinaryRuns (run_counts.h) for ggml Q8_0 and Q4_K storage, decided
// from the blocks' bytes without decoding a value: the check's value pass
// over such tensors was bound by decoding every value to floats and marking
// them 32 at a time, when nearly every sub-block is ordinary.
//
// Exact, not an estimate, because each decoded value is a function of its
// code and its sub-block's parameters computed with one rounding at most:
// - Q8_0: value = d * q with d an fp16 and q an int8, exact in float (19
//   significant bits); distinct codes give distinct values when d != 0, the
//   end levels are q = -128 and 127, and |value| is largest at the largest
//   |q|.
// - Q4_K: value = d1 * q - m1 with d1 = d * sc and m1 = dmin * m exact (fp16
//   times 6 bits), d1 * q exact, so the decoder rounds once: the 16 levels
//   are computed as it computes them (multiply, then subtract, never fused:
//   core is built with -ffp-contract=off), and every rule is read from which
//   codes occur.
// Tests hold MarkOrdinaryBlocks to MarkOrdinaryRuns over the decoded values
// on random blocks with planted unusual sub-blocks.
#ifndef TENSORMORPH_CORE_CHECK_BLOCK_MARKS_H_
#define TENSORMORPH_CORE_CHECK_BLOCK_MARKS_H_

#include <cstdint>

#include "core/dtype.h"
#include "core/quant/encoding.h"

namespace tensormorph {

// Whether MarkOrdinaryBlocks takes `dtype` (Q8_0, Q4_K) on this CPU (AVX2
// and F16C, as the decoders' vector level) and is switched on. At the
// AVX-512 decode level (ActiveDecodeSimd), Q4_K's blocks are read 64 codes
// at a time and their rules compared into mask registers: the same marks.
bool HasBlockMarks(DType dtype);

// For each 32-element sub-block s of the `nb` blocks at `blocks`:
// ordinary[s] as MarkOrdinaryRuns(values, runs, 8 * nb, 32, ordinary) would
// set it, values being the blocks decoded and runs their sub-block runs
// (GetSubBlockRuns).
// REQUIRES: HasBlockMarks(dtype); blocks holds nb whole blocks.
void MarkOrdinaryBlocks(DType dtype, const uint8_t* blocks, int64_t nb,
                        uint8_t* ordinary);

// For each of codes.runs: ordinary[k] = 1 only where MarkOrdinaryRuns(
// values, runs, n, len, ordinary) would set it, values being scale[k] *
// float(int(code ^ flip) - bias[k]) (Encoding::AffineCodeRuns) of
// `code_bits`-bit codes. Exact where the levels are at most 2^20 steps from
// zero, the scale at least 2^-100 and every level within fp16 (no two codes
// then decode alike, and only the lowest and highest code sit on an end
// level); 0 elsewhere, which only sends the run to be counted value by value.
// REQUIRES: HasAffineMarks(); 1 <= code_bits <= 8.
bool HasAffineMarks();
void MarkOrdinaryAffineRuns(const Encoding::AffineCodes& codes, int64_t len,
                            int code_bits, uint8_t* ordinary);

// Switches MarkOrdinaryBlocks and MarkOrdinaryAffineRuns off (false) or
// back on where the CPU has AVX2: tests compare the check's findings both
// ways.
void SetBlockMarks(bool on);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_CHECK_BLOCK_MARKS_H_
