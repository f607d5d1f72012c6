// A bounds-checked little-endian cursor over untrusted bytes.
#ifndef TENSORMORPH_CORE_IO_BYTE_READER_H_
#define TENSORMORPH_CORE_IO_BYTE_READER_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tensormorph {

// Every read checks the bytes remaining first and reports failure instead of
// reading past the end; the cursor does not move on failure.
// Thread safety: a ByteReader is a value; do not share one between threads.
class ByteReader {
 public:
  explicit ByteReader(absl::Span<const uint8_t> bytes) : bytes_(bytes) {}

  uint64_t offset() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }
  uint64_t size() const { return bytes_.size(); }

  // Reads a little-endian trivially copyable value.
  template <typename T>
  bool Read(T* out) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (remaining() < sizeof(T)) return false;
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }

  // Returns a view of the next `n` bytes and advances past them.
  bool ReadBytes(uint64_t n, absl::string_view* out) {
    if (remaining() < n) return false;
    *out = absl::string_view(
        reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return true;
  }

  bool Skip(uint64_t n) {
    if (remaining() < n) return false;
    pos_ += n;
    return true;
  }

  bool Seek(uint64_t offset) {
    if (offset > bytes_.size()) return false;
    pos_ = offset;
    return true;
  }

 private:
  absl::Span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_BYTE_READER_H_
