// CheckCheckpoint: the check runs as one task in the worker pool's background
// lane (it is one pass in order over the tensors), queueing events that are
// written one at a time; the task waits while kMaxQueuedEvents are unsent, so a
// slow client bounds the memory, and the watchdog (stream_watchdog.h) ends a
// call past max_call_seconds or one whose client took no event for
// max_idle_write_seconds. Cancellation stops the check at its next piece.
// A check holds a max_concurrent_diffs slot: it reads a whole checkpoint,
// as a diff does.
#include <atomic>
#include <deque>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/check/check.h"
#include "core/util/error_reason.h"
#include "proto/status_mapping.h"
#include "server/call_log.h"
#include "server/exception_fence.h"
#include "server/service.h"
#include "server/stream_reactor.h"

namespace tensormorph {
namespace {

constexpr size_t kMaxQueuedEvents = 256;

v1::CheckSeverity ToProto(Severity s) {
  switch (s) {
    case Severity::kInfo:
      return v1::CHECK_SEVERITY_INFO;
    case Severity::kWarning:
      return v1::CHECK_SEVERITY_WARNING;
    case Severity::kError:
      return v1::CHECK_SEVERITY_ERROR;
  }
  return v1::CHECK_SEVERITY_ERROR;
}

absl::StatusOr<Severity> FromProto(v1::CheckSeverity s) {
  switch (s) {
    case v1::CHECK_SEVERITY_UNSPECIFIED:
    case v1::CHECK_SEVERITY_ERROR:
      return Severity::kError;
    case v1::CHECK_SEVERITY_WARNING:
      return Severity::kWarning;
    case v1::CHECK_SEVERITY_INFO:
      return Severity::kInfo;
    default:
      return WithReason(
          absl::InvalidArgumentError(
              absl::StrCat("fail_level ", static_cast<int>(s),
                           " is not a CheckSeverity (INFO, WARNING or ERROR)")),
          ErrorReason::kEnumValueInvalid, {{"field", "fail_level"}});
  }
}

class CheckCheckpointReactor final
    : public QueuedStreamReactor<v1::CheckEvent> {
 public:
  CheckCheckpointReactor(std::shared_ptr<ServiceState> state,
                         grpc::CallbackServerContext* ctx,
                         const v1::CheckCheckpointRequest* req)
      : QueuedStreamReactor(std::move(state), ctx, "CheckCheckpoint",
                            req->checkpoint(), "", kMaxQueuedEvents),
        req_(req),
        start_(absl::Now()) {
    {
      absl::MutexLock lock(&mu_);
      running_ = true;
    }
    Launch([this] { Start(); });
  }

 private:
  // Over once the check task has ended, with its summary queued unless
  // the call failed.
  bool WorkOverLocked(bool failed) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !running_ && (failed || summarized_);
  }
  absl::Status VetLocked(const v1::CheckEvent& e) override {
    absl::Status fits = CheckReplySize(e, state_->limits);
    if (!fits.ok()) cancelled_.store(true);
    return fits;
  }
  int64_t FinishingLocked() override { return progress_.bytes_done; }

  // On the pool's stream lane: what refuses a call (a bad request, no slot
  // free) answers at once instead of queueing behind the background lane's
  // long work; the check itself then runs in that lane.
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
    absl::StatusOr<CheckSummary> summary = Fenced(
        log_.site(), [&]() -> absl::StatusOr<CheckSummary> { return Check(); });
    absl::MutexLock lock(&mu_);
    running_ = false;
    if (!summary.ok()) {
      if (status_.ok()) status_ = ToGrpcStatus(summary.status());
      PumpLocked();
      return;
    }
    FencedLocked(log_.site(), [&] {
      mu_.AssertHeld();
      EnqueueProgressLocked();
      v1::CheckEvent e;
      v1::CheckSummary* s = e.mutable_summary();
      s->set_errors(summary->errors);
      s->set_warnings(summary->warnings);
      s->set_infos(summary->infos);
      for (const RuleTally& t : summary->rules) {
        v1::CheckRuleTally* r = s->add_rules();
        r->set_rule(t.rule);
        r->set_severity(ToProto(t.severity));
        r->set_findings(t.findings);
        r->set_count(t.count);
        r->set_worst_tensor(t.worst_tensor);
        if (t.worst_group >= 0) r->set_worst_group(t.worst_group);
      }
      s->set_failed(summary->failed);
      s->set_fail_level(ToProto(options_.fail_level));
      s->set_tensors_checked(summary->tensors_checked);
      s->set_stored_tensors(summary->stored_tensors);
      s->set_bytes_read(summary->bytes_read);
      s->set_wall_seconds(absl::ToDoubleSeconds(absl::Now() - start_));
      queue_.push_back(std::move(e));
      summarized_ = true;
      PumpLocked();
    });
  }

  absl::Status Admit() {
    TM_ASSIGN_OR_RETURN(options_.fail_level, FromProto(req_->fail_level()));
    options_.hashes = req_->hashes();
    if (!req_->verify_manifest().empty()) {
      TM_ASSIGN_OR_RETURN(options_.verify,
                          ParseManifest(req_->verify_manifest()));
    }
    return AdmitAsDiff(" (a check counts as a diff)");
  }

