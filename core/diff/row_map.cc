#include "core/diff/row_map.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensormorph {

absl::Status CheckRowMap(const RowMap& map, const LogicalTensor& tensor) {
  if (map.empty()) return absl::OkStatus();
  if (tensor.shape.empty() || tensor.shape.back() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a row map needs rows: '", tensor.name, "' has none"));
  }
  const int64_t rows = tensor.num_elements / tensor.shape.back();
  if (static_cast<int64_t>(map.size()) != rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("the row map has ", map.size(), " entries; '", tensor.name,
                     "' has ", rows, " rows"));
  }
  for (size_t r = 0; r < map.size(); ++r) {
    if (map[r] < 0 || map[r] >= rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("row map entry ", r, " is ", map[r], ", outside the ",
                       rows, " rows of '", tensor.name, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckReference(const LogicalTensor& t, const LogicalTensor* ref,
                            const RowMap& map) {
  if (ref == nullptr) return absl::OkStatus();
  if (ref->shape != t.shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("the reference '", ref->name, "' has shape [",
                     absl::StrJoin(ref->shape, ", "), "], '", t.name,
                     "' has shape [", absl::StrJoin(t.shape, ", "), "]"));
  }
  return CheckRowMap(map, t);
}

absl::Status DecodeMappedRows(const LogicalTensor& ref, const RowMap& map,
                              int64_t first, int64_t count, float* out) {
  if (map.empty()) return ref.encoding->Decode(first, count, out);
  const int64_t cols = ref.shape.back();
  for (int64_t done = 0; done < count;) {
    const int64_t at = first + done;
    const int64_t len = std::min(cols - at % cols, count - done);
    if (absl::Status s = ref.encoding->Decode(MappedFlatIndex(map, cols, at),
                                              len, out + done);
        !s.ok()) {
      return s;
    }
    done += len;
  }
  return absl::OkStatus();
}

}  // namespace tensormorph
