// The skeleton of every server stream (CheckCheckpoint, QuantDiff,
// ComputeSparsity, ReadSlice; ListCheckpoints and ListTensors through
// whole_page_reactor.h): work runs on the
// worker pool and queues events; the events go out one write at a time, in
// order; cancellation (the client's, or the watchdog's soft and hard stops,
// stream_watchdog.h) makes the work stop at its next step; the call finishes
// exactly once, when the work is over and no write is in flight, giving its
// stream and diff slots back before the client hears the end; an exception
// anywhere fails the call (exception_fence.h) instead of the process.
//
// A stream derives from QueuedStreamReactor<Event>, counts its running
// tasks itself (under mu_), submits its first task with Launch (or, when it
// counts them in an int, LaunchCounted), queues events with Enqueue
// (waiting for room) or under mu_ with queue_ and PumpLocked, and tells the
// skeleton through WorkOverLocked when it may end.
#ifndef TENSORMORPH_SERVER_STREAM_REACTOR_H_
#define TENSORMORPH_SERVER_STREAM_REACTOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/status_mapping.h"
#include "server/call_log.h"
#include "server/exception_fence.h"
#include "server/service.h"

namespace tensormorph {

template <typename Event>
class QueuedStreamReactor : public grpc::ServerWriteReactor<Event> {
 public:
  void OnWriteDone(bool ok) final {
    state_->watchdog.WriteDone(watch_);
    absl::MutexLock lock(&mu_);
    FencedLocked(log_.site(), [&] {
      mu_.AssertHeld();
      writing_ = false;
      WrittenLocked(queue_.front(), ok);
      if (!ok) {
        cancelled_.store(true);
        if (status_.ok()) {
          status_ = grpc::Status(grpc::CANCELLED, "client went away");
        }
      } else {
        queue_.pop_front();
      }
      PumpLocked();
    });
  }

  void OnCancel() final {
    cancelled_.store(true);
    absl::MutexLock lock(&mu_);
    FencedLocked(log_.site(), [&] {
      mu_.AssertHeld();
      if (status_.ok()) status_ = grpc::Status(grpc::CANCELLED, "cancelled");
      PumpLocked();
    });
  }

  void OnDone() final {
    // First: no watchdog callback runs after this, and none is running.
    state_->watchdog.Remove(watch_);
    // Finish is called under mu_ (PumpLocked), and gRPC may run OnDone on
    // another thread before that caller has unlocked: wait for it, so the
    // mutex is not destroyed held (a diff refused in Prepare hung its
    // worker spinning on the freed mutex).
    { absl::MutexLock lock(&mu_); }
    Fenced(log_.site(), [&] {
      ReleaseSlots();  // a call that never finished (cancelled first)
      state_->StreamEnded(cancelled_.load(), /*holds_slot=*/false);
    }).IgnoreError();
    delete this;
  }

 protected:
  // `method`, `checkpoint` and `tensor` name the call in the log.
  QueuedStreamReactor(std::shared_ptr<ServiceState> state,
                      grpc::CallbackServerContext* ctx, const char* method,
                      std::string checkpoint, std::string tensor,
                      size_t max_queued)
      : state_(std::move(state)),
        ctx_(ctx),
        log_(method, ctx, std::move(checkpoint), std::move(tensor)),
        peer_(SharePeer(*ctx)),
        max_queued_(max_queued) {
    state_->StreamStarted();
  }
  virtual ~QueuedStreamReactor() = default;

  // Watches the call and submits `first` to the pool's stream lane, where
  // what refuses a call answers at once. REQUIRES: the derived stream has
  // counted `first` as running; called once, last in its constructor.
  template <typename F>
  void Launch(F first) {
    watch_ = state_->watchdog.Add(
        [this](const absl::Status& why) { Interrupt(ToGrpcStatus(why)); },
        [this](const absl::Status& why) { CancelNow(ToGrpcStatus(why)); });
    state_->pool.Submit(std::move(first));
  }

  // Launch for a stream that counts its running tasks in `*running` (an int
  // guarded by mu_, as QuantDiff's and CompareQuantizations'): counts
  // `first` there, so the call cannot end before it has run, and launches
  // it. Called once, last in the constructor.
  template <typename F>
  void LaunchCounted(int* running, F first) {
    {
      absl::MutexLock lock(&mu_);
      ++*running;
    }
    Launch(std::move(first));
  }

  // Hooks, all under mu_.
  //
  // Whether the call may finish once the queue is empty (or the call
  // failed): no task runs, and a call that has not failed has queued its
  // last event.
  virtual bool WorkOverLocked(bool failed) = 0;
  // Before the next write is chosen, on a call that has not failed: a
  // stream queues its last events here (a summary) once its work is over.
  virtual void BeforeWriteLocked() {}
  // Whether the next event may go out (a reply size limit); an error fails
  // the call.
  virtual absl::Status VetLocked(const Event&) { return absl::OkStatus(); }
  // Whether an event counts in the chunks_sent metric (when its write
  // starts).
  virtual bool CountsAsChunk(const Event&) const { return true; }
  // Once per write, as it completes, `ok` whether it was sent; the event is
  // still at the queue's front (dropped after, when sent). A stream that
  // accounts for what it sends (or produces ahead, ReadSlice) does it here.
  virtual void WrittenLocked(const Event&, bool ok) {}
  // Once, as the call finishes: what the call leaves behind; returns the
  // bytes the log reports.
  virtual int64_t FinishingLocked() { return 0; }