  absl::StatusOr<CheckSummary> Check() {
    auto on_finding = [&](const Finding& f) {
      Queue([&](v1::CheckEvent* e) {
        v1::CheckFinding* o = e->mutable_finding();
        o->set_rule(f.rule);
        o->set_severity(ToProto(f.severity));
        o->set_tensor(f.tensor);
        o->set_file(f.file);
        o->set_expected(f.expected);
        o->set_actual(f.actual);
        o->set_hint(f.hint);
        o->set_count(f.count);
        if (f.worst_group >= 0) o->set_worst_group(f.worst_group);
        return true;
      });
    };
    // What ls refuses is opened leniently, for this check only: its
    // problems are findings, and so is a checkpoint none of whose files
    // opens for its bytes (CheckUnopened).
    auto acquired = state_->registry.AcquireForCheck(req_->checkpoint());
    if (!acquired.ok()) {
      return CheckUnopened(req_->checkpoint(), acquired.status(), options_,
                           on_finding);
    }
    ckpt_ = *std::move(acquired);
    if (!req_->source().empty()) {
      // The source is served as any checkpoint is: strictly, in the roots.
      TM_ASSIGN_OR_RETURN(source_, state_->registry.Acquire(req_->source()));
      options_.source = source_.get();
    }
    auto on_progress = [&](const CheckProgress& p) {
      progress_ = p;
      const int64_t now = absl::ToUnixMillis(absl::Now());
      if (now - last_progress_ms_ < 500) return;
      last_progress_ms_ = now;
      Queue([&](v1::CheckEvent*) { return false; });
    };
    auto on_hash = [&](const ManifestEntry& h) {
      Queue([&](v1::CheckEvent* e) {
        v1::CheckTensorHash* o = e->mutable_hash();
        o->set_name(h.name);
        o->set_file(h.file);
        o->set_offset(h.offset);
        o->set_size(h.size);
        o->set_dtype(h.dtype);
        o->set_xxh3_64(HashHex(h.hash));
        return true;
      });
    };
    // Before the first read: see Checkpoint::CheckNoWriters.
    for (const Checkpoint* c : {ckpt_.get(), source_.get()}) {
      for (size_t f = 0; c != nullptr && f < c->files().size(); ++f) {
        TM_RETURN_IF_ERROR(c->CheckFileNoWriters(f));
      }
    }
    absl::StatusOr<CheckSummary> summary = CheckCheckpoint(
        *ckpt_, options_, &cancelled_, on_progress, on_finding,
        options_.hashes ? std::function<void(const ManifestEntry&)>(on_hash)
                        : nullptr);
    if (!summary.ok() && cancelled_.load()) {
      return absl::CancelledError("cancelled");
    }
    if (!summary.ok()) return summary;
    // After the last read: a check that read across a rewrite must not end
    // OK (its findings and hashes may mix old and new bytes).
    for (const Checkpoint* c : {ckpt_.get(), source_.get()}) {
      for (size_t f = 0; c != nullptr && f < c->files().size(); ++f) {
        TM_RETURN_IF_ERROR(c->CheckFileUnchanged(f, "the check"));
      }
    }
    return summary;
  }

  // Queues the event `fill` makes (a progress event when it returns
  // false), first waiting while the queue is full and the call goes on.
  template <typename Fill>
  void Queue(Fill fill) {
    v1::CheckEvent e;
    if (!fill(&e)) {
      v1::CheckProgress* p = e.mutable_progress();
      p->set_tensors_done(progress_.tensors_done);
      p->set_tensors_total(progress_.tensors_total);
      p->set_bytes_done(progress_.bytes_done);
      p->set_bytes_total(progress_.bytes_total);
      p->set_elapsed_seconds(absl::ToDoubleSeconds(absl::Now() - start_));
    }
    Enqueue(std::move(e));
  }

  void EnqueueProgressLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    v1::CheckEvent e;
    v1::CheckProgress* p = e.mutable_progress();
    p->set_tensors_done(progress_.tensors_done);
    p->set_tensors_total(progress_.tensors_total);
    p->set_bytes_done(progress_.bytes_done);
    p->set_bytes_total(progress_.bytes_total);
    p->set_elapsed_seconds(absl::ToDoubleSeconds(absl::Now() - start_));
    queue_.push_back(std::move(e));
  }

  const v1::CheckCheckpointRequest* req_;
  const absl::Time start_;
  CheckOptions options_;
  std::shared_ptr<const Checkpoint> ckpt_;
  std::shared_ptr<const Checkpoint> source_;  // --source, when given
  CheckProgress progress_;  // the task's; read under mu_ after it ends
  int64_t last_progress_ms_ = 0;
  bool summarized_ ABSL_GUARDED_BY(mu_) = false;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<v1::CheckEvent>* NewCheckCheckpointReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const v1::CheckCheckpointRequest* req) {
  return new CheckCheckpointReactor(std::move(state), ctx, req);
}

}  // namespace tensormorph
