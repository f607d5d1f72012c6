// CompareQuantizations: N quantizations of one source, one walk over the
// source's tensors in name order as one task in the worker pool's
// background lane, each tensor diffed against each quantization by
// DiffTensor with QuantDiff's pairing and default options, so that every
// cell equals that tensor's QuantDiff report (QuantDiff merges split parts
// to the very bits of DiffTensor). One row event per source tensor, then
// the summary (server/compare_summary.h). The walk waits while
// kMaxQueuedEvents are unsent, so a slow client bounds the memory; the
// watchdog (stream_watchdog.h) ends a call past max_call_seconds or one
// whose client took no event for max_idle_write_seconds; cancellation stops
// the walk at its next chunk. Holds a max_concurrent_diffs slot.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/compare/bits_per_weight.h"
#include "core/diff/pairing.h"
#include "core/diff/tensor_diff.h"
#include "core/util/error_reason.h"
#include "core/util/status_macros.h"
#include "proto/status_mapping.h"
#include "server/call_log.h"
#include "server/compare_summary.h"
#include "server/exception_fence.h"
#include "server/service.h"
#include "server/stream_reactor.h"

namespace tensormorph {
namespace {

constexpr size_t kMaxQueuedEvents = 256;

// The request's own rules, before any file is opened.
absl::Status CheckCompareRequest(const v1::CompareQuantizationsRequest& req) {
  if (req.source().empty()) {
    return RequestFieldError("source", "compare needs a source checkpoint");
  }
  if (req.quantizations_size() < 2) {
    return RequestFieldError(
        "quantizations",
        absl::StrCat("compare needs two or more quantizations, got ",
                     req.quantizations_size(),
                     " (one is `tensormorph diff`'s work)"));
  }
  if (req.base() < 0 || req.base() >= req.quantizations_size()) {
    return RequestFieldError(
        "base", absl::StrCat("base ", req.base(), " is no index of the ",
                             req.quantizations_size(), " quantizations"));
  }
  if (!req.imatrix().empty()) {
    return RequestFieldError(
        "imatrix", "importance-weighted comparison is not supported yet");
  }
  if (req.has_budget_bits_per_weight() &&
      !(std::isfinite(req.budget_bits_per_weight()) &&
        req.budget_bits_per_weight() > 0)) {
    return RequestFieldError(
        "budget_bits_per_weight",
        absl::StrCat("budget_bits_per_weight ", req.budget_bits_per_weight(),
                     " is not a positive number"));
  }
  if (req.has_budget_bytes() && req.budget_bytes() <= 0) {
    return RequestFieldError(
        "budget_bytes",
        absl::StrCat("budget_bytes ", req.budget_bytes(), " is not positive"));
  }
  return absl::OkStatus();
}

class CompareReactor final : public QueuedStreamReactor<v1::CompareEvent> {
 public:
  CompareReactor(std::shared_ptr<ServiceState> state,
                 grpc::CallbackServerContext* ctx,
                 const v1::CompareQuantizationsRequest* req)
      : QueuedStreamReactor(std::move(state), ctx, "CompareQuantizations",
                            req->source(), req->filter(), kMaxQueuedEvents),
        req_(req),
        start_(absl::Now()) {
    {
      absl::MutexLock lock(&mu_);
      running_ = true;
    }
    Launch([this] { Start(); });
  }

 private:
  // A source tensor and, per quantization, its pair (-1: none).
  struct Row {
    const LogicalTensor* ref = nullptr;
    std::vector<int> pair;
  };

  bool WorkOverLocked(bool) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !running_;
  }

