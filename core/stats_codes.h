// A run's 4-bit codes counted in bulk: what ComputeStats needs to take a
// group's histogram, end levels and level usage once per level the group
// uses rather than once per element.
#ifndef TENSORMORPH_CORE_STATS_CODES_H_
#define TENSORMORPH_CORE_STATS_CODES_H_

#include <cstdint>

namespace tensormorph {

// Sets count[k] to the number of codes k among c[0, n) (n < 2^31), for k <
// 16. Returns false when a code is 16 or more (then `count` is
// unspecified). `readable`: bytes readable from c (>= n): with `avx2` (the
// caller's CPU has it), 32 codes at a time by vector compares, which read
// whole 32-byte loads where they fit in it and copy the tail otherwise; the
// same counts either way.
bool CountCodes(const uint8_t* c, int64_t n, int64_t readable, bool avx2,
                uint32_t count[16]);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_STATS_CODES_H_
