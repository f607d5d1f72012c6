// numpy-style slicing of logical tensors.
#ifndef TENSORMORPH_CORE_SLICE_H_
#define TENSORMORPH_CORE_SLICE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/io/read_ahead.h"
#include "core/tensor.h"

namespace tensormorph {

// One entry of a slice expression.
struct SliceItem {
  enum class Kind { kRange, kIndex, kEllipsis };
  Kind kind = Kind::kRange;
  std::optional<int64_t> start, stop, step;  // kRange; unset = numpy default
  int64_t index = 0;                         // kIndex
};

// Parses "0:4, ::2, -1, ..." (comma-separated; empty string = everything).
// Errors: INVALID_ARGUMENT naming the offending item (bad integer, step 0,
// more than one "...", more than three parts).
absl::StatusOr<std::vector<SliceItem>> ParseSlice(absl::string_view text);

// A slice resolved against a shape: for each dimension of the tensor, the
// first source index, the stride between picked indices, how many are
// picked, and whether the dimension stays in the result (integer indices
// drop it).
struct ResolvedDim {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
  bool keep = true;
};

struct ResolvedSlice {
  std::vector<ResolvedDim> dims;  // one per tensor dimension
  std::vector<int64_t> result_shape;
  int64_t num_elements = 0;
};

// Applies numpy's rules: negative indices count from the end, ranges clamp,
// a missing trailing part selects everything, "..." expands.
// Errors: OUT_OF_RANGE for an integer index outside its dimension (naming
// the dimension, the index and the size); INVALID_ARGUMENT for more indices
// than dimensions.
absl::StatusOr<ResolvedSlice> ResolveSlice(absl::Span<const SliceItem> items,
                                           absl::Span<const int64_t> shape);

// Reads a resolved slice of a tensor as float32 in row-major result order,
// in pieces: Read(first, count) yields result elements [first, first+count).
// Block-quantized storage is decoded only in the runs the slice touches.
// Thread safety: a SliceReader is used by one thread at a time.
class SliceReader {
 public:
  // REQUIRES: `slice` was resolved against `tensor.shape`; `tensor` outlives
  // the reader.
  SliceReader(const LogicalTensor& tensor, ResolvedSlice slice);

  const ResolvedSlice& slice() const { return slice_; }

  // REQUIRES: first + count <= slice().num_elements.
  // Errors: those of the tensor's encoding (UNIMPLEMENTED).
  absl::Status Read(int64_t first, int64_t count, float* out);

 private:
  // Decodes `n` elements of the innermost run starting at run position k.
  absl::Status ReadRun(int64_t source_base, int64_t k, int64_t n, float* out);

  const LogicalTensor& tensor_;
  ResolvedSlice slice_;
  std::vector<int64_t> strides_;  // row-major strides of the tensor
  std::vector<float> scratch_;
  // Source runs read front to back ask for the bytes ahead (a cold file
  // then streams at the disk's rate).
  ElementReadAhead read_ahead_;
};

// Convenience: the whole slice as one buffer.
absl::StatusOr<std::vector<float>> ReadSlice(const LogicalTensor& tensor,
                                             const ResolvedSlice& slice);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_SLICE_H_
