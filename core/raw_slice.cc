#include "core/raw_slice.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/util/error_reason.h"

namespace tensormorph {

absl::StatusOr<RawSliceReader> RawSliceReader::Create(
    const LogicalTensor& tensor, ResolvedSlice slice) {
  const auto parts = tensor.encoding->parts();
  if (parts.size() != 1 || parts[0]->shape != tensor.shape) {
    std::vector<std::string> names;
    bool shared = false;  // a part has the logical tensor's name
    for (const StoredTensor* p : parts) {
      names.push_back(absl::StrCat("'", p->name, "'"));
      shared |= p->name == tensor.name;
    }
    return absl::UnimplementedError(absl::StrCat(
        "tensor '", tensor.name, "' is assembled from ", parts.size(),
        " stored tensors (", absl::StrJoin(names, ", "),
        "): raw output needs a tensor stored in one piece; read its parts by "
        "their own names",
        shared ? " (a part named like the tensor itself with --part)" : ""));
  }
  if (parts[0]->dtype == DType::kGgmlUnknown) {
    // No block size: which bytes hold which elements is unknown.
    return WithReason(absl::UnimplementedError(absl::StrCat(
                          "tensor '", tensor.name, "' is stored as ",
                          StoredDTypeName(*parts[0]),
                          ": raw output needs a known block size")),
                      ErrorReason::kUnsupportedDtype,
                      {{"dtype", StoredDTypeName(*parts[0])}});
  }
  RawSliceReader r;
  r.stored_ = parts[0];
  r.read_ahead_ = ReadAhead(parts[0]->data);
  const DTypeInfo& info = GetDTypeInfo(r.stored_->dtype);
  r.block_elems_ = info.block_elems;
  r.block_bytes_ = info.block_bytes;
  if (r.block_elems_ > 1 && !slice.dims.empty()) {
    const ResolvedDim& last = slice.dims.back();
    const bool whole = last.keep && last.step == 1 &&
                       last.start % r.block_elems_ == 0 &&
                       last.count % r.block_elems_ == 0;
    if (!whole) {
      return absl::InvalidArgumentError(
          absl::StrCat("raw output of ", info.name,
                       " needs whole blocks along the last "
                       "dimension: step 1, start and length multiples of ",
                       r.block_elems_, " (this slice takes ", last.count,
                       " from ", last.start, " with step ", last.step, ")"));
    }
  }
  r.strides_.assign(tensor.shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(tensor.shape.size()) - 2; d >= 0; --d) {
    r.strides_[d] = r.strides_[d + 1] * tensor.shape[d + 1];
  }
  // One run: the innermost dimensions taken whole, then at most one taken
  // in part with step 1, then single indices.
  const auto& dims = slice.dims;
  int64_t d = static_cast<int64_t>(dims.size()) - 1;
  while (d >= 0 && dims[d].start == 0 && dims[d].count == tensor.shape[d] &&
         (dims[d].step == 1 || dims[d].count == 1)) {
    --d;
  }
  bool one_run = true;
  if (d >= 0) one_run = dims[d].step == 1 || dims[d].count == 1;
  for (int64_t o = d - 1; o >= 0 && one_run; --o) one_run = dims[o].count == 1;
  if (one_run) {
    r.contiguous_start_ = 0;
    for (size_t k = 0; k < dims.size(); ++k) {
      r.contiguous_start_ += dims[k].start * r.strides_[k];
    }
  }
  r.slice_ = std::move(slice);
  return r;
}

absl::Span<const uint8_t> RawSliceReader::Contiguous(int64_t first,
                                                     int64_t count) const {
  if (contiguous_start_ < 0) return {};
  return stored_->data.subspan(
      static_cast<size_t>((contiguous_start_ + first) / block_elems_ *
                          block_bytes_),
      static_cast<size_t>(count / block_elems_ * block_bytes_));
}

void RawSliceReader::Read(int64_t first, int64_t count,
                          std::string* out) const {
  const size_t at = out->size();
  out->resize(at + count / block_elems_ * block_bytes_);
  ReadInto(first, count, out->data() + at);
}

void RawSliceReader::ReadInto(int64_t first, int64_t count, char* out) const {
  const int64_t rank = static_cast<int64_t>(slice_.dims.size());
  const ResolvedDim inner =
      rank == 0 ? ResolvedDim{0, 1, 1, true} : slice_.dims.back();
  const char* base_ptr = reinterpret_cast<const char*>(stored_->data.data());
  int64_t pos = first;
  while (count > 0) {
    int64_t outer = pos / inner.count;
    const int64_t k = pos % inner.count;
    int64_t base = 0;
    for (int64_t d = rank - 2; d >= 0; --d) {
      const ResolvedDim& r = slice_.dims[d];
      base += (r.start + (outer % r.count) * r.step) * strides_[d];
      outer /= r.count;
    }
    const int64_t n = std::min(count, inner.count - k);
    const int64_t src = base + inner.start + k * inner.step;
    if (inner.step == 1) {
      // Contiguous: whole blocks (block dtypes are checked at Create).
      const int64_t bytes = n / block_elems_ * block_bytes_;
      const char* from = base_ptr + src / block_elems_ * block_bytes_;
      read_ahead_.Reading(
          {reinterpret_cast<const uint8_t*>(from), static_cast<size_t>(bytes)});
      std::memcpy(out, from, bytes);
      out += bytes;
    } else {
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(out, base_ptr + (src + i * inner.step) * block_bytes_,
                    block_bytes_);
        out += block_bytes_;
      }
    }
    pos += n;
    count -= n;
  }
}

}  // namespace tensormorph
