// A ReadSlice message as it arrived, its data left where gRPC holds it: the
// .npy download (GET /v1/tensor.npy) writes a chunk's bytes to the socket
// from the buffers the in-process channel handed over (the service's own,
// slice_source.h), where parsing a v1::SliceChunk would first copy every
// byte into its `data` string (a quarter of the download's CPU, measured).
// The other fields are parsed as protobuf parses them.
#ifndef TENSORMORPH_SERVER_HTTP_SLICE_CHUNK_VIEW_H_
#define TENSORMORPH_SERVER_HTTP_SLICE_CHUNK_VIEW_H_

#include <grpcpp/grpcpp.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "tensormorph/v1/tensormorph.grpc.pb.h"

namespace tensormorph {

// Thread safety: a value, as safe as a std::vector.
class SliceChunkView {
 public:
  // Reads `message` (a serialized v1::SliceChunk): its fields but `data`
  // into fields(), `data` as spans over the message's slices, which the
  // view holds. Errors: INTERNAL when it is not a SliceChunk's wire form.
  absl::Status Parse(grpc::ByteBuffer& message);

  // The chunk's fields, `data` left empty.
  const v1::SliceChunk& fields() const { return fields_; }
  // `data`, in order, as pieces of the message's slices.
  const std::vector<absl::string_view>& data() const { return data_; }
  size_t data_size() const { return data_size_; }

 private:
  std::vector<grpc::Slice> slices_;  // hold the bytes data_ points into
  v1::SliceChunk fields_;
  std::vector<absl::string_view> data_;
  size_t data_size_ = 0;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_SLICE_CHUNK_VIEW_H_
