// Read-ahead for mapped checkpoint bytes. Mappings are made MADV_RANDOM
// (mapped_file.h): a scattered read then faults in one page, not the
// kernel's read-around window. A file not in the page cache read front to
// back that way waits on the disk one page at a time, so sequential readers
// say what comes next, and the kernel reads it while they work.
#ifndef TENSORMORPH_CORE_IO_READ_AHEAD_H_
#define TENSORMORPH_CORE_IO_READ_AHEAD_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tensormorph {

// Starts reading the pages under `bytes` into the page cache without
// waiting for them (madvise MADV_WILLNEED over the whole pages it touches).
// Pages already cached cost a lookup each. A hint: memory that is not a
// file mapping, or a file truncated under it, is ignored, and nothing is
// ever read from `bytes` here (no fault is possible).
void WillNeed(absl::Span<const uint8_t> bytes);

// Follows one reader through one region (a stored tensor's bytes) and keeps
// `window` bytes ahead of it asked for (WillNeed), once the reads show they
// run front to back: a read at least kMinSequentialRead long, or one that
// starts where the previous ended. Scattered small reads (a strided slice,
// single scalars) are never hinted: read-ahead would fetch bytes nobody
// reads. Each byte is hinted about once while reads stay sequential.
// Thread safety: none (one per reader).
class ReadAhead {
 public:
  static constexpr size_t kDefaultWindow = size_t{32} << 20;
  static constexpr size_t kMinSequentialRead = size_t{64} << 10;

  ReadAhead() = default;
  explicit ReadAhead(absl::Span<const uint8_t> region,
                     size_t window = kDefaultWindow)
      : region_(region), window_(window) {}

  // Called before reading `bytes` (within the region; the part outside it
  // is not hinted).
  void Reading(absl::Span<const uint8_t> bytes);

 private:
  absl::Span<const uint8_t> region_;
  size_t window_ = kDefaultWindow;
  const uint8_t* last_end_ = nullptr;      // where the previous read ended
  const uint8_t* hinted_begin_ = nullptr;  // [begin, end) asked for
  const uint8_t* hinted_end_ = nullptr;
};

// ReadAhead over the stored parts of one tensor, followed by element: parts
// that store the elements in order (blocks, and their scales alike) hold
// elements [first, first + count) at the same fraction of each part. A part
// laid out otherwise (transposed) gets hints for bytes read later or never:
// harmless, and as scattered reads, soon none at all.
// Thread safety: none (one per reader).
class ElementReadAhead {
 public:
  ElementReadAhead() = default;
  // REQUIRES: `parts` outlive this (they are a mapping's bytes).
  ElementReadAhead(const std::vector<absl::Span<const uint8_t>>& parts,
                   int64_t elements, size_t window = ReadAhead::kDefaultWindow);

  // Called before reading elements [first, first + count).
  void Reading(int64_t first, int64_t count);

 private:
  struct Part {
    absl::Span<const uint8_t> data;
    ReadAhead read_ahead;
  };
  std::vector<Part> parts_;
  int64_t elements_ = 0;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_READ_AHEAD_H_
