// ComputeSparsity: the zeros of every tensor of a checkpoint, one pass in
// name order as one task in the worker pool's background lane (the sparsity
// view asked ComputeStats once per tensor: minutes for two thousand tensors,
// most of it round trips). Each tensor is counted by ComputeStats itself
// (one bin), so its numbers are ComputeStats' by construction. Events are
// queued and written one at a time; the task waits while kMaxQueuedEvents
// are unsent, so a slow client bounds the memory, and the watchdog
// (stream_watchdog.h) ends a call past max_call_seconds or one whose client
// took no event for max_idle_write_seconds. Cancellation stops the walk at
// its next tensor. The call holds a max_concurrent_diffs slot: it reads a
// whole checkpoint, as a diff does.
#include <fnmatch.h>

#include <atomic>
#include <deque>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/diff/reference_resolver.h"
#include "core/stats.h"
#include "proto/status_mapping.h"
#include "server/call_log.h"
#include "server/exception_fence.h"
#include "server/service.h"
#include "server/stream_reactor.h"

namespace tensormorph {
namespace {

constexpr size_t kMaxQueuedEvents = 256;

class ComputeSparsityReactor final
    : public QueuedStreamReactor<v1::TensorSparsity> {
 public:
  ComputeSparsityReactor(std::shared_ptr<ServiceState> state,
                         grpc::CallbackServerContext* ctx,
                         const v1::ComputeSparsityRequest* req)
      : QueuedStreamReactor(std::move(state), ctx, "ComputeSparsity",
                            req->checkpoint(), req->filter(), kMaxQueuedEvents),
        req_(req) {
    {
      absl::MutexLock lock(&mu_);
      running_ = true;
    }
    Launch([this] { Start(); });
  }

 private:
  // Over once the walk has ended: its last event is its last tensor's.
  bool WorkOverLocked(bool) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !running_;
  }

  // On the pool's stream lane: what refuses a call (a bad request, an
  // unknown checkpoint, no slot free) answers at once; the walk itself then
  // runs in the background lane.
  void Start() {
    const absl::Status admitted = Fenced(log_.site(), [&] { return Admit(); });
    if (admitted.ok()) {
      state_->pool.SubmitBackground([this] { Run(); });
      return;
    }
    absl::MutexLock lock(&mu_);
    running_ = false;
    if (status_.ok()) status_ = ToGrpcStatus(admitted);
    PumpLocked();
  }

  void Run() {
    const absl::Status walked =
        Fenced(log_.site(), [&]() -> absl::Status { return Walk(); });
    absl::MutexLock lock(&mu_);
    running_ = false;
    if (!walked.ok() && status_.ok()) status_ = ToGrpcStatus(walked);
    PumpLocked();
  }

  absl::Status Admit() {
    if (req_->checkpoint().empty()) {
      return absl::InvalidArgumentError(
          "ComputeSparsity needs a checkpoint; none was named");
    }
    TM_ASSIGN_OR_RETURN(ckpt_, state_->registry.Acquire(req_->checkpoint()));
    if (!req_->reference().empty()) {
      TM_ASSIGN_OR_RETURN(ref_, state_->registry.Acquire(req_->reference()));
      resolver_.emplace(*ckpt_, *ref_);
    }
    for (const LogicalTensor& t : ckpt_->tensors()) {
      if (req_->filter().empty() ||
          ::fnmatch(req_->filter().c_str(), t.name.c_str(), 0) == 0) {
        tensors_.push_back(&t);
      }
    }
    if (tensors_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "filter '", req_->filter(), "' matches none of the ",
          ckpt_->tensors().size(), " tensors of '", req_->checkpoint(), "'"));
    }
    return AdmitAsDiff(" (a sparsity pass counts as a diff)");
  }

  // One tensor's counts, its reference resolved as ComputeStats resolves
  // it (server/views.cc): a tensor without one is counted alone.
  absl::StatusOr<v1::TensorSparsity> Count(const LogicalTensor& t) {
    v1::TensorSparsity out;
    out.set_name(t.name);
    out.set_scheme(t.encoding->info().scheme);
    StatsOptions o;
    o.bins = 1;
    const LogicalTensor* ref = nullptr;
    if (resolver_.has_value()) {
      auto found = resolver_->Resolve(t, "", req_->reference());
      if (found.ok()) {
        ref = found->tensor;
        o.ref_rows = std::move(found->row_map);
        out.set_reference_tensor(ref->name);
      } else {
        out.set_no_reference(std::string(found.status().message()));
      }
    }
    TM_RETURN_IF_ERROR(ckpt_->CheckNoWriters(t));
    if (ref != nullptr) TM_RETURN_IF_ERROR(ref_->CheckNoWriters(*ref));
    // A walk cancelled (or its client gone) stops inside a large tensor too.
    o.cancelled = [this] { return cancelled_.load(); };
    TM_ASSIGN_OR_RETURN(TensorStats st, ComputeStats(t, ref, o));
    TM_RETURN_IF_ERROR(ckpt_->CheckUnchanged(t));
    if (ref != nullptr) TM_RETURN_IF_ERROR(ref_->CheckUnchanged(*ref));
    out.set_count(st.count);
    out.set_zeros(st.zeros);
    out.set_sparsity(st.sparsity);
    out.set_has_reference(st.has_reference);
    out.set_pruned_zeros(st.pruned_zeros);
    out.set_induced_zeros(st.induced_zeros);
    return out;
  }

  absl::Status Walk() {
    const int64_t total = static_cast<int64_t>(tensors_.size());
    int64_t done = 0;
    for (const LogicalTensor* t : tensors_) {
      if (cancelled_.load()) return absl::CancelledError("cancelled");
      TM_ASSIGN_OR_RETURN(v1::TensorSparsity e, Count(*t));
      e.set_tensors_done(++done);
      e.set_tensors_total(total);
      if (!Enqueue(std::move(e))) return absl::OkStatus();  // the call ended
    }
    return absl::OkStatus();
  }

  const v1::ComputeSparsityRequest* req_;
  // Set by Admit, read by the walk.
  std::shared_ptr<const Checkpoint> ckpt_;
  std::shared_ptr<const Checkpoint> ref_;      // the reference, when named
  std::optional<ReferenceResolver> resolver_;  // with ref_: its name rules
  std::vector<const LogicalTensor*> tensors_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<v1::TensorSparsity>* NewComputeSparsityReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const v1::ComputeSparsityRequest* req) {
  return new ComputeSparsityReactor(std::move(state), ctx, req);
}

}  // namespace tensormorph
