#include "client/python/native/slice_into_buffer.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tensormorph {

std::unique_ptr<SliceIntoBuffer> SliceIntoBuffer::Start(
    Client* client, v1::ReadSliceRequest request, Allocate allocate) {
  std::unique_ptr<SliceIntoBuffer> read(
      new SliceIntoBuffer(client, std::move(allocate)));
  SliceIntoBuffer* r = read.get();
  r->thread_ = std::thread([r, req = std::move(request)] { r->Run(req); });
  return read;
}

SliceIntoBuffer::~SliceIntoBuffer() {
  if (!joined_) {
    Cancel();
    Join().IgnoreError();  // the caller gave up on the result
  }
}

void SliceIntoBuffer::Run(const v1::ReadSliceRequest& request) {
  absl::Status s = client_->ReadSlicePieces(
      request, [this](const v1::SliceHeader& h) { return OnHeader(h); },
      [this](absl::Span<const absl::string_view> p) { return OnPieces(p); },
      &cancel_);
  if (s.ok() && !allocated_) {
    s = absl::InternalError("ReadSlice ended without a header");
  } else if (overflow_) {
    // Our callback ended the call: its CANCELLED is not what happened.
    s = absl::InternalError(absl::StrCat("ReadSlice sent more than its ",
                                         memory_.size(), " bytes"));
  } else if (s.ok() && filled_ != memory_.size()) {
    s = absl::InternalError(absl::StrCat("ReadSlice ended after ", filled_,
                                         " of ", memory_.size(), " bytes"));
  }
  status_ = std::move(s);
  absl::MutexLock lock(&mu_);
  done_ = true;
}

bool SliceIntoBuffer::OnHeader(const v1::SliceHeader& header) {
  absl::Span<char> memory;
  if (!allocate_(header, &memory)) return false;
  if (memory.size() != static_cast<size_t>(header.total_bytes())) return false;
  memory_ = memory;
  allocated_ = true;
  return true;
}

bool SliceIntoBuffer::OnPieces(absl::Span<const absl::string_view> pieces) {
  for (absl::string_view p : pieces) {
    if (p.size() > memory_.size() - filled_) {
      overflow_ = true;
      return false;
    }
    std::memcpy(memory_.data() + filled_, p.data(), p.size());
    filled_ += p.size();
  }
  return true;
}

bool SliceIntoBuffer::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&done_), timeout);
}

void SliceIntoBuffer::Cancel() { cancel_.Cancel(); }

absl::Status SliceIntoBuffer::Join() {
  if (!joined_) {
    thread_.join();
    joined_ = true;
  }
  return status_;
}

}  // namespace tensormorph
