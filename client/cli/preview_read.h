// `tensormorph read` without -o prints a numpy-like preview: its first and
// last three items per long dimension. Reading the whole tensor to print
// those would cost a 1 GiB tensor 1 GiB of memory and transfer; this reads
// only the elements the preview prints.
#ifndef TENSORMORPH_CLIENT_CLI_PREVIEW_READ_H_
#define TENSORMORPH_CLIENT_CLI_PREVIEW_READ_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cli/format.h"
#include "client/client.h"

namespace tensormorph {

// What a preview of a whole tensor read needs.
struct PreviewData {
  std::string dtype;           // the result's dtype, as ReadSlice says
  std::vector<int64_t> shape;  // the whole result's shape
  int64_t total_bytes = 0;     // the whole result's bytes
  PreviewPlan plan;            // set when dtype is "F32"
  std::vector<float> shown;    // the shown elements (ShownArrayPreview)
};

// Reads what a preview of `request` (no slice) shows: its shape (GetTensor's;
// in raw mode the header of a read cancelled once the header is in, as only
// the read knows the stored dtype), then, for float32 results, the
// corners of the array: one slice per combination of a long dimension's
// head and tail (2^k calls for k long dimensions, each at most 3 items
// along those), or the whole result when no dimension is long. Results of
// other dtypes (raw block bytes) read nothing past the header.
// REQUIRES: request.slice() is empty.
// Errors: those of GetTensor and ReadSlice.
absl::StatusOr<PreviewData> ReadPreview(Client& client,
                                        const v1::ReadSliceRequest& request,
                                        int edge = 3);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_PREVIEW_READ_H_
