#include "core/io/read_ahead.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace tensormorph {
namespace {

// The whole pages under `bytes` get `advice`; a failure (not a mapping)
// changes nothing.
void Advise(absl::Span<const uint8_t> bytes, int advice) {
  if (bytes.empty()) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin =
      reinterpret_cast<uintptr_t>(bytes.data()) & ~(page - 1);
  const uintptr_t end =
      (reinterpret_cast<uintptr_t>(bytes.data()) + bytes.size() + page - 1) &
      ~(page - 1);
  (void)::madvise(reinterpret_cast<void*>(begin), end - begin, advice);
}

}  // namespace

ReadAhead::~ReadAhead() { Restore(); }

ReadAhead::ReadAhead(ReadAhead&& other) noexcept
    : region_(other.region_),
      last_end_(other.last_end_),
      advised_(std::exchange(other.advised_, false)) {}

ReadAhead& ReadAhead::operator=(ReadAhead&& other) noexcept {
  if (this != &other) {
    Restore();
    region_ = other.region_;
    last_end_ = other.last_end_;
    advised_ = std::exchange(other.advised_, false);
  }
  return *this;
}

void ReadAhead::Restore() {
  if (!advised_) return;
  // As MappedFile maps: scattered reads fault in single pages again.
  Advise(region_, MADV_RANDOM);
  advised_ = false;
}

void ReadAhead::Reading(absl::Span<const uint8_t> bytes) {
  if (advised_) return;
  const uint8_t* at = std::max(bytes.data(), region_.data());
  const uint8_t* end =
      std::min(bytes.data() + bytes.size(), region_.data() + region_.size());
  if (at >= end) return;
  const bool sequential =
      at == last_end_ || static_cast<size_t>(end - at) >= kMinSequentialRead;
  last_end_ = end;
  if (!sequential) return;
  Advise(region_, MADV_NORMAL);
  advised_ = true;
}

ElementReadAhead::ElementReadAhead(
    const std::vector<absl::Span<const uint8_t>>& parts, int64_t elements)
    : elements_(elements) {
  for (absl::Span<const uint8_t> p : parts) {
    parts_.push_back({p, ReadAhead(p)});
  }
}

void ElementReadAhead::Reading(int64_t first, int64_t count) {
  if (elements_ <= 0 || count <= 0) return;
  // In double: a hint needs no exact byte, and first * size could overflow
  // int64. The same element gives the same byte, so a read that starts
  // where the last ended is seen as sequential.
  const double elements = static_cast<double>(elements_);
  for (Part& p : parts_) {
    if (p.read_ahead.sequential()) continue;
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
