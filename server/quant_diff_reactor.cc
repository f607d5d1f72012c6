// QuantDiff: tensors diffed in parallel in the worker pool's background lane
// (at most background_threads() tasks at a time, all diffs and checks
// together, so interactive calls always find a worker), events queued and
// written one at a time; cancellation stops every task at its next chunk.
// A tensor whose diff splits (DiffSplits: a plain float quantized side) is
// diffed in as many parts as there are background workers, at segment
// boundaries, and its parts merged exactly (MergeDiffParts) when the last
// is done: one big tensor keeps every worker busy.
// With QuantDiffRequest.part the whole plan is paired (metadata only) and
// split by PartitionDiffPlan; only this part's pairs are read and diffed.
// The watchdog (stream_watchdog.h) ends a call past max_call_seconds, or
// one whose client took no event for max_idle_write_seconds.
// Every call that got past Prepare leaves its report (the tensor events and
// the summary, with how the call ended) in the DiffReportStore for
// GetDiffReport, cancelled and failed calls marked so.
#include <algorithm>
#include <atomic>
#include <deque>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/diff/gate.h"
#include "core/diff/pairing.h"
#include "core/diff/tensor_diff.h"
#include "core/diff_parts/fingerprint.h"
#include "core/diff_parts/partition.h"
#include "core/diff_parts/ranked_lists.h"
#include "core/format/stored_tensor.h"
#include "core/io/read_ahead.h"
#include "core/request_limits.h"
#include "proto/status_mapping.h"
#include "server/call_log.h"
#include "server/diff_report_store.h"
#include "server/exception_fence.h"
#include "server/imatrix_lookup.h"
#include "server/proto_convert.h"
#include "server/service.h"
#include "server/stream_reactor.h"

namespace tensormorph {
namespace {

void FillReport(const TensorDiff& d, v1::TensorDiffReport* r) {
  r->set_name(d.name);
  r->set_reference_name(d.ref_name);
  for (int64_t x : d.shape) r->add_shape(x);
  r->set_scheme(d.scheme);
  r->set_granularity(d.granularity);
  r->set_count(d.count);
  r->set_mse(d.mse);
  r->set_rmse(d.rmse);
  r->set_mean_abs_err(d.mean_abs_err);
  r->set_max_abs_err(d.max_abs_err);
  for (int64_t x : d.max_abs_err_index) r->add_max_abs_err_index(x);
  r->set_sqnr_db(d.sqnr_db);
  r->set_cosine(d.cosine);
  r->set_rel_fro_err(d.rel_fro_err);
  r->set_max_err_steps(d.max_err_steps);
  r->set_p99_err_steps(d.p99_err_steps);
  r->set_p999_err_steps(d.p999_err_steps);
  r->set_percentiles_exact(d.percentiles_exact);
  r->set_above_half_step(d.above_half_step);
  r->set_clipped(d.clipped);
  r->set_source_zeros(d.source_zeros);
  r->set_decoded_zeros(d.decoded_zeros);
  r->set_induced_zeros(d.induced_zeros);
  r->set_induced_zero_fraction(InducedZeroFraction(d));
  r->set_source_bytes(d.source_bytes);
  r->set_bound_steps(d.bound_steps);
  r->set_bound_family(d.bound_family);
  r->set_nearest_codes(d.nearest_codes);
  r->set_not_nearest(d.not_nearest);
  r->set_zeroed_groups(d.zeroed_groups);
  r->set_zeroed_elements(d.zeroed_elements);
  r->set_max_excess_steps(d.max_excess_steps);
  r->set_imatrix_use(ImatrixUseToProto(d.imatrix_use));
  r->set_imatrix_note(d.imatrix_note);
  r->set_weighted_sq_err(d.weighted.sum_w_sq_err);
  r->set_weighted_source_energy(d.weighted.sum_w_xx);
  r->set_weighted_sqnr_db(d.weighted_sqnr_db);
  for (const WorstElement& w : d.worst) {
    v1::WorstElement* o = r->add_worst();
    for (int64_t x : w.index) o->add_index(x);
    o->set_source(w.source);
    o->set_decoded(w.decoded);
    o->set_abs_err(w.abs_err);
    o->set_err_steps(w.err_steps);
    FillScalar(w.quant, o->mutable_quant());
    for (int64_t x : w.index) o->mutable_quant()->add_index(x);
    o->mutable_quant()->set_flat_index(w.flat_index);
  }
  for (const WorstGroup& g : d.worst_groups) {
    v1::WorstGroup* o = r->add_worst_groups();
    o->set_group(g.group);
    o->set_count(g.count);
    o->set_mean_err_steps(g.mean_err_steps);
    o->set_max_err_steps(g.max_err_steps);
  }
}

class QuantDiffReactor final : public QueuedStreamReactor<v1::QuantDiffEvent> {
 public:
  QuantDiffReactor(std::shared_ptr<ServiceState> state,
                   grpc::CallbackServerContext* ctx,
                   const v1::QuantDiffRequest* req)
      : QueuedStreamReactor(std::move(state), ctx, "QuantDiff",
                            req->checkpoint(), req->reference(),
                            std::numeric_limits<size_t>::max()),
        req_(req),
        start_(absl::Now()) {
    // Prepare refuses at once (a bad request, no slot free: a router then
    // tries another replica), so it runs in the stream lane, never queued
    // behind the background lane's long work; the tensors run there.
    LaunchCounted(&running_, [this] { Begin(); });
  }

