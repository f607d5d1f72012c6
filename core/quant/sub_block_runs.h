// The step, range and group of each sub-block of a storage block, read from
// the block's parameters alone: what DecodeRuns needs per run, without
// inspecting an element of it (a full ScalarInfo per 32 elements was a
// fifth of a diff's time). Each entry reproduces its codec's inspect
// exactly; tests hold them to InspectElement on random blocks.
#ifndef TENSORMORPH_CORE_QUANT_SUB_BLOCK_RUNS_H_
#define TENSORMORPH_CORE_QUANT_SUB_BLOCK_RUNS_H_

#include <cstdint>

#include "core/dtype.h"
#include "core/quant/encoding.h"

namespace tensormorph {

// Fills out[s] for each sub-block s of the block at `block` (one run per
// sub-block, SubBlocksPerBlock(dtype) of them): count = the sub-block's
// elements, group = `first_group` + s, and the steps and range that
// InspectElement reports for every element of that sub-block.
using SubBlockRunsFn = void (*)(const uint8_t* block, int64_t first_group,
                                QuantRun* out);

// The function for `dtype`, or nullptr where there is none (the caller
// inspects one element per sub-block instead).
SubBlockRunsFn GetSubBlockRuns(DType dtype);

// The same signature, filling each run's count, group and range only (its
// steps left 0): GetSubBlockRuns' function where there is one, else, for
// the codebook types IQ4_NL, IQ4_XS and MXFP4 (whose steps differ from
// level to level, so that DecodeRuns inspects them element by element), the
// range InspectElement reports for every element of the sub-block, the
// scale times the codebook's least and greatest level. nullptr for others.
// What ComputeStats' pass from codes needs of a sub-block.
SubBlockRunsFn GetSubBlockRanges(DType dtype);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_SUB_BLOCK_RUNS_H_
