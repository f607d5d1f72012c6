// ggml blocks whose sub-blocks hold at most 16 levels, read where they are
// stored, for ComputeStats' pass from codes: per type, a row saying how
// big a block is, how its codes are counted per sub-block and how each
// sub-block's 16 levels are computed (as its decoder computes them, bit for
// bit), so that the pass itself has no switch on the type.
#ifndef TENSORMORPH_CORE_STATS_CODE_BLOCKS_H_
#define TENSORMORPH_CORE_STATS_CODE_BLOCKS_H_

#include <cstdint>

#include "core/dtype.h"
#include "core/quant/encoding.h"
#include "core/quant/sub_block_runs.h"
#include "core/stats_codes.h"
#include "core/tensor.h"

namespace tensormorph {

// The most sub-blocks a row's block has.
inline constexpr int kMaxCodeSubBlocks = 16;

struct CodeBlockType {
  DType dtype;
  int64_t elements, bytes;  // of a block (GetDTypeInfo's)
  int sub_blocks;           // of elements / sub_blocks each, in order
                            // (SubBlocksPerBlock)
  // Each sub-block's run: count, group (the first given), end levels
  // (GetSubBlockRanges).
  SubBlockRunsFn runs;
  // count[s][k]: the number of code k in sub-block s; by vector compares
  // at `simd` kAvx2 or kAvx512, the same counts at every level.
  void (*count)(const uint8_t* block, DecodeSimd simd, uint32_t count[][16]);
  // levels[s]: sub-block s's 16 levels as the decoder computes them, marked
  // against its run's end levels (ComputeAffineLevels and friends).
  void (*levels)(const uint8_t* block, const QuantRun* runs, bool avx2,
                 AffineLevels* levels);
  // The index within the block of its first element whose code has its
  // top bit set (8 of a 4-bit code, 4 of a 3-bit, 2 of a 2-bit), or -1 where
  // none has: where StatsPass asks Inspect whether codes read as signed.
  int (*first_high_code)(const uint8_t* block);
};

// The row of `t`'s type and, in *blocks, its blocks where they are stored:
// a ggml tensor of one stored tensor, its elements in order, whole blocks
// of a type with a row (Q4_0, Q4_1, Q4_K, IQ4_NL, IQ4_XS, MXFP4, TQ2_0,
// Q2_K, Q3_K).
// nullptr otherwise.
const CodeBlockType* StoredCodeBlocks(const LogicalTensor& t,
                                      const uint8_t** blocks);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_STATS_CODE_BLOCKS_H_
