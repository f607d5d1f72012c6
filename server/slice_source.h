// SliceSource: the data of one ReadSlice, chunk by chunk, as the service
// checks and reads it. The ReadSlice reactor streams its chunks; the
// embedded client (client/embedded/) hands them to a caller in the same
// process without serializing them. One code path, so both give the same
// header, the same bytes and the same refusals.
#ifndef TENSORMORPH_SERVER_SLICE_SOURCE_H_
#define TENSORMORPH_SERVER_SLICE_SOURCE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/format/checkpoint.h"
#include "core/raw_slice.h"
#include "core/slice.h"
#include "server/service.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// The request's fields that need no checkpoint: a mode outside OutputMode
// (proto3 keeps unknown enum numbers, and JSON carries them as raw
// numbers) and a negative chunk bound are refused, not read as defaults.
// Errors: INVALID_ARGUMENT naming the field, the value and what is valid.
absl::Status CheckReadSliceRequest(const v1::ReadSliceRequest& req);

// Thread safety: one thread at a time (calls may move between threads).
// The checkpoint stays open (its mapping alive) for the object's life.
class SliceSource {
 public:
  // Checks `req` (CheckReadSliceRequest), opens its checkpoint through the
  // registry, finds the tensor, resolves the slice and sizes the chunks:
  // at most req.max_chunk_bytes (0: the server's), never past
  // limits.max_chunk_bytes; raw chunks hold whole storage blocks.
  // Errors: those of ReadSlice in tensormorph.proto (INVALID_ARGUMENT,
  // NOT_FOUND, PERMISSION_DENIED, OUT_OF_RANGE, UNIMPLEMENTED raw of a
  // convention, DATA_LOSS, RESOURCE_EXHAUSTED past max_slice_bytes).
  static absl::StatusOr<std::unique_ptr<SliceSource>> Open(
      ServiceState& state, const v1::ReadSliceRequest& req);

  // Shape, dtype, element count and bytes of the whole result.
  const v1::SliceHeader& header() const { return header_; }
  // The first element, element count and bytes of the next chunk. An
  // empty slice has one chunk, of no elements.
  int64_t next_offset() const { return next_; }
  int64_t next_count() const;
  size_t next_bytes() const;
  // Every chunk was read.
  bool done() const { return read_any_ && next_ >= total_; }
  // The most bytes a chunk holds: the size of a buffer any chunk fits in.
  size_t max_chunk_bytes() const;

  // Copies (raw) or decodes (float32) the next chunk into `out` under the
  // fault guard, and moves past it. Before the last chunk's bytes may be
  // handed on, the files read must still be the ones opened.
  // REQUIRES: !done(); `out` holds next_bytes() bytes, 4-byte aligned.
  // Errors: FAILED_PRECONDITION when the file faulted (truncated under the
  // mapping); ABORTED when a file changed since it was opened
  // (Checkpoint::CheckFileUnchanged: the data may mix old and new bytes);
  // UNIMPLEMENTED from a decoder.
  absl::Status ReadNext(uint8_t* out);

  // Drops this process's page table entries for the tensor's file bytes
  // (madvise MADV_DONTNEED; the page cache keeps the pages): a reader in
  // the caller's process calls it as it goes, so that its resident memory
  // stays bounded instead of growing to the tensor's size. Reads after it
  // fault the pages back in; the bytes are the same.
  void ReleaseMappedPages() const;

 private:
  SliceSource() = default;
  absl::Status CheckFilesUnchanged() const;

  std::shared_ptr<const Checkpoint> ckpt_;  // keeps the mapping alive
  std::vector<int> files_;  // the tensor's, as indices into ckpt_->files()
  std::vector<const StoredTensor*> parts_;  // its stored tensors
  std::string tensor_name_;                 // as requested, for errors
  v1::SliceHeader header_;
  std::optional<SliceReader> decoded_;
  std::optional<RawSliceReader> raw_;
  int64_t total_ = 0;
  int64_t next_ = 0;
  int64_t per_chunk_ = 1;
  bool read_any_ = false;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_SLICE_SOURCE_H_
