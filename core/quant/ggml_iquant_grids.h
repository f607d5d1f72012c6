// The codebooks of ggml's IQ1, IQ2 and IQ3 types: each grid entry packs
// 8 (IQ1, IQ2) or 4 (IQ3) coordinates, byte k being coordinate k (IQ1's as
// int8 -1/0/+1, the others unsigned magnitudes); the sign tables say which
// of an 8-element group are negated. They are part of each format's
// definition, so they are data here: generated through the pinned ggml's own
// to_float by tests/tools/gen_iquant_grids.py and checked entry by entry
// against it by tests/oracle/iquant_grids_test.cc.
#ifndef TENSORMORPH_CORE_QUANT_GGML_IQUANT_GRIDS_H_
#define TENSORMORPH_CORE_QUANT_GGML_IQUANT_GRIDS_H_

#include <cstdint>

namespace tensormorph {

extern const uint64_t kIq2XxsGrid[256];  // ggml's iq2xxs_grid
extern const uint64_t kIq2XsGrid[512];   // iq2xs_grid
extern const uint64_t kIq2SGrid[1024];   // iq2s_grid
extern const uint32_t kIq3XxsGrid[256];  // iq3xxs_grid
extern const uint32_t kIq3SGrid[512];    // iq3s_grid
extern const uint64_t kIq1SGrid[2048];   // iq1s_grid (IQ1_S and IQ1_M)
// ksigns_iq2xs: the 7 stored sign bits of a group, with an 8th making the
// count of negated elements even.
extern const uint8_t kIq2SignsOfIndex[128];
// kmask_iq2xs: element k of a group is negated when its sign byte has
// kIq2SignMask[k] set.
extern const uint8_t kIq2SignMask[8];

// IQ1_S and IQ1_M shift every coordinate by +-IQ1S_DELTA.
inline constexpr float kIq1Delta = 0.125f;

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_GGML_IQUANT_GRIDS_H_
