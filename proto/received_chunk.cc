#include "proto/received_chunk.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <climits>
#include <cstdint>

namespace tensormorph {
namespace {

// SliceChunk.data's field number (tensormorph.proto).
constexpr uint64_t kDataField = 4;

// A read position over the received slices that never runs past the end.
class Cursor {
 public:
  explicit Cursor(const std::vector<grpc::Slice>& slices) : slices_(slices) {
    SkipEmpty();
  }

  bool AtEnd() const { return slice_ == slices_.size(); }
  size_t slice() const { return slice_; }
  size_t offset() const { return offset_; }

  bool Byte(uint8_t* out) {
    if (AtEnd()) return false;
    *out = slices_[slice_].begin()[offset_];
    Advance(1);
    return true;
  }

  // A base-128 varint of at most 10 bytes; `length` is how many it took.
  bool Varint(uint64_t* out, int* length = nullptr) {
    uint64_t v = 0;
    for (int i = 0; i < 10; ++i) {
      uint8_t b;
      if (!Byte(&b)) return false;
      v |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
      if ((b & 0x80) == 0) {
        *out = v;
        if (length != nullptr) *length = i + 1;
        return true;
      }
    }
    return false;
  }

  // Moves past n bytes; false (and at the end) when fewer are left.
  bool Skip(uint64_t n) {
    while (n > 0) {
      if (AtEnd()) return false;
      const size_t left = slices_[slice_].size() - offset_;
      const size_t step = n < left ? static_cast<size_t>(n) : left;
      Advance(step);
      n -= step;
    }
    return true;
  }

  // Appends the bytes from `from` (an earlier copy of this cursor) to here.
  void AppendSince(const Cursor& from, std::string* out) const {
    size_t s = from.slice_, o = from.offset_;
    while (s < slice_ || (s == slice_ && o < offset_)) {
      const size_t end = s == slice_ ? offset_ : slices_[s].size();
      out->append(reinterpret_cast<const char*>(slices_[s].begin()) + o,
                  end - o);
      ++s;
      o = 0;
    }
  }

 private:
  void Advance(size_t n) {
    offset_ += n;
    if (offset_ == slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
      SkipEmpty();
    }
  }
  void SkipEmpty() {
    while (slice_ < slices_.size() && slices_[slice_].size() == 0) ++slice_;
  }

  const std::vector<grpc::Slice>& slices_;
  size_t slice_ = 0, offset_ = 0;
};

// Bytes of the shortest varint encoding of v.
int VarintLength(uint64_t v) {
  int n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

}  // namespace

bool ReceivedChunk::Parse(grpc::ByteBuffer* buffer) {
  slices_.clear();
  fields_.Clear();
  rest_.clear();
  owned_data_.clear();
  owned_ = false;
  data_slice_ = data_offset_ = data_size_ = 0;
  if (!buffer->Valid()) return true;  // the empty message, cleared above
  if (!buffer->Dump(&slices_).ok()) return false;
  Cursor at(slices_);
  bool whole = false;  // left to the parser, whole (see the header)
  while (!at.AtEnd() && !whole) {
    const Cursor field_start = at;
    uint64_t tag;
    int tag_length;
    if (!at.Varint(&tag, &tag_length) || (tag >> 3) == 0) return false;
    switch (tag & 7) {
      case 0: {
        uint64_t ignored;
        if (!at.Varint(&ignored)) return false;
        break;
      }
      case 1:
        if (!at.Skip(8)) return false;
        break;
      case 5:
        if (!at.Skip(4)) return false;
        break;
      case 2: {
        uint64_t len;
        int len_length;
        if (!at.Varint(&len, &len_length)) return false;
        if ((tag >> 3) == kDataField) {
          // The data field as every encoder writes it: a one-byte tag and a
          // shortest length that fits an int32. Anything else is the
          // parser's to judge (an overlong varint, a length past 2 GiB).
          if (tag_length != 1 || len_length != VarintLength(len) ||
              len > uint64_t{INT32_MAX}) {
            whole = true;
            continue;
          }
          data_slice_ = at.slice();
          data_offset_ = at.offset();
          data_size_ = static_cast<size_t>(len);
          if (!at.Skip(len)) return false;
          continue;  // not one of the fields the parser is given
        }
        if (!at.Skip(len)) return false;
        break;
      }
      default:
        whole = true;
        continue;
    }
    at.AppendSince(field_start, &rest_);
  }
  if (!whole) return fields_.ParseFromString(rest_);
  // Rare enough (no server of ours sends groups) to pay a copy for.
  fields_.Clear();
  grpc::ProtoBufferReader reader(buffer);
  if (!fields_.ParseFromZeroCopyStream(&reader)) return false;
  owned_data_ = std::move(*fields_.mutable_data());
  fields_.clear_data();
  data_size_ = owned_data_.size();
  owned_ = true;
  slices_.clear();
  return true;
}

void ReceivedChunk::DataPieces(std::vector<absl::string_view>* pieces) const {
  pieces->clear();
  if (owned_) {
    if (!owned_data_.empty()) pieces->push_back(owned_data_);
    return;
  }
  size_t s = data_slice_, o = data_offset_, left = data_size_;
  while (left > 0) {
    const size_t n = std::min(left, slices_[s].size() - o);
    if (n > 0) {
      pieces->emplace_back(
          reinterpret_cast<const char*>(slices_[s].begin()) + o, n);
    }
    left -= n;
    ++s;
    o = 0;
  }
}

}  // namespace tensormorph
