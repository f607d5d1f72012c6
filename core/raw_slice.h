// Reading the stored bytes of a slice, without decoding.
#ifndef TENSORMORPH_CORE_RAW_SLICE_H_
#define TENSORMORPH_CORE_RAW_SLICE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/format/stored_tensor.h"
#include "core/io/read_ahead.h"
#include "core/slice.h"
#include "core/tensor.h"

namespace tensormorph {

// Copies the stored bytes a slice selects, in row-major result order.
// Plain one-byte-or-wider dtypes allow any slice; packed and block dtypes
// (F4, F6, ggml blocks) allow slices that take whole blocks along the last
// dimension. Thread safety: one thread at a time.
class RawSliceReader {
 public:
  // Errors: UNIMPLEMENTED when the tensor is built from several stored
  // tensors (a convention); INVALID_ARGUMENT when the slice splits blocks,
  // naming the block size.
  static absl::StatusOr<RawSliceReader> Create(const LogicalTensor& tensor,
                                               ResolvedSlice slice);

  const ResolvedSlice& slice() const { return slice_; }
  DType dtype() const { return stored_->dtype; }
  // Elements per storage block: chunk boundaries must be multiples of it.
  int64_t block_elems() const { return block_elems_; }
  int64_t block_bytes() const { return block_bytes_; }
  // Bytes of the whole result.
  int64_t total_bytes() const {
    return slice_.num_elements / block_elems_ * block_bytes_;
  }

  // Appends the bytes of result elements [first, first + count) to `out`.
  // REQUIRES: first and count are multiples of block_elems(); the range
  // lies inside the result.
  void Read(int64_t first, int64_t count, std::string* out) const;
  // The same into `out`, which holds count / block_elems() * block_bytes().
  void ReadInto(int64_t first, int64_t count, char* out) const;
  // The stored bytes of result elements [first, first + count) when the
  // whole result is one run of the stored tensor (row ranges of whole rows,
  // the whole tensor); empty otherwise. A view of the mapping: no copy, and
  // a fault when the file shrinks under it (read it under GuardedRead).
  // REQUIRES: as Read.
  absl::Span<const uint8_t> Contiguous(int64_t first, int64_t count) const;

 private:
  RawSliceReader() = default;

  const StoredTensor* stored_ = nullptr;
  ResolvedSlice slice_;
  std::vector<int64_t> strides_;
  int64_t contiguous_start_ = -1;  // stored index of element 0, if one run
  int64_t block_elems_ = 1;
  int64_t block_bytes_ = 1;
  // Contiguous runs read front to back ask for the bytes ahead (a cold
  // file then streams at the disk's rate). Hint state only, so mutable.
  mutable ReadAhead read_ahead_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_RAW_SLICE_H_
