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
    : public grpc::ServerWriteReactor<v1::CheckEvent> {
 public:
  CheckCheckpointReactor(std::shared_ptr<ServiceState> state,
                         grpc::CallbackServerContext* ctx,
                         const v1::CheckCheckpointRequest* req)
      : state_(std::move(state)),
        ctx_(ctx),
        req_(req),
        log_("CheckCheckpoint", ctx, req->checkpoint(), ""),
        peer_(SharePeer(*ctx)),
        start_(absl::Now()) {
    state_->StreamStarted();
    watch_ = state_->watchdog.Add(
        [this](const absl::Status& why) { Interrupt(ToGrpcStatus(why)); },
        [this](const absl::Status& why) { CancelNow(ToGrpcStatus(why)); });
    {
      absl::MutexLock lock(&mu_);
      running_ = true;
    }
    state_->pool.Submit([this] { Start(); });
  }

  void OnWriteDone(bool ok) override {
    state_->watchdog.WriteDone(watch_);
    absl::MutexLock lock(&mu_);
    FencedLocked([&] {
      mu_.AssertHeld();
      writing_ = false;
      if (!ok) {
        cancelled_.store(true);
        if (status_.ok())
          status_ = grpc::Status(grpc::CANCELLED, "client went away");
      } else {
        queue_.pop_front();
      }
      PumpLocked();
    });
  }

  void OnCancel() override {
    cancelled_.store(true);
    absl::MutexLock lock(&mu_);
    FencedLocked([&] {
      mu_.AssertHeld();
      if (status_.ok()) status_ = grpc::Status(grpc::CANCELLED, "cancelled");
      PumpLocked();
    });
  }

  void OnDone() override {
    state_->watchdog.Remove(watch_);
    // Finish is called under mu_; wait for that caller to unlock.
    { absl::MutexLock lock(&mu_); }
    Fenced(log_.site(), [&] {
      ReleaseSlots();
      state_->StreamEnded(cancelled_.load(), /*holds_slot=*/false);
    }).IgnoreError();
    delete this;
  }

 private:
  template <typename F>
  void FencedLocked(F&& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (absl::Status s = Fenced(log_.site(), f); !s.ok()) {
      if (status_.ok()) status_ = ToGrpcStatus(s);
      cancelled_.store(true);
      PumpLocked();
    }
  }

  void ReleaseSlots() {
    if (admitted_) state_->ReleaseStream(peer_);
    if (counted_) state_->active_diffs.fetch_sub(1);
    admitted_ = counted_ = false;
  }

  void Interrupt(const grpc::Status& status) {
    cancelled_.store(true);
    absl::MutexLock lock(&mu_);
    if (status_.ok()) status_ = status;
    PumpLocked();
  }

  void CancelNow(const grpc::Status& status) {
    cancelled_.store(true);
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      if (status_.ok()) status_ = status;
    }
    ctx_->TryCancel();
  }

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
    FencedLocked([&] {
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
    TM_RETURN_IF_ERROR(state_->TryAdmitStream(peer_));
    admitted_ = true;
    if (state_->active_diffs.fetch_add(1) >=
        state_->limits.max_concurrent_diffs) {
      state_->active_diffs.fetch_sub(1);
      return absl::ResourceExhaustedError(absl::StrCat(
          "limit max_concurrent_diffs (", state_->limits.max_concurrent_diffs,
          ") reached (a check counts as a diff); retry later"));
    }
    counted_ = true;
    return absl::OkStatus();
  }

  absl::StatusOr<CheckSummary> Check() {
    // What ls refuses is opened leniently, for this check only: its
    // problems are findings.
    TM_ASSIGN_OR_RETURN(ckpt_,
                        state_->registry.AcquireForCheck(req_->checkpoint()));
    // A server run with --partial-shards holds some shards only: a check of
    // what it holds would say "clean" of tensors it never saw. (Without
    // it, an absent shard is a shard-missing finding.)
    if (state_->registry.open_options().allow_absent_shards &&
        !ckpt_->absent_files().empty()) {
      std::vector<std::string> absent;
      for (const Checkpoint::AbsentFile& f : ckpt_->absent_files()) {
        absent.push_back(
            absl::StrCat("'", std::filesystem::path(f.path).filename().string(),
                         "' (", f.tensor_count, " tensors)"));
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "check of '", req_->checkpoint(),
          "' needs every shard, and this server (--partial-shards) lacks ",
          absent.size(), ": ", absl::StrJoin(absent, ", "),
          "; run it where the checkpoint is whole"));
    }
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
      Enqueue([&](v1::CheckEvent*) { return false; });
    };
    auto on_finding = [&](const Finding& f) {
      Enqueue([&](v1::CheckEvent* e) {
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
    auto on_hash = [&](const ManifestEntry& h) {
      Enqueue([&](v1::CheckEvent* e) {
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
  void Enqueue(Fill fill) {
    v1::CheckEvent e;
    if (!fill(&e)) {
      v1::CheckProgress* p = e.mutable_progress();
      p->set_tensors_done(progress_.tensors_done);
      p->set_tensors_total(progress_.tensors_total);
      p->set_bytes_done(progress_.bytes_done);
      p->set_bytes_total(progress_.bytes_total);
      p->set_elapsed_seconds(absl::ToDoubleSeconds(absl::Now() - start_));
    }
    absl::MutexLock lock(&mu_);
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return queue_.size() < kMaxQueuedEvents || cancelled_.load() ||
             !status_.ok();
    };
    mu_.Await(absl::Condition(&room));
    if (cancelled_.load() || !status_.ok()) return;
    queue_.push_back(std::move(e));
    PumpLocked();
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

  // Starts the next write, or finishes once the check is over and nothing
  // waits.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    if (status_.ok() && !queue_.empty()) {
      if (absl::Status fits = CheckReplySize(queue_.front(), state_->limits);
          !fits.ok()) {
        status_ = ToGrpcStatus(fits);
        cancelled_.store(true);
      }
    }
    const bool failed = !status_.ok();
    if (!failed && !queue_.empty()) {
      writing_ = true;
      state_->metrics.chunks_sent.fetch_add(1);
      state_->watchdog.WriteStarted(watch_);
      StartWrite(&queue_.front());
      return;
    }
    if (!running_ && (failed || summarized_)) {
      finished_ = true;
      log_.Finish(status_, progress_.bytes_done);
      ReleaseSlots();
      Finish(status_);
    }
  }

  std::shared_ptr<ServiceState> state_;
  grpc::CallbackServerContext* ctx_;
  const v1::CheckCheckpointRequest* req_;
  StreamWatchdog::Watch* watch_ = nullptr;
  CallLog log_;
  const std::string peer_;  // PeerHost: whose stream slot
  const absl::Time start_;
  // Set by the check task, read by PumpLocked once running_ is false.
  bool admitted_ = false;
  bool counted_ = false;
  CheckOptions options_;
  std::shared_ptr<const Checkpoint> ckpt_;
  std::shared_ptr<const Checkpoint> source_;  // --source, when given
  CheckProgress progress_;  // the task's; read under mu_ after it ends
  int64_t last_progress_ms_ = 0;
  std::atomic<bool> cancelled_{false};

  absl::Mutex mu_;
  std::deque<v1::CheckEvent> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool summarized_ ABSL_GUARDED_BY(mu_) = false;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerWriteReactor<v1::CheckEvent>* NewCheckCheckpointReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const v1::CheckCheckpointRequest* req) {
  return new CheckCheckpointReactor(std::move(state), ctx, req);
}

}  // namespace tensormorph
