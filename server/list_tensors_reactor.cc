#include "server/list_tensors_reactor.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/util/status_macros.h"
#include "proto/status_mapping.h"
#include "server/exception_fence.h"
#include "server/list_tensors_page.h"
#include "server/stream_reactor.h"

namespace tensormorph {
namespace {

class ListTensorsReactor final : public QueuedStreamReactor<v1::TensorInfo> {
 public:
  ListTensorsReactor(std::shared_ptr<ServiceState> state,
                     grpc::CallbackServerContext* ctx,
                     const v1::ListTensorsRequest* req)
      : QueuedStreamReactor(std::move(state), ctx, "ListTensors",
                            req->checkpoint(), req->filter(), kNoQueueBound),
        req_(req) {
    {
      absl::MutexLock lock(&mu_);
      running_ = true;
    }
    Launch([this] { Run(); });
  }

 private:
  // The page is built whole before its first write, so nothing waits for
  // room in the queue.
  static constexpr size_t kNoQueueBound = SIZE_MAX;

  bool WorkOverLocked(bool) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !running_;
  }
  // Entries are not chunks: chunks_sent counts data messages, as before.
  bool CountsAsChunk(const v1::TensorInfo&) const override { return false; }

  // On the pool's stream lane: the page, then every message queued at once.
  void Run() {
    absl::StatusOr<std::vector<v1::TensorInfo>> page =
        Fenced(log_.site(), [&] { return Build(); });
    absl::MutexLock lock(&mu_);
    running_ = false;
    if (!page.ok()) {
      // A refusal, not a cancellation (FailLocked would count it as one).
      if (status_.ok()) status_ = ToGrpcStatus(page.status());
    } else if (!cancelled_.load()) {
      for (v1::TensorInfo& t : *page) queue_.push_back(std::move(t));
    }
    PumpLocked();
  }

  absl::StatusOr<std::vector<v1::TensorInfo>> Build() {
    TM_RETURN_IF_ERROR(state_->AdmitStream(peer_));
    TM_ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> ckpt,
                        state_->registry.Acquire(req_->checkpoint()));
    return ListTensorsPage(*ckpt, *req_, state_->limits.max_list_page_size);
  }

  const v1::ListTensorsRequest* const req_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<v1::TensorInfo>* NewListTensorsReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const v1::ListTensorsRequest* req) {
  return new ListTensorsReactor(std::move(state), ctx, req);
}

}  // namespace tensormorph
