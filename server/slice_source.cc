#include "server/slice_source.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/io/fault_guard.h"
#include "core/io/mapped_file.h"
#include "core/util/error_reason.h"
#include "core/util/status_macros.h"

namespace tensormorph {

absl::Status CheckReadSliceRequest(const v1::ReadSliceRequest& req) {
  if (!v1::OutputMode_IsValid(req.mode())) {
    const google::protobuf::EnumDescriptor* modes = v1::OutputMode_descriptor();
    std::string valid;
    for (int i = 0; i < modes->value_count(); ++i) {
      absl::StrAppend(&valid, i > 0 ? ", " : "", modes->value(i)->number(),
                      " (", modes->value(i)->name(), ")");
    }
    return WithReason(
        absl::InvalidArgumentError(
            absl::StrCat("ReadSliceRequest.mode ", static_cast<int>(req.mode()),
                         " is not an OutputMode; valid: ", valid)),
        ErrorReason::kEnumValueInvalid, {{"field", "mode"}});
  }
  if (req.max_chunk_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReadSliceRequest.max_chunk_bytes must be >= 0 (0 = the server's "
        "max_chunk_bytes), got ",
        req.max_chunk_bytes()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SliceSource>> SliceSource::Open(
    ServiceState& state, const v1::ReadSliceRequest& req) {
  TM_RETURN_IF_ERROR(CheckReadSliceRequest(req));
  std::unique_ptr<SliceSource> src(new SliceSource());
  src->tensor_name_ = req.tensor();
  auto ckpt = state.registry.Acquire(req.checkpoint());
  if (!ckpt.ok()) return ckpt.status();
  src->ckpt_ = *ckpt;
  auto t = FindTensorOrError(*src->ckpt_, req.checkpoint(), req.tensor(),
                             req.part());
  if (!t.ok()) return t.status();
  for (const StoredTensor* part : (*t)->encoding->parts()) {
    src->parts_.push_back(part);
    if (std::find(src->files_.begin(), src->files_.end(), part->file_index) ==
        src->files_.end()) {
      src->files_.push_back(part->file_index);
    }
  }
  // After Acquire found the files unchanged, before the first byte.
  TM_RETURN_IF_ERROR(src->ckpt_->CheckNoWriters(**t));
  auto items = ParseSlice(req.slice());
  if (!items.ok()) return items.status();
  auto slice = ResolveSlice(*items, (*t)->shape);
  if (!slice.ok()) return slice.status();
  int64_t max_bytes = req.max_chunk_bytes();  // >= 0: checked above
  if (max_bytes == 0 || max_bytes > state.limits.max_chunk_bytes) {
    max_bytes = state.limits.max_chunk_bytes;
  }
  v1::SliceHeader& h = src->header_;
  for (int64_t d : slice->result_shape) h.add_shape(d);
  h.set_num_elements(slice->num_elements);
  src->total_ = slice->num_elements;
  if (req.mode() == v1::OUTPUT_MODE_RAW) {
    auto raw = RawSliceReader::Create(**t, *std::move(slice));
    if (!raw.ok()) return raw.status();
    src->raw_.emplace(*std::move(raw));
    h.set_dtype(std::string(DTypeName(src->raw_->dtype())));
    h.set_total_bytes(src->raw_->total_bytes());
    src->per_chunk_ =
        std::max<int64_t>(1, max_bytes / src->raw_->block_bytes()) *
        src->raw_->block_elems();
  } else {
    src->decoded_.emplace(**t, *std::move(slice));
    h.set_dtype("F32");
    h.set_total_bytes(src->total_ * 4);
    src->per_chunk_ = std::max<int64_t>(1, max_bytes / 4);
  }
  if (h.total_bytes() > state.limits.max_slice_bytes) {
    return LimitExceededError(
        absl::StrCat("the slice is ", h.total_bytes(),
                     " bytes, over the limit max_slice_bytes (",
                     state.limits.max_slice_bytes,
                     "): read it in smaller slices"),
        "max_slice_bytes", state.limits.max_slice_bytes, h.total_bytes());
  }
  return src;
}

int64_t SliceSource::next_count() const {
  return std::min(per_chunk_, total_ - next_);
}

size_t SliceSource::next_bytes() const {
  const int64_t n = next_count();
  return static_cast<size_t>(
      raw_ ? n / raw_->block_elems() * raw_->block_bytes() : n * 4);
}

size_t SliceSource::max_chunk_bytes() const {
  return static_cast<size_t>(raw_ ? per_chunk_ / raw_->block_elems() *
                                        raw_->block_bytes()
                                  : per_chunk_ * 4);
}

absl::Status SliceSource::ReadNext(uint8_t* out) {
  const int64_t n = next_count();
  TM_RETURN_IF_ERROR(GuardedRead([&]() -> absl::Status {
    if (raw_) {
      raw_->ReadInto(next_, n, reinterpret_cast<char*>(out));
      return absl::OkStatus();
    }
    return decoded_->Read(next_, n, reinterpret_cast<float*>(out));
  }));
  // After each read of the mapping, before its chunk is sent (and so before
  // OK): bytes read across a rewrite must not pass as one tensor, and a
  // stream ends at the first chunk that could mix them.
  TM_RETURN_IF_ERROR(CheckFilesUnchanged());
  next_ += n;
  read_any_ = true;
  return absl::OkStatus();
}

void SliceSource::ReleaseMappedPages() const {
  static const uintptr_t kPage =
      static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (const StoredTensor* part : parts_) {
    if (part->data.empty()) continue;
    // Whole pages only: the first and last may hold other tensors' bytes,
    // which is harmless (they fault back in), but madvise needs alignment.
    const uintptr_t begin =
        reinterpret_cast<uintptr_t>(part->data.data()) & ~(kPage - 1);
    const uintptr_t end =
        reinterpret_cast<uintptr_t>(part->data.data() + part->data.size());
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
}

absl::Status SliceSource::CheckFilesUnchanged() const {
  for (const int f : files_) {
    TM_RETURN_IF_ERROR(ckpt_->CheckFileUnchanged(
        static_cast<size_t>(f), absl::StrCat("tensor '", tensor_name_, "'")));
  }
  return absl::OkStatus();
}

}  // namespace tensormorph
