#include "core/format/stored_tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensormorph {

std::string DescribeStored(DType dtype, absl::Span<const int64_t> shape) {
  return absl::StrCat(DTypeName(dtype), "[", absl::StrJoin(shape, ","), "]");
}

}  // namespace tensormorph
