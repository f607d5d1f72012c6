// The inner loops of a convention decode (AffineEncoding::Decode): runs of
// 8-bit-or-narrower codes, each run sharing a group's scale and zero-point,
// turned into float32. Each has a scalar reference, which is also the
// fallback on CPUs without AVX2; the AVX2 paths, and the table runs'
// AVX-512 paths (chosen by ActiveDecodeSimd(), so tests can cap them), give
// the same bits (tests hold them to it on random codes at every level).
#ifndef TENSORMORPH_CORE_QUANT_AFFINE_KERNELS_H_
#define TENSORMORPH_CORE_QUANT_AFFINE_KERNELS_H_

#include <cstdint>

namespace tensormorph {

// Groups of `run` consecutive codes, the first `run - skip` long (the row
// starts `skip` codes into a group): code i belongs to group (i + skip) / run.
struct Runs {
  int64_t run = 0;
  int64_t skip = 0;  // 0 <= skip < run
};

// out[i] = scale[g] * float(int(codes[i] ^ flip) - bias[g]) for code i of
// group g: an integer level (`flip` = 2^(bits-1) sign-extends
// two's-complement codes, `bias` folds that sign, the stored offset and the
// zero-point) times the group's scale.
void DecodeAffineRuns(const uint8_t* codes, int64_t n, Runs runs, uint8_t flip,
                      const int32_t* bias, const float* scale, float* out);
void DecodeAffineRunsScalar(const uint8_t* codes, int64_t n, Runs runs,
                            uint8_t flip, const int32_t* bias,
                            const float* scale, float* out);

// out[i] = scale[g] * table[codes[i]], for codebooks (NF4, FP4, FP8 levels).
// `book` says when the table is a float format's, whose levels the CPU can
// compute instead of looking them up.
// REQUIRES: every code indexes `table`, which has `table_size` entries; for
// kFp8E4M3 the table is F8E4M3ToF32's; for kSignMagnitude16 it has 16
// entries, entry c + 8 being entry c with its sign bit set (FP4 E2M1).
enum class Codebook { kTable, kFp8E4M3, kSignMagnitude16 };
void DecodeTableRuns(const uint8_t* codes, int64_t n, Runs runs,
                     const float* table, int table_size, Codebook book,
                     const float* scale, float* out);
void DecodeTableRunsScalar(const uint8_t* codes, int64_t n, Runs runs,
                           const float* table, const float* scale, float* out);

// DecodeTableRuns of 16-entry codebooks straight from packed nibbles (code
// i is the low nibble of byte i / 2 for even i, or the high one when
// `high_first`), so the codes are not spread into a byte buffer first.
// Returns false, having written nothing, below AVX-512 (ActiveDecodeSimd())
// or unless runs.skip is 0 and runs.run a multiple of 16.
// REQUIRES: packed holds (n + 1) / 2 bytes; table 16 entries.
bool DecodeNibbleTableRuns(const uint8_t* packed, int64_t n, Runs runs,
                           bool high_first, const float* table,
                           const float* scale, float* out);

// Codes 0, 1, ..., 15, 0, 1, ... (n of them), valid until the thread's next
// call: a run of 16 a group that the kernels above decode to every level of
// the group (Encoding::CodeLevelRuns).
const uint8_t* SixteenCodesRepeated(int64_t n);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_AFFINE_KERNELS_H_
