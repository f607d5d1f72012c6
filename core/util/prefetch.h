// A software prefetch a fixed distance ahead of a pointer, for passes that
// read float32 where a file is mapped: from memory rather than cache, where
// the hardware prefetcher alone left their loads waiting (stats.cc's fold,
// F32 statistics 232 -> 658 M elements/s; heatmap_sq_error.cc's source).
#ifndef TENSORMORPH_CORE_UTIL_PREFETCH_H_
#define TENSORMORPH_CORE_UTIL_PREFETCH_H_

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tensormorph {

// Asks for the cache line kBytes past `p`, which may lie past the data: a
// prefetch never faults, and the address is formed as an integer, so no
// pointer past an array is ever made. A no-op off x86-64.
template <int kBytes>
inline void PrefetchAhead(const void* p) {
#if defined(__x86_64__)
  _mm_prefetch(
      reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + kBytes),
      _MM_HINT_T0);
#else
  (void)p;
#endif
}

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_UTIL_PREFETCH_H_
