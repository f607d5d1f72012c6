#include "server/stream_heap.h"

#include <malloc.h>

namespace tensormorph {

void KeepStreamBuffersOnHeap() {
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 32 << 20);
  mallopt(M_ARENA_MAX, 1);
}

void ReleaseFreeHeapMemory() { malloc_trim(0); }

}  // namespace tensormorph
