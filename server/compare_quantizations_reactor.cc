// CompareQuantizations: N quantizations of one source, each source tensor
// diffed against each quantization by DiffTensor with QuantDiff's pairing and
// default options (and the request's imatrix, as QuantDiff's), so that every
// cell equals that tensor's QuantDiff report
// (QuantDiff merges split parts to the very bits of DiffTensor). The cells
// run in parallel in the worker pool's background lane (at most
// background_threads() at a time, each finished cell starting the next, so
// no task waits on another); a row goes out once its cells are done and
// every row before it has gone, so rows arrive in name order. The last
// task makes the summary (server/compare_summary.h) off the lock. The
// watchdog (stream_watchdog.h) ends a call past max_call_seconds or one
// whose client took no event for max_idle_write_seconds; cancellation stops
// every cell at its next chunk. Holds a max_concurrent_diffs slot.
#include <fnmatch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
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
#include "server/imatrix_lookup.h"
#include "server/service.h"
#include "server/stream_reactor.h"

namespace tensormorph {
namespace {

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
  // Set but empty: an unset shell variable rather than a wish for no
  // matrix, which would run unweighted without a word (as diff refuses).
  if (req.has_imatrix() && req.imatrix().empty()) {
    return RequestFieldError(
        "imatrix",
        "imatrix: the path is empty (leave it unset for no importance matrix)");
  }
  return absl::OkStatus();
}

// A bits-per-weight budget is applied in bytes (floor of bpw x elements /
// 8 over the mix's tensors, at most the `elements` of every row): one that
// comes to no byte even over every row is as meaningless as budget_bytes 0,
// and one past int64 over a single element cannot be applied as asked.
// Both are refused as budget_bytes' are rather than rounded or clamped.
absl::Status CheckBitsBudget(const v1::CompareQuantizationsRequest& req,
                             int64_t elements) {
  if (!req.has_budget_bits_per_weight()) return absl::OkStatus();
  const double bpw = req.budget_bits_per_weight();
  if (bpw / 8.0 >= 9.2e18) {
    return RequestFieldError(
        "budget_bits_per_weight",
        absl::StrCat("budget_bits_per_weight ", bpw,
                     " is more bytes than a budget can hold (int64)"));
  }
  if (std::floor(bpw * static_cast<double>(elements) / 8.0) < 1) {
    return RequestFieldError(
        "budget_bits_per_weight",
        absl::StrCat("budget_bits_per_weight ", bpw, " over the ", elements,
                     " elements compared is less than a byte"));
  }
  return absl::OkStatus();
}

class CompareReactor final : public QueuedStreamReactor<v1::CompareEvent> {
 public:
  CompareReactor(std::shared_ptr<ServiceState> state,
                 grpc::CallbackServerContext* ctx,
                 const v1::CompareQuantizationsRequest* req)
      : QueuedStreamReactor(std::move(state), ctx, "CompareQuantizations",
                            req->source(), req->filter(),
                            std::numeric_limits<size_t>::max()),
        req_(req),
        start_(absl::Now()) {
    // What refuses a call answers at once from the stream lane; the cells
    // run in the background lane.
    LaunchCounted(&running_, [this] { Begin(); });
  }

 private:
  // A source tensor and, per quantization, its pair (-1: none).
  struct Row {
    const LogicalTensor* ref = nullptr;
    std::vector<int> pair;
  };
  // One cell's work: row `row`, quantization `q`.
  struct Task {
    size_t row;
    int q;
  };
  // A row as its cells come in.
  struct Pending {
    v1::CompareRow row;
    int remaining = 0;
  };

  bool WorkOverLocked(bool failed) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return running_ == 0 && (failed || summarized_);
  }

  void Begin() {
    absl::Status s = Fenced(log_.site(), [&] { return Admit(); });
    absl::MutexLock lock(&mu_);
    --running_;
    if (!s.ok()) {
      if (status_.ok()) status_ = ToGrpcStatus(s);
      PumpLocked();
      return;
    }
    FencedLocked(log_.site(), [&] {
      mu_.AssertHeld();
      queue_.push_back(Progress());
      const int parallel = state_->pool.background_threads();
      for (int i = 0; i < parallel && next_ < tasks_.size(); ++i) {
        StartNextLocked();
      }
      PumpLocked();
    });
  }