  // Takes a stream slot for the peer, given back once (ReleaseSlots).
  // Errors: TryAdmitStream's.
  absl::Status AdmitAsStream() {
    if (absl::Status admit = state_->TryAdmitStream(peer_); !admit.ok()) {
      return admit;
    }
    admitted_ = true;
    return absl::OkStatus();
  }

  // Takes a stream slot for the peer and a max_concurrent_diffs slot, both
  // given back once (ReleaseSlots). `what` explains the limit in its
  // message (" (a check counts as a diff)" or empty).
  // Errors: TryAdmitStream's; RESOURCE_EXHAUSTED at max_concurrent_diffs.
  absl::Status AdmitAsDiff(absl::string_view what) {
    if (absl::Status admit = AdmitAsStream(); !admit.ok()) return admit;
    if (state_->active_diffs.fetch_add(1) >=
        state_->limits.max_concurrent_diffs) {
      state_->active_diffs.fetch_sub(1);
      return absl::ResourceExhaustedError(absl::StrCat(
          "limit max_concurrent_diffs (", state_->limits.max_concurrent_diffs,
          ") reached", what, "; retry later"));
    }
    counted_diff_ = true;
    return absl::OkStatus();
  }

  // Runs `f` under mu_; an exception from it fails the call (exception
  // fence). Every task's running count is given back before anything that
  // can throw runs here, so the call still finishes once the others end.
  template <typename F>
  void FencedLocked(const FenceSite& site, F&& f)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (absl::Status s = Fenced(site, f); !s.ok()) FailLocked(s);
  }

  // Ends the call with `s` (unless it has a status already) once nothing
  // runs; stops the tasks.
  void FailLocked(const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (status_.ok()) status_ = ToGrpcStatus(s);
    cancelled_.store(true);
    PumpLocked();
  }

  // Queues `e` once fewer than max_queued events wait, or drops it when the
  // call stopped meanwhile (cancelled or failed). Returns whether the call
  // goes on.
  bool Enqueue(Event e) {
    absl::MutexLock lock(&mu_);
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return queue_.size() < max_queued_ || cancelled_.load() || !status_.ok();
    };
    mu_.Await(absl::Condition(&room));
    if (cancelled_.load() || !status_.ok()) return false;
    queue_.push_back(std::move(e));
    PumpLocked();
    return true;
  }

  // Starts the next write, or finishes once the work is over and nothing
  // waits.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    if (status_.ok() && !queue_.empty()) {
      if (absl::Status fits = VetLocked(queue_.front()); !fits.ok()) {
        status_ = ToGrpcStatus(fits);
      }
    }
    const bool failed = !status_.ok();
    if (!failed) BeforeWriteLocked();
    if (!failed && !queue_.empty()) {
      writing_ = true;
      if (CountsAsChunk(queue_.front())) {
        state_->metrics.chunks_sent.fetch_add(1);
      }
      state_->watchdog.WriteStarted(watch_);
      this->StartWrite(&queue_.front());
      return;
    }
    if (WorkOverLocked(failed)) {
      finished_ = true;
      log_.Finish(status_, FinishingLocked());
      // The slots go back before the client hears the end: a script's next
      // call must not find them still taken by this one.
      ReleaseSlots();
      this->Finish(status_);
    }
  }

  const std::shared_ptr<ServiceState> state_;
  grpc::CallbackServerContext* const ctx_;
  const CallLog log_;
  const std::string peer_;  // PeerHost: whose stream slot
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  std::deque<Event> queue_ ABSL_GUARDED_BY(mu_);
  grpc::Status status_ ABSL_GUARDED_BY(mu_);

 private:
  // Gives back the stream and diff slots this call holds, once.
  void ReleaseSlots() {
    if (admitted_) state_->ReleaseStream(peer_);
    if (counted_diff_) state_->active_diffs.fetch_sub(1);
    admitted_ = counted_diff_ = false;
  }

  // The watchdog's soft stop: the tasks stop at their next step, and the
  // call ends with `status` once they have and no write is in flight.
  void Interrupt(const grpc::Status& status) {
    cancelled_.store(true);
    absl::MutexLock lock(&mu_);
    if (status_.ok()) status_ = status;
    PumpLocked();
  }

  // The watchdog's hard stop, for a write the client does not take: the
  // call is cancelled (its write then completes, failed). The status is the
  // log's.
  void CancelNow(const grpc::Status& status) {
    cancelled_.store(true);
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      if (status_.ok()) status_ = status;
    }
    // OnDone cannot run before this returns: it waits for this callback.
    ctx_->TryCancel();
  }

  const size_t max_queued_;
  StreamWatchdog::Watch* watch_ = nullptr;
  // Slots held: set by AdmitAsDiff, cleared by ReleaseSlots (in PumpLocked
  // under mu_, or in OnDone).
  bool admitted_ = false;
  bool counted_diff_ = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_STREAM_REACTOR_H_
