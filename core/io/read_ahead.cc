#include "core/io/read_ahead.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

namespace tensormorph {
namespace {

uintptr_t PageSize() {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

void WillNeed(absl::Span<const uint8_t> bytes) {
  if (bytes.empty()) return;
  const uintptr_t page = PageSize();
  uintptr_t at = reinterpret_cast<uintptr_t>(bytes.data()) & ~(page - 1);
  const uintptr_t end =
      reinterpret_cast<uintptr_t>(bytes.data()) + bytes.size();
  // MADV_WILLNEED on a file mapping starts the reads and returns: the
  // faults that follow find the pages cached or in flight. The kernel reads
  // at most the device's read-ahead size per call (force_page_cache_ra:
  // 128 KiB by default, 8 MiB on this project's VMs), the rest of a longer
  // range silently not at all, so the range goes in pieces no device cuts
  // short. Pages already cached cost a lookup each, and a piece a syscall.
  // Errors (ENOMEM for memory that is not mapped from a file, EBADF) leave
  // reads as they were: it is a hint.
  constexpr uintptr_t kPiece = uintptr_t{128} << 10;
  while (at < end) {
    const uintptr_t n = std::min(kPiece, end - at);
    (void)::madvise(reinterpret_cast<void*>(at), n, MADV_WILLNEED);
    at += n;
  }
}

void ReadAhead::Reading(absl::Span<const uint8_t> bytes) {
  const uint8_t* region_begin = region_.data();
  const uint8_t* region_end = region_.data() + region_.size();
  const uint8_t* at = std::max(bytes.data(), region_begin);
  const uint8_t* end = std::min(bytes.data() + bytes.size(), region_end);
  if (at >= end) return;
  const bool sequential =
      at == last_end_ || static_cast<size_t>(end - at) >= kMinSequentialRead;
  last_end_ = end;
  if (!sequential) return;
  const bool inside = at >= hinted_begin_ && at <= hinted_end_;
  // Well ahead of the reader already: nothing to ask for yet.
  if (inside && static_cast<size_t>(hinted_end_ - std::min(end, hinted_end_)) >=
                    window_ / 2) {
    return;
  }
  const uint8_t* from = inside ? std::max(hinted_end_, at) : at;
  const size_t room = static_cast<size_t>(region_end - end);
  const uint8_t* to = end + std::min(window_, room);
  if (from < to) WillNeed({from, static_cast<size_t>(to - from)});
  if (!inside) hinted_begin_ = at;
  hinted_end_ = std::max(to, inside ? hinted_end_ : to);
}

ElementReadAhead::ElementReadAhead(
    const std::vector<absl::Span<const uint8_t>>& parts, int64_t elements,
    size_t window)
    : elements_(elements) {
  for (absl::Span<const uint8_t> p : parts) {
    parts_.push_back({p, ReadAhead(p, window)});
  }
}

void ElementReadAhead::Reading(int64_t first, int64_t count) {
  if (elements_ <= 0 || count <= 0) return;
  // In double: a hint needs no exact byte, and first * size could overflow
  // int64. The same element gives the same byte, so a read that starts
  // where the last ended is seen as sequential.
  const double elements = static_cast<double>(elements_);
  for (Part& p : parts_) {
    const double per = static_cast<double>(p.data.size()) / elements;
    const size_t a = std::min(
        p.data.size(), static_cast<size_t>(static_cast<double>(first) * per));
    const size_t b =
        std::min(p.data.size(),
                 static_cast<size_t>(static_cast<double>(first + count) * per));
    if (a < b) p.read_ahead.Reading(p.data.subspan(a, b - a));
  }
}

}  // namespace tensormorph
