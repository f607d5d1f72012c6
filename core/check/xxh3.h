// XXH3 for check's content hashes, at the widest vectors the CPU has.
// libxxhash's plain XXH3_64bits_update is built for the baseline ISA (SSE2
// on x86-64) and runs at about memory speed; its x86 dispatch entry points
// (xxh_x86dispatch.h, the same library) pick AVX2 or AVX-512 once at run
// time, which a hash of bytes still in cache (stored_hashes.h) needs to stay
// under the value pass's cost. The digests are the same whichever path runs.
#ifndef TENSORMORPH_CORE_CHECK_XXH3_H_
#define TENSORMORPH_CORE_CHECK_XXH3_H_

#include <xxhash.h>

#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
// Replaces XXH3_64bits and XXH3_64bits_update by their dispatching forms.
#include <xxh_x86dispatch.h>
#endif

#endif  // TENSORMORPH_CORE_CHECK_XXH3_H_
