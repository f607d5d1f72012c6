// The representable levels of one quantization group: every value a code of
// the group can decode to, as the histogram's tick marks.
#ifndef TENSORMORPH_CORE_QUANT_LEVELS_H_
#define TENSORMORPH_CORE_QUANT_LEVELS_H_

#include <cstdint>
#include <vector>

#include "core/quant/scalar_info.h"

namespace tensormorph {

// Codes wider than this are not listed (2^16 levels is already more than a
// histogram can show; a 32-bit code would be 4 G of them).
inline constexpr int kMaxListedLevelBits = 16;

// The levels of the group of the element `s` describes (an Inspect result):
// for an integer grid scale * level + offset for every level, for a codebook
// scale * entry for every finite entry, each computed in float32 the way the
// ggml and convention decoders compute it (product rounded, then the offset
// added and rounded) and widened to double; sorted ascending, duplicates
// (+0 and -0, a zero scale) collapsed. Empty for plain dtypes (Grid::kNone)
// and for grids of more than 2^kMaxListedLevelBits levels.
std::vector<double> GroupLevels(const ScalarInfo& s);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_LEVELS_H_
