#include "server/http/slice_chunk_view.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace tensormorph {
namespace {

// SliceChunk's `data`: field 4, length-delimited.
constexpr uint32_t kDataField = 4;

// Reads a message spread over slices, byte by byte or span by span.
class Cursor {
 public:
  explicit Cursor(const std::vector<grpc::Slice>& slices) : slices_(slices) {
    Skip();
  }
  bool done() const { return slice_ == slices_.size(); }

  bool Byte(uint8_t* b) {
    if (done()) return false;
    *b = slices_[slice_].begin()[pos_];
    Advance(1);
    return true;
  }
  // A base-128 varint of at most 10 bytes, its bytes appended to `raw`.
  bool Varint(uint64_t* v, std::string* raw) {
    *v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      uint8_t b = 0;
      if (!Byte(&b)) return false;
      raw->push_back(static_cast<char>(b));
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // The next `n` bytes as spans in place (appended to `spans`), or copied
  // onto `raw` when `spans` is null.
  bool Take(uint64_t n, std::vector<absl::string_view>* spans,
            std::string* raw) {
    while (n > 0) {
      if (done()) return false;
      const grpc::Slice& s = slices_[slice_];
      const size_t k = std::min<uint64_t>(n, s.size() - pos_);
      const absl::string_view piece(
          reinterpret_cast<const char*>(s.begin()) + pos_, k);
      if (spans != nullptr) {
        spans->push_back(piece);
      } else {
        raw->append(piece.data(), piece.size());
      }
      Advance(k);
      n -= k;
    }
    return true;
  }

 private:
  void Advance(size_t k) {
    pos_ += k;
    Skip();
  }
  // Past the ends of slices (and empty ones).
  void Skip() {
    while (slice_ < slices_.size() && pos_ == slices_[slice_].size()) {
      ++slice_;
      pos_ = 0;
    }
  }
  const std::vector<grpc::Slice>& slices_;
  size_t slice_ = 0;
  size_t pos_ = 0;
};

absl::Status NotAChunk(absl::string_view why) {
  return absl::InternalError(
      absl::StrCat("a ReadSlice message is not a SliceChunk: ", why));
}

}  // namespace

absl::Status SliceChunkView::Parse(grpc::ByteBuffer& message) {
  slices_.clear();
  data_.clear();
  data_size_ = 0;
  // A buffer never filled is the empty message.
  if (message.Valid() && !message.Dump(&slices_).ok()) {
    return NotAChunk("unreadable buffer");
  }
  Cursor in(slices_);
  std::string rest;  // every field but data, as sent
  while (!in.done()) {
    std::string raw;
    uint64_t tag = 0;
    if (!in.Varint(&tag, &raw)) return NotAChunk("a cut tag");
    uint64_t n = 0;
    bool ok = true;
    switch (tag & 7) {
      case 0:  // varint
        ok = in.Varint(&n, &raw);
        break;
      case 1:  // fixed64
        ok = in.Take(8, nullptr, &raw);
        break;
      case 5:  // fixed32
        ok = in.Take(4, nullptr, &raw);
        break;
      case 2:  // length-delimited
        if (!in.Varint(&n, &raw)) return NotAChunk("a cut length");
        if ((tag >> 3) == kDataField) {
          // Protobuf keeps the last of a repeated singular field.
          data_.clear();
          data_size_ = n;
          ok = in.Take(n, &data_, nullptr);
          raw.clear();
        } else {
          ok = in.Take(n, nullptr, &raw);
        }
        break;
      default:
        return NotAChunk(absl::StrCat("wire type ", tag & 7));
    }
    if (!ok) return NotAChunk("a cut field");
    rest += raw;
  }
  fields_.Clear();
  if (!fields_.ParseFromString(rest)) return NotAChunk("bad fields");
  return absl::OkStatus();
}

}  // namespace tensormorph