  absl::Status Admit() {
    TM_RETURN_IF_ERROR(CheckCompareRequest(*req_));
    TM_ASSIGN_OR_RETURN(source_, state_->registry.Acquire(req_->source()));
    std::map<std::string, Row> rows;
    const int n = req_->quantizations_size();
    for (int q = 0; q < n; ++q) {
      TM_ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> quant,
                          state_->registry.Acquire(req_->quantizations(q)));
      // The filter is on the rows, the source's names: one glob for
      // quantizations whose own names differ (a GGUF's and a safetensors').
      TM_ASSIGN_OR_RETURN(Pairing pairing, PairTensors(*quant, *source_));
      TM_RETURN_IF_ERROR(CheckPairing(pairing, *quant, *source_, "",
                                      req_->quantizations(q), req_->source()));
      for (size_t i = 0; i < pairing.pairs.size(); ++i) {
        const std::string& name = pairing.pairs[i].ref->name;
        if (!req_->filter().empty() &&
            ::fnmatch(req_->filter().c_str(), name.c_str(), 0) != 0) {
          continue;
        }
        Row& row = rows[name];
        row.ref = pairing.pairs[i].ref;
        row.pair.resize(n, -1);
        row.pair[q] = static_cast<int>(i);
      }
      quants_.push_back(std::move(quant));
      pairings_.push_back(std::move(pairing));
    }
    if (rows.empty()) {
      return RequestFieldError(
          "filter", absl::StrCat("0 tensors to compare: the filter '",
                                 req_->filter(), "' matches none of the ",
                                 "paired tensors of the source '",
                                 req_->source(), "' (a glob on its names)"));
    }
    int64_t elements = 0;
    for (const auto& [name, row] : rows) elements += row.ref->num_elements;
    TM_RETURN_IF_ERROR(CheckBitsBudget(*req_, elements));
    for (auto& [name, row] : rows) {
      Pending& p = pending_.emplace_back();
      p.row.set_reference_name(row.ref->name);
      for (int64_t x : row.ref->shape) p.row.add_shape(x);
      p.row.set_count(row.ref->num_elements);
      for (int q = 0; q < n; ++q) {
        p.row.add_cells();
        if (row.pair[q] < 0) continue;
        ++p.remaining;
        tasks_.push_back({pending_.size() - 1, q});
        const TensorPair& pair = pairings_[q].pairs[row.pair[q]];
        bytes_total_ += StoredBytes(*pair.ref) + StoredBytes(*pair.quant);
      }
      rows_.push_back(std::move(row));
    }
    TM_RETURN_IF_ERROR(AdmitAsDiff(" (a comparison counts as a diff)"));
    if (!req_->imatrix().empty()) {
      TM_ASSIGN_OR_RETURN(options_.imatrix,
                          OpenImportanceMatrix(state_->registry.sandbox(),
                                               req_->imatrix(), "imatrix"));
    }
    return absl::OkStatus();
  }

  void StartNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t t = next_;
    state_->pool.SubmitBackground([this, t] { RunTask(t); });
    ++next_;
    ++running_;
  }

  void RunTask(size_t t) {
    const Task task = tasks_[t];  // fixed since Admit
    const TensorPair& p = pairings_[task.q].pairs[rows_[task.row].pair[task.q]];
    auto cell = Fenced(
        {"CompareQuantizations", req_->quantizations(task.q), p.quant->name},
        [&] { return Cell(*quants_[task.q], p); });
    std::vector<v1::CompareRow> rows;  // all of them, for the summary
    {
      absl::MutexLock lock(&mu_);
      if (!cell.ok()) {
        --running_;
        FailLocked(cell.status());  // one failed cell ends the call
        return;
      }
      Pending& row = pending_[task.row];
      *row.row.mutable_cells(task.q) = *std::move(cell);
      bytes_done_ += StoredBytes(*p.ref) + StoredBytes(*p.quant);
      --row.remaining;
      SendReadyRowsLocked();
      if (!cancelled_.load() && next_ < tasks_.size()) StartNextLocked();
      // The last cell: this task makes the summary (the others are done).
      const bool last = running_ == 1 && next_ == tasks_.size() &&
                        sent_ == pending_.size() && !cancelled_.load();
      if (last) rows = std::move(sent_rows_);
      if (!last) {
        --running_;
        PumpLocked();
        return;
      }
    }
    auto summary = Fenced(log_.site(), [&] {
      return SummarizeComparison(*req_, rows, quants_, options_.imatrix.get());
    });
    absl::MutexLock lock(&mu_);
    --running_;
    if (!summary.ok()) {
      FailLocked(summary.status());
      return;
    }
    summary->set_wall_seconds(absl::ToDoubleSeconds(absl::Now() - start_));
    v1::CompareEvent e;
    *e.mutable_summary() = *std::move(summary);
    queue_.push_back(std::move(e));
    summarized_ = true;
    PumpLocked();
  }

  // Queues, in order, the rows whose cells are all done and whose
  // predecessors have gone, each after a progress event.
  void SendReadyRowsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (sent_ < pending_.size() && pending_[sent_].remaining == 0) {
      sent_rows_.push_back(std::move(pending_[sent_].row));
      ++sent_;
      queue_.push_back(Progress());
      v1::CompareEvent e;
      *e.mutable_row() = sent_rows_.back();
      queue_.push_back(std::move(e));
    }
  }

  // One quantization's cell of a row, from the diff QuantDiff makes of it:
  // the files checked for writers before the first read and for changes
  // after the last, as QuantDiff checks them.
  absl::StatusOr<v1::CompareCell> Cell(const Checkpoint& quant,
                                       const TensorPair& p) {
    v1::CompareCell cell;
    cell.set_present(true);
    cell.set_name(p.quant->name);
    cell.set_scheme(p.quant->encoding->info().scheme);
    cell.set_bytes(StoredBytes(*p.quant));
    cell.set_bits_per_weight(
        BitsPerWeight(cell.bytes(), p.quant->num_elements));
    TM_RETURN_IF_ERROR(quant.CheckNoWriters(*p.quant));
    TM_RETURN_IF_ERROR(source_->CheckNoWriters(*p.ref));
    std::unique_ptr<DiffWorkspace> workspace = TakeWorkspace();
    absl::StatusOr<TensorDiff> d =
        DiffTensor(*p.quant, *p.ref, options_, p.row_map, &cancelled_, {},
                   workspace.get());
    {
      absl::MutexLock lock(&mu_);
      workspaces_.push_back(std::move(workspace));
    }
    if (absl::IsUnimplemented(d.status())) {
      // A tensor Tensormorph cannot decode: the row's other cells stand.
      cell.set_undecodable(std::string(d.status().message()));
      return cell;
    }
    TM_RETURN_IF_ERROR(d.status());
    TM_RETURN_IF_ERROR(quant.CheckUnchanged(*p.quant));
    TM_RETURN_IF_ERROR(source_->CheckUnchanged(*p.ref));
    cell.set_sqnr_db(d->sqnr_db);
    cell.set_max_excess_steps(d->max_excess_steps);
    cell.set_clipped(d->clipped);
    cell.set_zeroed_groups(d->zeroed_groups);
    cell.set_mse(d->mse);
    cell.set_sum_squared_error(d->mse * static_cast<double>(d->count));
    // QuantDiff's weighted figures, as its reports carry them.
    cell.set_imatrix_use(ImatrixUseToProto(d->imatrix_use));
    cell.set_imatrix_note(d->imatrix_note);
    cell.set_weighted_error(d->weighted.sum_w_sq_err);
    cell.set_weighted_source_energy(d->weighted.sum_w_xx);
    cell.set_weighted_sqnr_db(d->weighted_sqnr_db);
    return cell;
  }

  // A workspace handed from cell to cell (its buffers stay mapped).
  std::unique_ptr<DiffWorkspace> TakeWorkspace() {
    absl::MutexLock lock(&mu_);
    if (workspaces_.empty()) return std::make_unique<DiffWorkspace>();
    std::unique_ptr<DiffWorkspace> w = std::move(workspaces_.back());
    workspaces_.pop_back();
    return w;
  }

  v1::CompareEvent Progress() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    v1::CompareEvent e;
    v1::DiffProgress* p = e.mutable_progress();
    p->set_tensors_done(static_cast<int64_t>(sent_));
    p->set_tensors_total(static_cast<int64_t>(pending_.size()));
    // As QuantDiff's, the bytes of the pairs: each cell's source and
    // quantized tensors' stored bytes, counted as the cell is done.
    p->set_bytes_done(bytes_done_);
    p->set_bytes_total(bytes_total_);
    p->set_elapsed_seconds(absl::ToDoubleSeconds(absl::Now() - start_));
    return e;
  }

  const v1::CompareQuantizationsRequest* req_;
  const absl::Time start_;
  // Set by Admit, fixed after.
  std::shared_ptr<const Checkpoint> source_;
  // diff's default options, with the request's imatrix.
  DiffOptions options_;
  std::vector<std::shared_ptr<const Checkpoint>> quants_;
  std::vector<Pairing> pairings_;  // per quantization
  std::vector<Row> rows_;          // by source tensor name
  std::vector<Task> tasks_;        // in row order
  int64_t bytes_total_ = 0;        // every cell's pair's stored bytes
  // Rows as their cells come in (the vector itself fixed since Admit).
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  // The rows sent, in order: what the summary is made of (moved out by
  // the task that makes it).
  std::vector<v1::CompareRow> sent_rows_ ABSL_GUARDED_BY(mu_);
  size_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_done_ ABSL_GUARDED_BY(mu_) = 0;  // the done cells' pairs'
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool summarized_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<DiffWorkspace>> workspaces_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerWriteReactor<v1::CompareEvent>* NewCompareQuantizationsReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const v1::CompareQuantizationsRequest* req) {
  return new CompareReactor(std::move(state), ctx, req);
}

}  // namespace tensormorph
