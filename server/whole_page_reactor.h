// The listing streams (ListCheckpoints, ListTensors): a page built whole by
// one task on the pool's stream lane, then queued at once and written one
// message at a time by QueuedStreamReactor.
#ifndef TENSORMORPH_SERVER_WHOLE_PAGE_REACTOR_H_
#define TENSORMORPH_SERVER_WHOLE_PAGE_REACTOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/stream_reactor.h"

namespace tensormorph {

template <typename Message>
class WholePageReactor : public QueuedStreamReactor<Message> {
 protected:
  // As QueuedStreamReactor's; a page is at most max_list_page_size
  // messages, built before its first write, so the queue needs no bound.
  WholePageReactor(std::shared_ptr<ServiceState> state,
                   grpc::CallbackServerContext* ctx, const char* method,
                   std::string checkpoint, std::string tensor)
      : QueuedStreamReactor<Message>(std::move(state), ctx, method,
                                     std::move(checkpoint), std::move(tensor),
                                     SIZE_MAX) {}

  // Submits the page's task. REQUIRES: called once, last in the derived
  // constructor (the task calls BuildPage).
  void Start() {
    {
      absl::MutexLock lock(&this->mu_);
      running_ = true;
    }
    this->Launch([this] { Run(); });
  }

  // The page, in order; an error refuses the call with it. Runs on the
  // pool, off the lock, fenced.
  virtual absl::StatusOr<std::vector<Message>> BuildPage() = 0;

 private:
  bool WorkOverLocked(bool) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(this->mu_) {
    return !running_;
  }
  // Entries are not chunks: chunks_sent counts data messages.
  bool CountsAsChunk(const Message&) const override { return false; }

  void Run() {
    absl::StatusOr<std::vector<Message>> page =
        Fenced(this->log_.site(), [&] { return BuildPage(); });
    absl::MutexLock lock(&this->mu_);
    running_ = false;
    if (!page.ok()) {
      // A refusal, not a cancellation (FailLocked would count it as one).
      if (this->status_.ok()) this->status_ = ToGrpcStatus(page.status());
    } else if (!this->cancelled_.load()) {
      for (Message& m : *page) this->queue_.push_back(std::move(m));
    }
    this->PumpLocked();
  }

  bool running_ ABSL_GUARDED_BY(this->mu_) = false;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_WHOLE_PAGE_REACTOR_H_
