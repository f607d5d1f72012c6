// EmbeddedSliceReader: EmbeddedClient's slices, read straight from the
// in-process service's SliceSource (server/slice_source.h) into the
// caller's callbacks: the same checks, fault guard, header and bytes as the
// ReadSlice RPC, without serializing each chunk, queueing it in the
// in-process transport and parsing it back.
#ifndef TENSORMORPH_CLIENT_EMBEDDED_LOCAL_SLICE_READER_H_
#define TENSORMORPH_CLIENT_EMBEDDED_LOCAL_SLICE_READER_H_

#include <memory>

#include "client/client.h"
#include "server/server.h"

namespace tensormorph {

// Thread safety: Read may be called from many threads at once.
class EmbeddedSliceReader final : public LocalSliceReader {
 public:
  explicit EmbeddedSliceReader(std::shared_ptr<TensormorphServer> server)
      : server_(std::move(server)) {}

  // Chunks are produced on the service's worker pool one ahead of the
  // caller (two chunk buffers, whatever the slice's size), and the pages of
  // the file mapping the read touched are let go every kReleaseEvery bytes
  // (SliceSource::ReleaseMappedPages), so this process's resident memory
  // stays bounded too. Errors: as the ReadSlice RPC; CANCELLED when a
  // callback returns false; DEADLINE_EXCEEDED past `deadline`.
  absl::Status Read(
      const v1::ReadSliceRequest& request, absl::Time deadline,
      const std::function<bool(const v1::SliceHeader&)>& on_header,
      const std::function<bool(absl::Span<const absl::string_view>)>& on_pieces)
      override;

  static constexpr size_t kReleaseEvery = size_t{16} << 20;

 private:
  std::shared_ptr<TensormorphServer> server_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_EMBEDDED_LOCAL_SLICE_READER_H_
