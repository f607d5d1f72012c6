#include "core/format/stored_tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensormorph {

std::string DescribeStored(DType dtype, absl::Span<const int64_t> shape) {
  return absl::StrCat(DTypeName(dtype), "[", absl::StrJoin(shape, ","), "]");
}

std::string StoredDTypeName(const StoredTensor& t) {
  if (t.dtype != DType::kGgmlUnknown) return std::string(DTypeName(t.dtype));
  return absl::StrCat("ggml type ", t.ggml_type_id, " (",
                      DescribeGgmlTypeId(t.ggml_type_id), ")");
}

}  // namespace tensormorph
