#include "core/io/object_reader.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/util/checked_math.h"

namespace tensormorph {

std::string ObjectIdentity::CacheKey(absl::string_view display) const {
  if (file.inode != 0) {
    return absl::StrCat("file:", display, "|", file.device, ":", file.inode,
                        ":", file.mtime_ns, ":", size);
  }
  // A weak ETag may name equivalent, not identical, bytes: only a strong
  // one names the bytes themselves.
  if (!etag.empty() && !absl::StartsWith(etag, "W/")) {
    return absl::StrCat(display, "|etag:", etag, ":", size);
  }
  return absl::StrCat(display, "|lm:", last_modified, ":", size);
}

absl::StatusOr<absl::Span<const uint8_t>> ObjectReader::Read(
    uint64_t offset, uint64_t length, char* scratch) const {
  if (absl::Status s = ReadAt(offset, length, scratch); !s.ok()) return s;
  return absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(scratch),
                                   length);
}

absl::Status ObjectReader::CheckRange(uint64_t offset, uint64_t length) const {
  const std::optional<uint64_t> end = CheckedAdd(offset, length);
  if (!end || *end > size()) {
    return absl::OutOfRangeError(
        absl::StrCat("'", display(), "': bytes [", offset, ", ",
                     end ? absl::StrCat(*end) : std::string("overflow"),
                     ") lie outside its ", size(), " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace tensormorph
