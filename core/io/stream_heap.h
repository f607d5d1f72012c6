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

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_STREAM_HEAP_H_
