// Process-wide heap settings for programs that stream 1 MiB messages.
#ifndef TENSORMORPH_CORE_IO_STREAM_HEAP_H_
#define TENSORMORPH_CORE_IO_STREAM_HEAP_H_

namespace tensormorph {

// Keeps buffers up to 4 MiB on the heap instead of an mmap and munmap (and
// 256 page faults) per 1 MiB message, and keeps up to 32 MiB freed at the
// top of a heap for the next ones: a bound on what a burst of streams leaves
// behind. Without it a fresh process streams at a fifth of a warm one's
// speed. Call once, first thing in main().
void KeepStreamBuffersOnHeap();

// Returns the heaps' free memory to the system (malloc_trim): for when a
// burst of streams is over, so that what it kept does not stay resident.
// Takes a few milliseconds; call it off the latency path.
void ReleaseFreeHeapMemory();

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_STREAM_HEAP_H_