 private:
  // A tensor's share of the work: the whole pair (split < 0), or part
  // `index` of splits_[split], elements [begin, end).
  struct Task {
    size_t pair;
    int64_t begin = 0, end = 0;
    int split = -1;
    int index = 0;
  };
  // The parts of a split tensor as they come in; the first error; the
  // percentile floor its parts share (DiffTensorPart).
  struct Split {
    std::vector<DiffPart> parts;
    int remaining = 0;
    absl::Status error;
    std::atomic<double> floor{0};
  };

  // Over once no task runs, with the summary queued unless the call failed.
  bool WorkOverLocked(bool failed) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return running_ == 0 && (failed || summarized_);
  }
  // The summary, once every tensor is done.
  void BeforeWriteLocked() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (running_ == 0 && next_ == tasks_.size() && !summarized_) {
      summarized_ = true;
      EnqueueSummaryLocked();
    }
  }
  // Within the limits every report fits; one of extreme rank may not.
  absl::Status VetLocked(const v1::QuantDiffEvent& e) override {
    return CheckReplySize(e, state_->limits);
  }
  bool CountsAsChunk(const v1::QuantDiffEvent& e) const override {
    return e.has_tensor();
  }
  int64_t FinishingLocked() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    KeepReportLocked();
    return bytes_done_.load();
  }

  void Begin() {
    absl::Status s = Fenced(log_.site(), [&] { return Prepare(); });
    absl::MutexLock lock(&mu_);
    --running_;
    if (!s.ok()) {
      status_ = ToGrpcStatus(s);  // no tasks to stop
      PumpLocked();
      return;
    }
    FencedLocked(log_.site(), [&] {
      mu_.AssertHeld();
      const int parallel = state_->pool.background_threads();
      for (int i = 0; i < parallel && next_ < tasks_.size(); ++i)
        StartNextLocked();
      PumpLocked();
    });
  }

  absl::Status Prepare() {
    // Gates that do not parse, or a request past a limit (a report too big
    // to send), are refused before the call takes a slot or opens files.
    for (int i = 0; i < req_->fail_on_size(); ++i) {
      auto gate = ParseDiffGate(req_->fail_on(i));
      if (!gate.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("fail_on[", i, "]: ", gate.status().message()));
      }
      gates_.push_back(*std::move(gate));
    }
    TM_RETURN_IF_ERROR(CheckLimit("top_k", req_->top_k(), "max_top_k",
                                  state_->limits.max_top_k));
    TM_RETURN_IF_ERROR(CheckLimit("worst_groups", req_->worst_groups(),
                                  "max_worst_groups",
                                  state_->limits.max_worst_groups));
    TM_RETURN_IF_ERROR(CheckDiffRunId(req_->part().run_id()));
    TM_RETURN_IF_ERROR(
        CheckDiffPart(req_->part().count(), req_->part().index()));
    TM_RETURN_IF_ERROR(AdmitAsDiff(""));
    if (!req_->imatrix().empty()) {
      TM_ASSIGN_OR_RETURN(options_.imatrix,
                          OpenImportanceMatrix(state_->registry.sandbox(),
                                               req_->imatrix(), "imatrix"));
    }
    auto quant = state_->registry.Acquire(req_->checkpoint());
    if (!quant.ok()) return quant.status();
    auto ref = state_->registry.Acquire(req_->reference());
    if (!ref.ok()) return ref.status();
    quant_ = *quant;
    ref_ = *ref;
    auto pairing = PairTensors(*quant_, *ref_, req_->filter());
    if (!pairing.ok()) return pairing.status();
    pairing_ = *std::move(pairing);
    TM_RETURN_IF_ERROR(KeepNamedTensors());
    // Nothing to compare, or the arguments the wrong way round: a gate that
    // would pass vacuously (or on nonsense) fails the call instead.
    if (absl::Status s = CheckPairing(pairing_, *quant_, *ref_, req_->filter(),
                                      req_->checkpoint(), req_->reference());
        !s.ok()) {
      return s;
    }
    // Unset asks for the default; 0 asks for none.
    options_.top_k = req_->has_top_k() ? req_->top_k() : 10;
    options_.worst_groups = req_->has_worst_groups() ? req_->worst_groups() : 5;
    TM_RETURN_IF_ERROR(PlanPart());
    PlanTasks();
    absl::MutexLock lock(&mu_);
    prepared_ = true;
    keep_ = state_->diff_reports.Fits(0);
    EnqueueProgressLocked();
    return absl::OkStatus();
  }

  // With QuantDiffRequest.tensors, drops from the pairing every quantized
  // tensor not named (only_in_reference stays the whole checkpoint's).
  absl::Status KeepNamedTensors() {
    if (req_->tensors().empty()) return absl::OkStatus();
    absl::flat_hash_set<std::string> named;
    for (const std::string& name : req_->tensors()) {
      if (quant_->FindTensor(name) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensors: '", name, "' is no tensor of '", req_->checkpoint(),
            "' (names as `tensormorph ls` lists them)"));
      }
      named.insert(name);
    }
    auto keep = [&](std::vector<std::string>& names, bool mismatch) {
      std::erase_if(names, [&](const std::string& n) {
        // "name: [a,b] vs [c,d]": the name is before the last ": [".
        return !named.contains(mismatch ? n.substr(0, n.rfind(": [")) : n);
      });
    };
    std::erase_if(pairing_.pairs, [&](const TensorPair& p) {
      return !named.contains(p.quant->name);
    });
    keep(pairing_.only_in_quant, false);
    keep(pairing_.shape_mismatches, true);
    keep(pairing_.empty, false);
    if (pairing_.pairs.empty() && pairing_.only_in_quant.empty() &&
        pairing_.shape_mismatches.empty() && pairing_.empty.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensors: none of the ", named.size(),
          " tensors named matches the filter '", req_->filter(), "'"));
    }
    return absl::OkStatus();
  }

  // The pairs this call diffs (todo_): all, or with QuantDiffRequest.part
  // the part's share of the plan, and the part's DiffPartInfo.
  absl::Status PlanPart() {
    std::vector<DiffPlanItem> plan;
    plan.reserve(pairing_.pairs.size());
    int64_t plan_source_bytes = 0;
    for (const TensorPair& p : pairing_.pairs) {
      DiffPlanItem item{p.quant->name, p.ref->name, p.quant->shape, "", 0};
      const int64_t ref_bytes = SourceBytes(p);
      item.bytes = ref_bytes;
      for (const StoredTensor* part : p.quant->encoding->parts()) {
        item.bytes += static_cast<int64_t>(part->nbytes);
      }
      if (!p.quant->encoding->parts().empty()) {
        const int file = p.quant->encoding->parts()[0]->file_index;
        item.file = std::filesystem::path(quant_->files()[file].path)
                        .filename()
                        .string();
      }
      plan_source_bytes += ref_bytes;
      plan.push_back(std::move(item));
    }
    if (req_->part().count() <= 0) {  // the whole diff
      for (size_t i = 0; i < plan.size(); ++i) todo_.push_back(i);
      bytes_total_ = plan_source_bytes;
      return absl::OkStatus();
    }
    const v1::DiffPart& want = req_->part();
    auto parts = PartitionDiffPlan(plan, want.count());
    if (!parts.ok()) return parts.status();
    for (size_t i = 0; i < plan.size(); ++i) {
      if ((*parts)[i] != want.index()) continue;
      todo_.push_back(i);
      bytes_total_ += SourceBytes(pairing_.pairs[i]);
    }
    part_.set_index(want.index());
    part_.set_count(want.count());
    part_.set_plan_tensors(static_cast<int64_t>(plan.size()));
    part_.set_plan_source_bytes(plan_source_bytes);
    part_.set_part_source_bytes(bytes_total_);
    part_.set_plan_fingerprint(
        DiffPlanFingerprint(DiffPlanKeyOf(*req_, options_.top_k,
                                          options_.worst_groups, want.count()),
                            plan));
    *part_.mutable_fail_on() = req_->fail_on();
    part_.set_checkpoint(req_->checkpoint());
    part_.set_reference(req_->reference());
    part_.set_run_id(want.run_id());
    return absl::OkStatus();
  }

  static int64_t SourceBytes(const TensorPair& p) {
    int64_t n = 0;
    for (const StoredTensor* part : p.ref->encoding->parts()) {
      n += static_cast<int64_t>(part->nbytes);
    }
    return n;
  }

  // The tasks for todo_, in its order: a tensor whole, or a split one's
  // parts, as many as the background workers (fewer for a tensor of fewer
  // segments), each a run of whole segments.
  void PlanTasks() {
    std::vector<std::unique_ptr<Split>> splits;
    const int64_t workers = state_->pool.background_threads();
    const int64_t segment = std::max<int64_t>(1, options_.segment_elements);
    for (size_t i : todo_) {
      const TensorPair& p = pairing_.pairs[i];
      const int64_t n = p.quant->num_elements;
      const int64_t segments = (n + segment - 1) / segment;
      const int64_t k = std::min(workers, segments);
      if (k < 2 || !DiffSplits(*p.quant, *p.ref, p.row_map)) {
        tasks_.push_back({i, 0, n, -1, 0});
        continue;
      }
      auto split = std::make_unique<Split>();
      split->parts.resize(static_cast<size_t>(k));
      split->remaining = static_cast<int>(k);
      splits.push_back(std::move(split));
      const int index = static_cast<int>(splits.size()) - 1;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t begin = segments * j / k * segment;
        const int64_t end = std::min(n, segments * (j + 1) / k * segment);
        tasks_.push_back({i, begin, end, index, static_cast<int>(j)});
      }
    }
    absl::MutexLock lock(&mu_);
    splits_ = std::move(splits);
  }

  void StartNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t t = next_;
    state_->pool.SubmitBackground([this, t] { RunTask(t); });
    ++next_;  // counted once submitted: a failed Submit leaves no slot
    ++running_;
  }

  void RunTask(size_t t) {
    const Task& task = tasks_[t];  // fixed since Prepare
    if (task.split < 0) {
      RunPair(task.pair);
      return;
    }
    const TensorPair& p = pairing_.pairs[task.pair];
    const FenceSite site{"QuantDiff", req_->checkpoint(), p.quant->name};
    std::atomic<double>* floor;
    {
      absl::MutexLock lock(&mu_);
      floor = &splits_[task.split]->floor;  // lives as long as the call
    }
    auto part = Fenced(site, [&] { return DiffPairPart(p, task, floor); });
    std::vector<DiffPart> parts;
    {
      absl::MutexLock lock(&mu_);
      Split& split = *splits_[task.split];
      if (!part.ok() && split.error.ok()) {
        split.error = part.status();
        // Only a tensor that cannot decode waits for its other parts (it is
        // a gap the summary lists); any other failure ends the call.
        if (!absl::IsUnimplemented(part.status())) FailLocked(part.status());
      } else if (part.ok()) {
        split.parts[task.index] = *std::move(part);
      }
      if (--split.remaining > 0 || !split.error.ok()) {
        if (split.remaining == 0 && absl::IsUnimplemented(split.error)) {
          FinishPairLocked(p, split.error);  // gives this task's count back
          return;
        }
        --running_;
        if (!cancelled_.load() && next_ < tasks_.size()) StartNextLocked();
        PumpLocked();
        return;
      }
      parts = std::move(split.parts);
    }
    // The last part: the merge (a few inspected elements) off the lock.
    auto diff = Fenced(site, [&] {
      return MergeDiffParts(*p.quant, *p.ref, options_, p.row_map,
                            std::move(parts));
    });
    absl::MutexLock lock(&mu_);
    FinishPairLocked(p, std::move(diff));
  }

  void RunPair(size_t i) {
    const TensorPair& p = pairing_.pairs[i];
    auto diff = Fenced({"QuantDiff", req_->checkpoint(), p.quant->name},
                       [&] { return DiffPair(p); });
    absl::MutexLock lock(&mu_);
    FinishPairLocked(p, std::move(diff));
  }

  // A tensor's report, or its failure, once its task (or its last part)
  // is done: gives back the task's running count.
  void FinishPairLocked(const TensorPair& p, absl::StatusOr<TensorDiff> diff)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    --running_;
    if (absl::IsUnimplemented(diff.status())) {
      // A tensor Tensormorph cannot decode (its dtype) is a gap the summary
      // lists; the other tensors are compared.
      undecodable_.push_back(absl::StrCat(p.quant->name, ": ",
                                          p.quant->encoding->info().scheme,
                                          ": ", diff.status().message()));
      if (!cancelled_.load() && next_ < tasks_.size()) StartNextLocked();
      PumpLocked();
      return;
    }
    if (!diff.ok()) {
      FailLocked(diff.status());  // one failed tensor ends the call
      return;
    }
    FencedLocked({"QuantDiff", req_->checkpoint(), p.quant->name}, [&] {
      mu_.AssertHeld();
      ReportLocked(*diff);
    });
  }

  static std::vector<absl::Span<const uint8_t>> PartBytes(
      const LogicalTensor& t) {
    std::vector<absl::Span<const uint8_t>> out;
    for (const StoredTensor* part : t.encoding->parts()) {
      out.push_back(part->data);
    }
    return out;
  }

  // Runs `diff(on_progress, workspace)` over elements [begin, end) of the
  // pair: the files checked for writers before the first read and for
  // changes after the last (a report must not mix old and new bytes), their
  // next bytes read ahead from a cold file while it works (read_ahead.h),
  // progress counted in source bytes, a workspace lent from the call's.
  template <typename Result, typename Diff>
  absl::StatusOr<Result> WithProgress(const TensorPair& p, int64_t begin,
                                      int64_t end, const Diff& diff) {
    // Before the first read: see Checkpoint::CheckNoWriters.
    TM_RETURN_IF_ERROR(quant_->CheckNoWriters(*p.quant));
    TM_RETURN_IF_ERROR(ref_->CheckNoWriters(*p.ref));
    const int64_t ref_bytes = SourceBytes(p);
    const int64_t n = std::max<int64_t>(1, p.quant->num_elements);
    // The diff reports each chunk done; the next is taken to be as long.
    ElementReadAhead quant_ahead(PartBytes(*p.quant), p.quant->num_elements);
    ElementReadAhead ref_ahead(PartBytes(*p.ref), p.ref->num_elements);
    constexpr int64_t kFirstChunk = int64_t{1} << 20;
    quant_ahead.Reading(begin, std::min(kFirstChunk, end - begin));
    ref_ahead.Reading(begin, std::min(kFirstChunk, end - begin));
    int64_t reported = 0, last_done = 0;
    auto on_progress = [&](int64_t done) {
      quant_ahead.Reading(begin + done, done - last_done);
      ref_ahead.Reading(begin + done, done - last_done);
      last_done = done;
      const int64_t bytes = ref_bytes * done / n;
      bytes_done_.fetch_add(bytes - reported);
      reported = bytes;
      MaybeProgress();
    };
    std::unique_ptr<DiffWorkspace> workspace;
    {
      absl::MutexLock lock(&mu_);
      if (!workspaces_.empty()) {
        workspace = std::move(workspaces_.back());
        workspaces_.pop_back();
      }
    }
    if (workspace == nullptr) workspace = std::make_unique<DiffWorkspace>();
    absl::StatusOr<Result> result = diff(on_progress, workspace.get());
    {
      absl::MutexLock lock(&mu_);
      workspaces_.push_back(std::move(workspace));
    }
    if (!result.ok()) return result;
    // After the last read of both.
    TM_RETURN_IF_ERROR(quant_->CheckUnchanged(*p.quant));
    TM_RETURN_IF_ERROR(ref_->CheckUnchanged(*p.ref));
    return result;
  }

  absl::StatusOr<TensorDiff> DiffPair(const TensorPair& p) {
    return WithProgress<TensorDiff>(
        p, 0, p.quant->num_elements,
        [&](const std::function<void(int64_t)>& on_progress,
            DiffWorkspace* workspace) {
          return DiffTensor(*p.quant, *p.ref, options_, p.row_map, &cancelled_,
                            on_progress, workspace);
        });
  }

  absl::StatusOr<DiffPart> DiffPairPart(const TensorPair& p, const Task& t,
                                        std::atomic<double>* floor) {
    return WithProgress<DiffPart>(
        p, t.begin, t.end,
        [&](const std::function<void(int64_t)>& on_progress,
            DiffWorkspace* workspace) {
          return DiffTensorPart(*p.quant, *p.ref, options_, t.begin, t.end,
                                p.row_map, &cancelled_, on_progress, workspace);
        });
  }

  void ReportLocked(const TensorDiff& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++done_;
    v1::QuantDiffEvent e;
    v1::TensorDiffReport* r = e.mutable_tensor();
    FillReport(d, r);
    for (std::string& reason : TrippedReasons(gates_, d)) {
      r->set_flagged(true);
      r->add_flag_reasons(std::move(reason));
    }
    entries_.push_back(DiffSummaryEntryOf(*r));
    not_nearest_ += d.not_nearest;
    clipped_ += d.clipped;
    zeroed_groups_ += d.zeroed_groups;
    max_excess_ = std::max(max_excess_, d.max_excess_steps);
    if (d.imatrix_use != ImatrixUse::kNone) weighted_.push_back(*r);
    CollectLocked(e);
    queue_.push_back(std::move(e));
    if (!cancelled_.load() && next_ < tasks_.size()) StartNextLocked();
    PumpLocked();
  }

  // At most one progress event per half second from the workers' chunks.
  void MaybeProgress() {
    const int64_t now = absl::ToUnixMillis(absl::Now());
    int64_t last = last_progress_ms_.load();
    if (now - last < 500 ||
        !last_progress_ms_.compare_exchange_strong(last, now))
      return;
    absl::MutexLock lock(&mu_);
    EnqueueProgressLocked();
    PumpLocked();
  }

  void EnqueueProgressLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    v1::QuantDiffEvent e;
    v1::DiffProgress* p = e.mutable_progress();
    p->set_tensors_done(done_);
    p->set_tensors_total(static_cast<int64_t>(todo_.size()));
    p->set_bytes_done(bytes_done_.load());
    p->set_bytes_total(bytes_total_);
    p->set_elapsed_seconds(absl::ToDoubleSeconds(absl::Now() - start_));
    queue_.push_back(std::move(e));
  }

  void EnqueueSummaryLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    EnqueueProgressLocked();
    v1::QuantDiffEvent e;
    v1::DiffSummary* s = e.mutable_summary();
    s->set_pairing(pairing_.translated ? v1::DIFF_PAIRING_GGUF_TO_HF_NAMES
                                       : v1::DIFF_PAIRING_BY_NAME);
    s->set_pairing_architecture(pairing_.architecture);
    s->set_tensors_compared(done_);
    for (const auto& n : pairing_.only_in_quant) s->add_only_in_checkpoint(n);
    for (const auto& n : pairing_.only_in_ref) s->add_only_in_reference(n);
    for (const auto& n : pairing_.shape_mismatches) s->add_shape_mismatches(n);
    for (const auto& n : pairing_.empty) s->add_skipped_empty(n);
    FillRankedLists(RankDiffEntries(std::move(entries_)), s);
    s->set_not_nearest(not_nearest_);
    s->set_clipped(clipped_);
    s->set_zeroed_groups(zeroed_groups_);
    s->set_max_excess_steps(max_excess_);
    if (options_.imatrix != nullptr) FillWeightedTotals(weighted_, s);
    // Sorted: workers finish in any order, the summary must not.
    std::sort(undecodable_.begin(), undecodable_.end());
    for (std::string& u : undecodable_) s->add_undecodable(std::move(u));
    if (req_->part().count() > 0) *s->mutable_part() = part_;
    s->set_wall_seconds(absl::ToDoubleSeconds(absl::Now() - start_));
    s->set_bytes_read(bytes_done_.load());
    CollectLocked(e);
    queue_.push_back(std::move(e));
  }

  // Copies `e` into the report kept for GetDiffReport, until the events
  // would not fit the store (then nothing is kept).
  void CollectLocked(const v1::QuantDiffEvent& e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!keep_) return;
    kept_bytes_ += static_cast<int64_t>(e.ByteSizeLong()) + 8;
    if (!state_->diff_reports.Fits(kept_bytes_)) {
      keep_ = false;
      kept_.Clear();
      return;
    }
    *kept_.add_events() = e;
  }

  // Leaves the report with how the call ended, once it has: the reports
  // sent or queued, marked cancelled or failed unless the summary was made
  // and the call succeeded. One that grew too big drops the last one kept.
  void KeepReportLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!prepared_) return;  // refused before the diff began: nothing kept
    const bool scoped = !req_->filter().empty() || !req_->tensors().empty() ||
                        req_->part().count() > 0;
    if (status_.ok()) {
      kept_.set_state(scoped ? v1::DIFF_REPORT_PARTIAL
                             : v1::DIFF_REPORT_COMPLETE);
    } else {
      kept_.set_state(status_.error_code() == grpc::CANCELLED
                          ? v1::DIFF_REPORT_CANCELLED
                          : v1::DIFF_REPORT_FAILED);
      kept_.set_code(static_cast<int>(status_.error_code()));
      kept_.set_message(status_.error_message());
    }
    kept_.set_tensors_planned(static_cast<int64_t>(todo_.size()));
    const std::string key = DiffReportKey(*req_, *quant_, *ref_);
    if (!keep_) {
      // Too big to keep: the report before is not the last any more.
      state_->diff_reports.Drop(key);
      return;
    }
    state_->diff_reports.Keep(key, DiffInputsOf(*quant_, *ref_),
                              std::move(kept_));
  }

  const v1::QuantDiffRequest* req_;
  const absl::Time start_;
  std::shared_ptr<const Checkpoint> quant_, ref_;
  Pairing pairing_;
  // Indices into pairing_.pairs this call diffs, in plan order (set in
  // Prepare), and with a part its DiffPartInfo.
  std::vector<size_t> todo_;
  v1::DiffPartInfo part_;
  std::vector<Task> tasks_;  // set in Prepare, in todo_'s order
  std::vector<std::unique_ptr<Split>> splits_ ABSL_GUARDED_BY(mu_);
  std::vector<DiffGate> gates_;  // the request's fail_on, set in Prepare
  DiffOptions options_;
  int64_t bytes_total_ = 0;
  std::atomic<int64_t> bytes_done_{0};
  std::atomic<int64_t> last_progress_ms_{0};
  bool summarized_ ABSL_GUARDED_BY(mu_) = false;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  // One per tensor in flight, handed from tensor to tensor (their buffers
  // stay mapped); freed with the call.
  std::vector<std::unique_ptr<DiffWorkspace>> workspaces_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  // The summary's totals of the reports' excess counts.
  int64_t not_nearest_ ABSL_GUARDED_BY(mu_) = 0;
  // Reports of tensors the imatrix applied to (for the summary's totals).
  std::vector<v1::TensorDiffReport> weighted_ ABSL_GUARDED_BY(mu_);
  int64_t clipped_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t zeroed_groups_ ABSL_GUARDED_BY(mu_) = 0;
  double max_excess_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> undecodable_ ABSL_GUARDED_BY(mu_);
  std::vector<DiffSummaryEntry> entries_ ABSL_GUARDED_BY(mu_);
  // The report for GetDiffReport: collected while keep_ (set once the call
  // is prepared, cleared when it grew past the store's budget).
  bool prepared_ ABSL_GUARDED_BY(mu_) = false;
  bool keep_ ABSL_GUARDED_BY(mu_) = false;
  int64_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  v1::GetDiffReportResponse kept_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerWriteReactor<v1::QuantDiffEvent>* NewQuantDiffReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const v1::QuantDiffRequest* req) {
  return new QuantDiffReactor(std::move(state), ctx, req);
}

}  // namespace tensormorph
