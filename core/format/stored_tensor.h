// A tensor exactly as a file stores it.
#ifndef TENSORMORPH_CORE_FORMAT_STORED_TENSOR_H_
#define TENSORMORPH_CORE_FORMAT_STORED_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "core/dtype.h"

namespace tensormorph {

// Invariants established by the readers at open time (and relied on
// everywhere else): the element count fits in int64 and is a multiple of the
// dtype's block size; nbytes is exactly the blocks' size; `data` lies inside
// the file's mapping. Except for DType::kGgmlUnknown, whose block size is
// unknown: nbytes is then the extent the GGUF reader bounded it to (see
// gguf_reader.h), and nothing decodes or slices it.
struct StoredTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // logical (numpy) order, slowest first
  int64_t num_elements = 0;
  int file_index = 0;   // index into the checkpoint's files
  uint64_t offset = 0;  // absolute byte offset in its file
  uint64_t nbytes = 0;
  absl::Span<const uint8_t> data;
  // The ggml type id as the file wrote it (GGUF tensors; 0 otherwise):
  // what names a kGgmlUnknown tensor's type.
  uint32_t ggml_type_id = 0;
};

// "ggml type 200 (unknown)" for kGgmlUnknown tensors, else the dtype's name.
std::string StoredDTypeName(const StoredTensor& t);

// "F32[2,2]": dtype and shape as messages print them.
std::string DescribeStored(DType dtype, absl::Span<const int64_t> shape);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_FORMAT_STORED_TENSOR_H_
