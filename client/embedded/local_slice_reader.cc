#include "client/embedded/local_slice_reader.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/exception_fence.h"
#include "server/slice_source.h"

namespace tensormorph {
namespace {

// One chunk being produced into its buffer on the pool.
struct Pending {
  absl::Notification done;
  absl::Status status;
  size_t bytes = 0;
};

// Frees a buffer of floats (aligned for the decoders' stores).
struct FloatsDeleter {
  void operator()(float* p) const { delete[] p; }
};

}  // namespace

absl::Status EmbeddedSliceReader::Read(
    const v1::ReadSliceRequest& request, absl::Time deadline,
    const std::function<bool(const v1::SliceHeader&)>& on_header,
    const std::function<bool(absl::Span<const absl::string_view>)>& on_pieces) {
  ServiceState& state = server_->state();
  const FenceSite site("ReadSlice", request.checkpoint(), request.tensor());
  absl::StatusOr<std::unique_ptr<SliceSource>> opened =
      Fenced(site, [&] { return SliceSource::Open(state, request); });
  if (!opened.ok()) return opened.status();
  SliceSource& source = **opened;
  if (!on_header(source.header())) {
    return absl::CancelledError("slice read cancelled by the caller");
  }
  const size_t floats = (source.max_chunk_bytes() + 3) / 4;
  std::unique_ptr<float[], FloatsDeleter> buffers[2] = {
      std::unique_ptr<float[], FloatsDeleter>(new float[floats]),
      std::unique_ptr<float[], FloatsDeleter>(new float[floats])};
  size_t since_release = 0;  // the producer's own
  // On the pool: the source is used by one thread at a time, the producer,
  // while the caller's thread hands on the chunk before it.
  auto produce = [&](float* buffer, Pending* p) {
    state.pool.Submit([&source, &since_release, &site, buffer, p] {
      p->bytes = source.next_bytes();
      p->status = Fenced(site, [&] {
        return source.ReadNext(reinterpret_cast<uint8_t*>(buffer));
      });
      since_release += p->bytes;
      if (since_release >= kReleaseEvery || source.done()) {
        source.ReleaseMappedPages();
        since_release = 0;
      }
      p->done.Notify();
    });
  };
  auto current = std::make_unique<Pending>();
  produce(buffers[0].get(), current.get());
  for (int k = 0;; ++k) {
    current->done.WaitForNotification();
    if (!current->status.ok()) return current->status;
    const bool last = source.done();
    std::unique_ptr<Pending> next;
    if (!last) {
      next = std::make_unique<Pending>();
      produce(buffers[(k + 1) % 2].get(), next.get());
    }
    // The producer of `next` must be done before its buffer, the source or
    // `since_release` go.
    auto wait_next = [&] {
      if (next) next->done.WaitForNotification();
    };
    if (absl::Now() > deadline) {
      wait_next();
      return absl::DeadlineExceededError(absl::StrCat(
          "ReadSlice timed out: no complete reply within its deadline (",
          "ClientOptions::timeout sets the deadline)"));
    }
    const absl::string_view data(
        reinterpret_cast<const char*>(buffers[k % 2].get()), current->bytes);
    if (!data.empty() && !on_pieces({&data, 1})) {
      wait_next();
      return absl::CancelledError("slice read cancelled by the caller");
    }
    if (last) return absl::OkStatus();
    current = std::move(next);
  }
}

}  // namespace tensormorph
