#include "client/message_prefetcher.h"

#include <utility>

namespace tensormorph {

MessagePrefetcher::MessagePrefetcher(
    grpc::ClientReaderInterface<grpc::ByteBuffer>* reader,
    grpc::ClientContext* ctx, size_t depth)
    : reader_(reader),
      ctx_(ctx),
      depth_(depth < 1 ? 1 : depth),
      thread_([this] { Run(); }) {}

MessagePrefetcher::~MessagePrefetcher() { Stop(); }

void MessagePrefetcher::Run() {
  while (true) {
    grpc::ByteBuffer message;
    const bool got = reader_->Read(&message);
    absl::MutexLock lock(&mu_);
    if (!got) {
      ended_ = true;
      return;
    }
    // Waits for room: memory stays at depth_ replies (and the stream's
    // window, which gRPC holds) however slow the caller is.
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || ready_.size() < depth_;
    };
    mu_.Await(absl::Condition(&room));
    if (stop_) return;
    ready_.push_back(std::move(message));
  }
}

bool MessagePrefetcher::Next(grpc::ByteBuffer* out) {
  absl::MutexLock lock(&mu_);
  auto available = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !ready_.empty() || ended_;
  };
  mu_.Await(absl::Condition(&available));
  if (ready_.empty()) return false;
  *out = std::move(ready_.front());
  ready_.pop_front();
  return true;
}

void MessagePrefetcher::Stop() {
  if (!thread_.joinable()) return;
  bool ended;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    ready_.clear();
    ended = ended_;
  }
  // A Read blocked on a server that sends nothing returns once cancelled.
  // A stream that ended is not: its status is still to be taken (Finish).
  if (!ended) ctx_->TryCancel();
  thread_.join();
}

}  // namespace tensormorph
