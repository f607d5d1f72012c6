// Process-wide heap settings for programs that stream 1 MiB messages: a
// policy of the process (its entry point decides), not of the numerics, so
// it lives outside core/ and depends on nothing but libc.
#ifndef TENSORMORPH_SERVER_STREAM_HEAP_H_
#define TENSORMORPH_SERVER_STREAM_HEAP_H_

namespace tensormorph {

// Keeps buffers up to 4 MiB on the heap instead of an mmap and munmap (and
// 256 page faults) per 1 MiB message, and keeps up to 32 MiB freed at the
// top of the heap for the next ones. Without it a fresh process streams at a
// fifth of a warm one's speed. One heap (arena) for all threads: malloc_trim
// shrinks only the main arena's top, so every per-thread arena would keep up
// to 32 MiB resident after a burst (48 readers left 20-40 MB behind); small
// allocations stay per thread in glibc's tcache. Call once, first thing in
// main(), before any thread starts.
void KeepStreamBuffersOnHeap();

// Returns the heap's free memory to the system (malloc_trim): for when a
// burst of streams is over, so that what it kept does not stay resident.
// Takes a few milliseconds; call it off the latency path.
void ReleaseFreeHeapMemory();

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_STREAM_HEAP_H_
