// Read-ahead for mapped checkpoint bytes. Mappings are made MADV_RANDOM
// (mapped_file.h): a scattered read then faults in one page, not the
// kernel's read-around window. But a file not in the page cache read front
// to back that way waits on the disk one page at a time (0.02x a
// sequential read(), tests/bench/cold_bench.cc), so a reader that goes
// front to back gives its region the kernel's own read-ahead while it
// reads: MADV_NORMAL, whose faults start asynchronous reads ahead of the
// reader. Chosen by measurement against MADV_WILLNEED of a window ahead
// (0.53x read()), MADV_SEQUENTIAL (0.93x) and MADV_POPULATE_READ of each
// step (0.001x: its faults stay one page each): MADV_NORMAL read at
// 0.97-1.23x.
#ifndef TENSORMORPH_CORE_IO_READ_AHEAD_H_
#define TENSORMORPH_CORE_IO_READ_AHEAD_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tensormorph {

// Follows one reader through one region of a mapping (a stored tensor's
// bytes). Once its reads show they run front to back (a read at least
// kMinSequentialRead long, or one that starts where the previous ended),
// the region's pages get the kernel's read-ahead (MADV_NORMAL) until this
// object is destroyed, when they go back to MADV_RANDOM. Scattered small
// reads (a strided slice, single scalars) change nothing. Nothing is ever
// read from the region here (no fault is possible); advice that fails is
// ignored, and on memory not mapped from a file it only concerns swap.
// Another reader of the same pages sees their read-ahead too, and loses it
// when the first one's ends: only its speed changes, never its bytes.
// Thread safety: none (one per reader). Movable, not copyable.
class ReadAhead {
 public:
  static constexpr size_t kMinSequentialRead = size_t{64} << 10;

  ReadAhead() = default;
  explicit ReadAhead(absl::Span<const uint8_t> region) : region_(region) {}
  ~ReadAhead();
  ReadAhead(ReadAhead&& other) noexcept;
  ReadAhead& operator=(ReadAhead&& other) noexcept;
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // Called before reading `bytes` (within the region).
  void Reading(absl::Span<const uint8_t> bytes);

  // Whether the region has the kernel's read-ahead now.
  bool sequential() const { return advised_; }

 private:
  void Restore();

  absl::Span<const uint8_t> region_;
  const uint8_t* last_end_ = nullptr;  // where the previous read ended
  bool advised_ = false;
};

// ReadAhead over the stored parts of one tensor, followed by element: parts
// that store the elements in order (blocks, and their scales alike) hold
// elements [first, first + count) at the same fraction of each part. A part
// laid out otherwise (transposed) reads as scattered, and is left alone.
// Thread safety: none (one per reader).
class ElementReadAhead {
 public:
  ElementReadAhead() = default;
  // REQUIRES: `parts` outlive this (they are a mapping's bytes).
  ElementReadAhead(const std::vector<absl::Span<const uint8_t>>& parts,
                   int64_t elements);

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
