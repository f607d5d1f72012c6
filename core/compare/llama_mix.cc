#include "core/compare/llama_mix.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tensormorph {

std::string LlamaTensorPattern(absl::string_view name) {
  std::string out = "^";
  for (char c : name) {
    if (absl::string_view("\\^$.|?*+()[]{}").find(c) !=
        absl::string_view::npos) {
      out.push_back('\\');
    }
    out.push_back(c);
  }
  out.push_back('$');
  return out;
}

std::string LlamaTensorTypeOverride(absl::string_view name,
                                    absl::string_view type) {
  return absl::StrCat(LlamaTensorPattern(name), "=", type);
}

absl::StatusOr<int64_t> PredictGgufFileSize(
    int64_t data_offset, int64_t alignment,
    const std::vector<int64_t>& tensor_bytes) {
  if (alignment <= 0 || (alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF alignment ", alignment, " is no power of two"));
  }
  if (data_offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF data offset ", data_offset, " is negative"));
  }
  int64_t total = data_offset;
  for (int64_t b : tensor_bytes) {
    if (b < 0 || b > INT64_MAX - alignment) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor size ", b, " is out of range"));
    }
    const int64_t padded = (b + alignment - 1) / alignment * alignment;
    if (total > INT64_MAX - padded) {
      return absl::OutOfRangeError("the predicted GGUF size overflows int64");
    }
    total += padded;
  }
  return total;
}

}  // namespace tensormorph