  // On the stream lane: what refuses a call answers at once; the walk then
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
    TM_RETURN_IF_ERROR(CheckCompareRequest(*req_));
    TM_ASSIGN_OR_RETURN(source_, state_->registry.Acquire(req_->source()));
    std::map<std::string, Row> rows;
    for (int q = 0; q < req_->quantizations_size(); ++q) {
      TM_ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> quant,
                          state_->registry.Acquire(req_->quantizations(q)));
      TM_ASSIGN_OR_RETURN(Pairing pairing,
                          PairTensors(*quant, *source_, req_->filter()));
      TM_RETURN_IF_ERROR(CheckPairing(pairing, *quant, *source_, req_->filter(),
                                      req_->quantizations(q), req_->source()));
      for (size_t i = 0; i < pairing.pairs.size(); ++i) {
        Row& row = rows[pairing.pairs[i].ref->name];
        row.ref = pairing.pairs[i].ref;
        row.pair.resize(req_->quantizations_size(), -1);
        row.pair[q] = static_cast<int>(i);
      }
      quants_.push_back(std::move(quant));
      pairings_.push_back(std::move(pairing));
    }
    for (auto& [name, row] : rows) rows_.push_back(std::move(row));
    return AdmitAsDiff(" (a comparison counts as a diff)");
  }

  // One quantization's cell of a row, from the diff QuantDiff makes of it.
  absl::StatusOr<v1::CompareCell> Cell(const TensorPair& p) {
    v1::CompareCell cell;
    cell.set_present(true);
    cell.set_name(p.quant->name);
    cell.set_scheme(p.quant->encoding->info().scheme);
    cell.set_bytes(StoredBytes(*p.quant));
    cell.set_bits_per_weight(
        BitsPerWeight(cell.bytes(), p.quant->num_elements));
    TM_RETURN_IF_ERROR(quants_checked_->CheckNoWriters(*p.quant));
    TM_RETURN_IF_ERROR(source_->CheckNoWriters(*p.ref));
    absl::StatusOr<TensorDiff> d =
        DiffTensor(*p.quant, *p.ref, DiffOptions{}, p.row_map, &cancelled_, {},
                   &workspace_);
    if (absl::IsUnimplemented(d.status())) {
      cell.set_undecodable(std::string(d.status().message()));
      return cell;
    }
    TM_RETURN_IF_ERROR(d.status());
    TM_RETURN_IF_ERROR(quants_checked_->CheckUnchanged(*p.quant));
    TM_RETURN_IF_ERROR(source_->CheckUnchanged(*p.ref));
    cell.set_sqnr_db(d->sqnr_db);
    cell.set_max_excess_steps(d->max_excess_steps);
    cell.set_clipped(d->clipped);
    cell.set_zeroed_groups(d->zeroed_groups);
    cell.set_mse(d->mse);
    cell.set_sum_squared_error(d->mse * static_cast<double>(d->count));
    return cell;
  }

  absl::Status Walk() {
    const int64_t total = static_cast<int64_t>(rows_.size());
    std::vector<v1::CompareRow> sent;
    sent.reserve(rows_.size());
    for (const Row& row : rows_) {
      if (cancelled_.load()) return absl::CancelledError("cancelled");
      v1::CompareEvent e;
      v1::CompareRow* r = e.mutable_row();
      r->set_reference_name(row.ref->name);
      for (int64_t x : row.ref->shape) r->add_shape(x);
      r->set_count(row.ref->num_elements);
      for (size_t q = 0; q < row.pair.size(); ++q) {
        if (row.pair[q] < 0) {
          r->add_cells();
          continue;
        }
        quants_checked_ = quants_[q].get();
        TM_ASSIGN_OR_RETURN(*r->add_cells(),
                            Cell(pairings_[q].pairs[row.pair[q]]));
      }
      sent.push_back(*r);
      ++done_;
      if (!Enqueue(Progress(total)) || !Enqueue(std::move(e))) {
        return absl::OkStatus();  // the call ended
      }
    }
    TM_ASSIGN_OR_RETURN(v1::CompareSummary summary,
                        SummarizeComparison(*req_, sent, quants_));
    summary.set_wall_seconds(absl::ToDoubleSeconds(absl::Now() - start_));
    v1::CompareEvent e;
    *e.mutable_summary() = std::move(summary);
    Enqueue(std::move(e));
    return absl::OkStatus();
  }

  v1::CompareEvent Progress(int64_t total) const {
    v1::CompareEvent e;
    v1::DiffProgress* p = e.mutable_progress();
    p->set_tensors_done(done_);
    p->set_tensors_total(total);
    p->set_elapsed_seconds(absl::ToDoubleSeconds(absl::Now() - start_));
    return e;
  }

  const v1::CompareQuantizationsRequest* req_;
  const absl::Time start_;
  // Set by Admit, read by the walk.
  std::shared_ptr<const Checkpoint> source_;
  std::vector<std::shared_ptr<const Checkpoint>> quants_;
  std::vector<Pairing> pairings_;  // per quantization
  std::vector<Row> rows_;          // by source tensor name
  // The walk's own: the quantization of the cell in work, rows done, and
  // the diff's scratch.
  const Checkpoint* quants_checked_ = nullptr;
  int64_t done_ = 0;
  DiffWorkspace workspace_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<v1::CompareEvent>* NewCompareQuantizationsReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const v1::CompareQuantizationsRequest* req) {
  return new CompareReactor(std::move(state), ctx, req);
}

}  // namespace tensormorph
