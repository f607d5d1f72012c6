#include "client/cli/preview_read.h"

#include <cstring>
#include <optional>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensormorph {
namespace {

// The header of `request`'s result, without its data: the read is cancelled
// as soon as the header is in.
absl::StatusOr<v1::SliceHeader> ReadHeader(
    Client& client, const v1::ReadSliceRequest& request) {
  std::optional<v1::SliceHeader> header;
  absl::Status s = client.ReadSlicePieces(
      request,
      [&](const v1::SliceHeader& h) {
        header = h;
        return false;  // nothing more is needed
      },
      [](absl::Span<const absl::string_view>) { return false; });
  if (header.has_value()) return *std::move(header);
  if (s.ok()) return absl::InternalError("the read ended without a header");
  return s;
}

// Copies `block` (row-major over `block_shape`, the corner `corner` of the
// shown array: bit j set means the j-th long dimension's tail) into
// `shown`, row-major over plan.shown_shape.
void PlaceCorner(absl::Span<const float> block,
                 const std::vector<int64_t>& block_shape,
                 const PreviewPlan& plan, uint32_t corner, int edge,
                 std::vector<float>* shown) {
  const int rank = static_cast<int>(block_shape.size());
  // The block's first element's flat index in `shown`, and each block
  // dimension's stride there.
  int64_t origin = 0;
  absl::InlinedVector<int64_t, 8> stride(block_shape.size(), 1);
  for (int d = rank - 2; d >= 0; --d) {
    stride[d] = stride[d + 1] * plan.shown_shape[d + 1];
  }
  for (int d = 0, j = 0; d < rank; ++d) {
    if (!plan.elided[d]) continue;
    if (corner & (uint32_t{1} << j)) origin += edge * stride[d];
    ++j;
  }
  absl::InlinedVector<int64_t, 8> at(block_shape.size(), 0);  // in the block
  int64_t flat = origin;
  for (float v : block) {
    (*shown)[static_cast<size_t>(flat)] = v;
    for (int d = rank - 1; d >= 0; --d) {
      flat += stride[d];
      if (++at[d] < block_shape[d]) break;
      flat -= at[d] * stride[d];
      at[d] = 0;
    }
  }
}

}  // namespace

absl::StatusOr<PreviewData> ReadPreview(Client& client,
                                        const v1::ReadSliceRequest& request,
                                        int edge) {
  PreviewData out;
  if (request.mode() == v1::OUTPUT_MODE_RAW) {
    // The stored dtype, and the stored bytes' size, only the read knows.
    auto header = ReadHeader(client, request);
    if (!header.ok()) return header.status();
    out.dtype = header->dtype();
    out.shape.assign(header->shape().begin(), header->shape().end());
    out.total_bytes = header->total_bytes();
    if (out.dtype != "F32") return out;
  } else {
    // Float32 of the logical shape: the tensor's description says it,
    // and no read of the whole is started (a server's --max-slice-bytes
    // would refuse one).
    auto t = client.GetTensor(request.checkpoint(), request.tensor(),
                              request.part());
    if (!t.ok()) return t.status();
    out.dtype = "F32";
    out.shape.assign(t->shape().begin(), t->shape().end());
    out.total_bytes = t->num_elements() * 4;
  }
  out.plan = PlanPreview(out.shape, edge);
  int64_t shown_count = 1;
  std::vector<size_t> long_dims;
  for (size_t d = 0; d < out.shape.size(); ++d) {
    shown_count *= out.plan.shown_shape[d];
    if (out.plan.elided[d]) long_dims.push_back(d);
  }
  if (shown_count == 0) return out;  // an empty array: "[]"
  out.shown.assign(static_cast<size_t>(shown_count), 0.0f);
  if (long_dims.size() > 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a preview of ", long_dims.size(), " long dimensions would take 2^",
        long_dims.size(),
        " reads; name a --slice or write the tensor with -o FILE.npy"));
  }
  for (uint32_t corner = 0; corner < (uint32_t{1} << long_dims.size());
       ++corner) {
    std::vector<std::string> items;
    std::vector<int64_t> block_shape;
    for (size_t d = 0, j = 0; d < out.shape.size(); ++d) {
      if (!out.plan.elided[d]) {
        items.push_back(":");
        block_shape.push_back(out.shape[d]);
        continue;
      }
      const int64_t from =
          (corner & (uint32_t{1} << j)) ? out.shape[d] - edge : 0;
      items.push_back(absl::StrCat(from, ":", from + edge));
      block_shape.push_back(edge);
      ++j;
    }
    v1::ReadSliceRequest part = request;
    part.set_slice(absl::StrJoin(items, ", "));
    auto block = client.ReadSliceAll(part);
    if (!block.ok()) return block.status();
    if (block->dtype != "F32" || block->shape != block_shape) {
      return absl::InternalError(absl::StrCat(
          "the preview's slice '", part.slice(), "' came back as ",
          block->dtype, " [", absl::StrJoin(block->shape, ", "),
          "], expected F32 [", absl::StrJoin(block_shape, ", "), "]"));
    }
    PlaceCorner(block->floats(), block_shape, out.plan, corner, edge,
                &out.shown);
  }
  return out;
}

}  // namespace tensormorph
