// ReceivedChunk: a ReadSlice reply as gRPC received it, its small fields
// parsed and its data left where it arrived. Parsing a 1 MiB chunk into a
// v1::SliceChunk copies the data once more only to hand it on; this hands
// on views of the received slices instead. Both readers of ReadSlice's raw
// messages use it: the client library (Client::ReadSlicePieces) and the
// HTTP port's .npy download, which writes the data to its socket from the
// buffers the in-process channel handed over.
#ifndef TENSORMORPH_PROTO_RECEIVED_CHUNK_H_
#define TENSORMORPH_PROTO_RECEIVED_CHUNK_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// Thread safety: one thread at a time; it may be moved between threads.
class ReceivedChunk {
 public:
  // Takes the reply's bytes and parses them. Accepts and refuses exactly
  // what v1::SliceChunk's parser does: every field but `data` is parsed by
  // it; `data` (the last one, as proto3 keeps the last) is only located. A
  // reply with a group field, or a data field encoded other than the
  // shortest way, is parsed whole by it (and its data copied). A buffer
  // never filled (!Valid()) is the empty message.
  // Returns false when the bytes do not parse.
  bool Parse(grpc::ByteBuffer* buffer);

  // Every field but data.
  const v1::SliceChunk& fields() const { return fields_; }
  size_t data_size() const { return data_size_; }
  // Sets `pieces` to the data in order, as the contiguous pieces it arrived
  // in (none when empty). Valid until the next Parse or destruction.
  void DataPieces(std::vector<absl::string_view>* pieces) const;

 private:
  std::vector<grpc::Slice> slices_;
  v1::SliceChunk fields_;
  size_t data_slice_ = 0;   // where the data starts: the slice
  size_t data_offset_ = 0;  // and the offset in it
  size_t data_size_ = 0;
  bool owned_ = false;      // parsed whole: the data is owned_data_
  std::string owned_data_;  // then
  std::string rest_;        // the other fields' bytes, for the parser
};

}  // namespace tensormorph

#endif  // TENSORMORPH_PROTO_RECEIVED_CHUNK_H_
