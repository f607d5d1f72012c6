// The gRPC service: translates the public API to core and back. No numerics
// live here; heavy work runs on the worker pool, never on gRPC's threads.
#ifndef TENSORMORPH_SERVER_SERVICE_H_
#define TENSORMORPH_SERVER_SERVICE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/error_grid.h"
#include "core/format/checkpoint.h"
#include "core/request_limits.h"
#include "core/util/peer_ledger.h"
#include "core/util/status_macros.h"
#include "google/protobuf/message.h"
#include "proto/status_mapping.h"
#include "server/arena_allocator.h"
#include "server/auth.h"
#include "server/auth_interceptor.h"
#include "server/call_log.h"
#include "server/call_stats.h"
#include "server/checkpoint_registry.h"
#include "server/diff_report_store.h"
#include "server/exception_fence.h"
#include "server/kept_results.h"
#include "server/metrics.h"
#include "server/stream_heap.h"
#include "server/stream_watchdog.h"
#include "server/worker_pool.h"
#include "tensormorph/v1/tensormorph.grpc.pb.h"

namespace tensormorph {

// Limits, each answered with RESOURCE_EXHAUSTED naming it.
struct ServiceLimits {
  int64_t max_scalars_per_call = 100'000;
  int64_t max_chunk_bytes = 1 << 20;
  int64_t max_concurrent_streams = 64;  // ReadSlice, ListTensors, QuantDiff
  // Of those, what one peer (PeerHost: its address without the port) may
  // hold, so that one client cannot take every slot.
  int64_t max_streams_per_peer = 16;
  // Bytes of replies built and not yet sent (unary replies until gRPC has
  // sent them, streams' chunks until written), in all and per peer: a
  // client that stops reading holds at most its share of memory. Past
  // either, new calls are refused with RESOURCE_EXHAUSTED naming it (not
  // queued: a waiting call would hold its request and a thread, and the
  // client that stopped reading is the one refused). 0 = no limit.
  int64_t max_reply_bytes_in_flight = int64_t{1} << 30;
  int64_t max_reply_bytes_per_peer = int64_t{256} << 20;
  int64_t max_slice_bytes = int64_t{16} << 30;  // the result of one ReadSlice
  int64_t max_concurrent_diffs = 2;
  int64_t max_call_seconds = 3600;  // streams end past it
  // A stream whose write the client has not taken for this long ends (0: no
  // limit): a stalled client must not hold its slot.
  int64_t max_idle_write_seconds = 60;
  // What one reply may hold. Every reply a legal request can produce fits
  // in max_reply_bytes (the send cap): a request past one of these limits
  // is refused up front with RESOURCE_EXHAUSTED naming it, and a reply that
  // would still not fit (a tensor of extreme rank) is refused the same way
  // instead of failing in the transport.
  int64_t max_reply_bytes = int64_t{64} << 20;
  // Fixed, so the CLI checks them too (core/request_limits.h).
  int64_t max_top_k = kMaxDiffTopK;  // worst elements per diff report
  int64_t max_worst_groups = kMaxDiffWorstGroups;
  int64_t max_bins = kMaxHistogramBins;        // histogram bins of ComputeStats
  int64_t max_heatmap_side = kMaxHeatmapSide;  // cells across or down
  int64_t max_heatmap_cells = kMaxHeatmapCells;  // width * height
  // ListCheckpoints: how deep a listing may reach, entries per page, and
  // directory entries read per call before a page ends early (with a
  // token), so a huge tree never holds a worker for long.
  int64_t max_list_depth = 16;
  int64_t max_list_page_size = 1000;
  int64_t max_list_scanned_per_call = 100'000;
  // GetDiffReport: the last diff reports kept (entries, and the bytes of
  // their serialized events), the least recently used evicted first.
  int64_t diff_reports_kept = 32;
  int64_t diff_reports_bytes = int64_t{64} << 20;
  // GetHeatmap in error mode: the bytes of the error grids kept (4 per
  // element of an F16/BF16 view, else 8; ComputeErrorGrid), the least recently
  // used evicted first, so that zooming and panning one error heatmap reduces
  // cells from its grid instead of decoding both tensors again. 0 = none.
  int64_t error_grids_bytes = int64_t{512} << 20;
};

// INVALID_ARGUMENT when `value` is negative, RESOURCE_EXHAUSTED naming
// `limit` when it is over `max`.
absl::Status CheckLimit(absl::string_view what, int64_t value,
                        absl::string_view limit, int64_t max);

// RESOURCE_EXHAUSTED naming max_reply_bytes when `reply` would not fit.
absl::Status CheckReplySize(const google::protobuf::Message& reply,
                            const ServiceLimits& limits);

// What every call shares. Thread safety: each member is thread-safe.
struct ServiceState {
  ServiceState(PathSandbox sandbox, size_t max_open, int workers,
               ServiceLimits limits, OpenOptions open = {})
      : registry(std::move(sandbox), max_open, open),
        pool(workers),
        limits(limits),
        stream_slots(limits.max_concurrent_streams,
                     limits.max_streams_per_peer),
        reply_bytes(limits.max_reply_bytes_in_flight,
                    limits.max_reply_bytes_per_peer),
        watchdog(absl::Seconds(limits.max_call_seconds),
                 absl::Seconds(limits.max_idle_write_seconds)),
        diff_reports(
            limits.diff_reports_kept,
            std::min(limits.diff_reports_bytes, limits.max_reply_bytes)),
        error_grids("error grid", "it is computed again",
                    limits.error_grids_bytes > 0 ? kMaxErrorGrids : 0,
                    limits.error_grids_bytes) {}
  CheckpointRegistry registry;
  WorkerPool pool;
  Metrics metrics;
  CallStats call_stats;  // by method and status (call_metrics_interceptor.h)
  const ServiceLimits limits;
  TokenStore tokens;  // empty = no authentication
  // Calls the auth interceptor refused (auth_interceptor.h): already ended,
  // their handlers do nothing (RunOnPool, FencedStream, GetServerInfo).
  RefusedCalls refused_calls;
  std::atomic<int64_t> active_diffs{0};
  // ReadSlice, QuantDiff, CheckCheckpoint and ListCheckpoints calls
  // admitted and not yet done (the total of stream_slots).
  std::atomic<int64_t> admitted_streams{0};
  // Their slots by peer: max_concurrent_streams in all,
  // max_streams_per_peer each.
  PeerLedger stream_slots;
  // Bytes of replies not yet sent, by peer: max_reply_bytes_in_flight in
  // all, max_reply_bytes_per_peer each.
  PeerLedger reply_bytes;
  // Calls refused by those two ledgers, by the limit named (/metrics).
  std::atomic<int64_t> refused_streams_total{0};
  std::atomic<int64_t> refused_streams_per_peer{0};
  std::atomic<int64_t> refused_reply_bytes_total{0};
  std::atomic<int64_t> refused_reply_bytes_per_peer{0};
  StreamWatchdog watchdog;  // their time limits
  // Each QuantDiff's report, for GetDiffReport (none larger than a reply).
  DiffReportStore diff_reports;
  // Error heatmaps' grids per (tensor, reference, leading indices), for
  // their zooms and pans (views.cc).
  static constexpr int64_t kMaxErrorGrids = 64;
  KeptResults<ErrorGrid> error_grids;

  // Starts a stream (from its reactor's constructor): a call, and a stream
  // in Counters until StreamEnded.
  void StreamStarted() {
    metrics.calls.fetch_add(1);
    metrics.StreamStarted();
  }

  // Ends a stream (from its reactor's OnDone): counts it cancelled if it
  // was, gives back `peer`'s stream slot if it still holds one, and when it
  // was the last stream, the heap memory the streams kept
  // (KeepStreamBuffersOnHeap) goes back to the system, on the pool.
  void StreamEnded(bool cancelled, bool holds_slot,
                   absl::string_view peer = {}) {
    if (cancelled) metrics.streams_cancelled.fetch_add(1);
    if (holds_slot) ReleaseStream(peer);
    if (metrics.StreamEnded()) pool.Submit(&ReleaseFreeHeapMemory);
  }

  // Takes one of the stream slots for `peer` (PeerHost), or answers
  // RESOURCE_EXHAUSTED naming max_streams_per_peer or
  // max_concurrent_streams, or a reply budget the peer has filled
  // (CheckReplyBudget). Only admitted calls count, so a burst admits
  // exactly the limit. On OK, call ReleaseStream(peer) once.
  absl::Status TryAdmitStream(absl::string_view peer) {
    if (absl::Status budget = CheckReplyBudget(peer); !budget.ok())
      return budget;
    const PeerLedger::Refusal refusal = stream_slots.TryTake(peer, 1);
    if (refusal != PeerLedger::Refusal::kNone) {
      return StreamLimitReached(refusal, peer);
    }
    admitted_streams.fetch_add(1);
    return absl::OkStatus();
  }
  void ReleaseStream(absl::string_view peer) {
    stream_slots.Give(peer, 1);
    admitted_streams.fetch_sub(1);
  }

  // For a stream that is over before it would hold a slot for long (a
  // listing): RESOURCE_EXHAUSTED when every slot, or every one of `peer`'s,
  // is taken.
  absl::Status AdmitStream(absl::string_view peer) {
    if (absl::Status budget = CheckReplyBudget(peer); !budget.ok())
      return budget;
    const PeerLedger::Refusal refusal = stream_slots.Full(peer);
    if (refusal == PeerLedger::Refusal::kNone) return absl::OkStatus();
    return StreamLimitReached(refusal, peer);
  }
  absl::Status StreamLimitReached(PeerLedger::Refusal refusal,
                                  absl::string_view peer);

  // Before a call's work: RESOURCE_EXHAUSTED naming
  // max_reply_bytes_per_peer when `peer`'s replies not yet sent fill its
  // share, or max_reply_bytes_in_flight when all of them fill the total.
  absl::Status CheckReplyBudget(absl::string_view peer);
  // Takes `bytes` of a built reply for `peer` until it is sent, or answers
  // as CheckReplyBudget when they would not fit (one reply is always let
  // through to a peer holding nothing: PeerLedger::TryTake's one_always).
  absl::Status HoldReply(absl::string_view peer, int64_t bytes);
  // Gives back `bytes` of `peer`'s reply, sent or dropped; when none is
  // left in flight, the heap memory replies kept goes back to the system
  // (ReleaseFreeHeapMemory, on the pool; one pending at a time, so a burst
  // of calls asks for it once).
  void ReplyDone(absl::string_view peer, int64_t bytes);

 private:
  std::atomic<bool> heap_release_pending_{false};
};

// A unary call's reactor: holds its reply's bytes in the reply budget from
// when it is built until gRPC reports the call done (OnDone: the reply was
// sent, or the call ended without it), so that replies a client never reads
// count against that client.
class BudgetedUnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  BudgetedUnaryReactor(ServiceState& state, std::string peer)
      : state_(state), peer_(std::move(peer)) {}
  const std::string& peer() const { return peer_; }
  // Holds `reply` (CheckReplySize must have passed: its size is cached) in
  // the budget; call before Finish, at most once.
  absl::Status Hold(const google::protobuf::Message& reply);
  void OnDone() override;

 private:
  ServiceState& state_;
  const std::string peer_;
  int64_t held_ = 0;
};

// Up to `max` of `candidates` nearest to `name` by edit distance, nearest
// first (ties by name), only those close enough to be a slip: at most
// max(2, |name| / 3) edits. Cost: O(|name| * length) per candidate whose
// length is within that bound, so a listing of thousands stays cheap.
std::vector<std::string> NearestNames(
    absl::string_view name, const std::vector<absl::string_view>& candidates,
    size_t max = 3);

// Looks a tensor up by name as Checkpoint::Lookup does: the logical tensor,
// or else the stored part of that name; with `part`, the stored part only.
// Errors: INVALID_ARGUMENT for an empty name; NOT_FOUND naming the tensor
// and the checkpoint, suggesting up to 3 of the checkpoint's names nearest
// to it (NearestNames).
absl::StatusOr<const LogicalTensor*> FindTensorOrError(
    const Checkpoint& ckpt, const std::string& checkpoint_name,
    const std::string& tensor_name, bool part = false);

// UNAUTHENTICATED when the auth interceptor refused the call (and has ended
// it with that status): the handler must then do no work.
inline absl::Status CheckNotRefused(const ServiceState& state,
                                    const grpc::CallbackServerContext* ctx) {
  if (!state.refused_calls.Contains(ctx)) return absl::OkStatus();
  return absl::UnauthenticatedError("refused by the auth interceptor");
}

// CheckNotRefused, then the reply budget of the reactor's peer
// (ServiceState::CheckReplyBudget).
inline absl::Status CheckNotRefusedOrFull(
    ServiceState& state, const grpc::CallbackServerContext* ctx,
    const BudgetedUnaryReactor& reactor) {
  TM_RETURN_IF_ERROR(CheckNotRefused(state, ctx));
  return state.CheckReplyBudget(reactor.peer());
}

// Finishes a unary call with `fn`'s status (logged): `fn` fills `reply`; one
// too big to send ends the call with RESOURCE_EXHAUSTED naming
// max_reply_bytes, and one that does not fit the peer's reply budget
// (ServiceState::HoldReply) with RESOURCE_EXHAUSTED naming that budget. An
// exception from `fn` ends the call with INTERNAL (exception_fence.h).
// With `parking` and `fn` parked in it, returns without finishing: the
// caller runs the call again later.
template <typename Fn>
void FinishUnary(ServiceState& state, BudgetedUnaryReactor* reactor,
                 const google::protobuf::Message* reply, const CallLog& log,
                 Fn& fn,
                 const CheckpointRegistry::ParkingScope* parking = nullptr) {
  const grpc::Status status =
      ToGrpcStatus(Fenced(log.site(), [&]() -> absl::Status {
        TM_RETURN_IF_ERROR(fn());
        TM_RETURN_IF_ERROR(CheckReplySize(*reply, state.limits));
        return reactor->Hold(*reply);
      }));
  if (parking != nullptr && parking->parked()) return;
  // The reply goes first: logging wakes the log's writer, which would
  // otherwise compete with sending it (the log owns copies of what it
  // names, so the call may end meanwhile).
  reactor->Finish(status);
  log.Finish(status, 0);
}

// A unary call's work on the pool, run again from the start (its reply
// cleared) when it parked to wait for another call's open of its
// checkpoint (CheckpointRegistry::ParkingScope), so that waiting holds no
// worker. `fn` must therefore do nothing before its Acquires that it
// cannot do twice.
template <typename Fn>
class ParkableUnary : public std::enable_shared_from_this<ParkableUnary<Fn>> {
 public:
  ParkableUnary(ServiceState& state, BudgetedUnaryReactor* reactor,
                google::protobuf::Message* reply, CallLog log, Fn fn)
      : state_(state),
        reactor_(reactor),
        reply_(reply),
        log_(std::move(log)),
        fn_(std::move(fn)) {}

  void Run() {
    if (runs_++ > 0) reply_->Clear();
    CheckpointRegistry::ParkingScope parking(state_.registry);
    FinishUnary(state_, reactor_, reply_, log_, fn_, &parking);
    if (!parking.parked()) return;
    parking.ResumeWhenOpened([self = this->shared_from_this()] {
      self->state_.pool.SubmitUnary([self] { self->Run(); });
    });
  }

 private:
  ServiceState& state_;
  BudgetedUnaryReactor* const reactor_;
  google::protobuf::Message* const reply_;
  const CallLog log_;
  Fn fn_;
  int runs_ = 0;  // one run at a time: a resumption follows a return
};

// Runs `fn` on the worker pool, unless the auth interceptor refused the
// call or the peer's reply budget is full (CheckReplyBudget: refused before
// any work), and finishes the unary call with its status (FinishUnary). Unary
// work goes ahead of streams' queued chunks (WorkerPool::SubmitUnary). A call
// that waits for another call's open of its checkpoint waits off the pool
// (ParkableUnary).
template <typename Fn>
grpc::ServerUnaryReactor* RunOnPool(ServiceState& state,
                                    grpc::CallbackServerContext* ctx,
                                    CallLog log,
                                    google::protobuf::Message* reply, Fn fn) {
  state.metrics.calls.fetch_add(1);
  auto* reactor = new BudgetedUnaryReactor(state, SharePeer(*ctx));
  const char* method = log.method();
  if (absl::Status refused = CheckNotRefusedOrFull(state, ctx, *reactor);
      !refused.ok()) {
    const grpc::Status status = ToGrpcStatus(refused);
    log.Finish(status, 0);
    reactor->Finish(status);
    return reactor;
  }
  const absl::Status submitted = Fenced({method}, [&] {
    auto task = std::make_shared<ParkableUnary<Fn>>(
        state, reactor, reply, std::move(log), std::move(fn));
    state.pool.SubmitUnary([task] { task->Run(); });
  });
  if (!submitted.ok()) reactor->Finish(ToGrpcStatus(submitted));
  return reactor;
}

// The same on the calling gRPC thread, for work too small to be worth a
// hop to a worker (tens of microseconds, most of a small call): `fn` must
// be bounded and brief, and must not open a checkpoint (that parses a file)
// or block on anything but a page of a mapping.
template <typename Fn>
grpc::ServerUnaryReactor* RunInline(ServiceState& state,
                                    grpc::CallbackServerContext* ctx,
                                    const CallLog& log,
                                    const google::protobuf::Message* reply,
                                    Fn fn) {
  state.metrics.calls.fetch_add(1);
  auto* reactor = new BudgetedUnaryReactor(state, SharePeer(*ctx));
  if (absl::Status refused = CheckNotRefusedOrFull(state, ctx, *reactor);
      !refused.ok()) {
    const grpc::Status status = ToGrpcStatus(refused);
    log.Finish(status, 0);
    reactor->Finish(status);
    return reactor;
  }
  FinishUnary(state, reactor, reply, log, fn);
  return reactor;
}

// A stream that ends at once with `status`: what a handler returns when its
// reactor could not be made.
template <typename Message>
class FinishedWriter final : public grpc::ServerWriteReactor<Message> {
 public:
  explicit FinishedWriter(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

// Makes a stream's reactor; an exception while making it ends the call with
// INTERNAL instead of leaving the handler.
template <typename Message, typename Make>
grpc::ServerWriteReactor<Message>* FencedStream(const FenceSite& site,
                                                Make make) {
  absl::StatusOr<grpc::ServerWriteReactor<Message>*> reactor =
      Fenced(site, [&]() -> absl::StatusOr<grpc::ServerWriteReactor<Message>*> {
        return make();
      });
  if (reactor.ok()) return *reactor;
  return new FinishedWriter<Message>(ToGrpcStatus(reactor.status()));
}

// The same for a call the auth interceptor may have refused: a refused one
// ends at once, before its reactor is made (nothing opened, no slot taken).
template <typename Message, typename Make>
grpc::ServerWriteReactor<Message>* FencedStream(
    const ServiceState& state, const grpc::CallbackServerContext* ctx,
    const FenceSite& site, Make make) {
  if (absl::Status refused = CheckNotRefused(state, ctx); !refused.ok()) {
    return new FinishedWriter<Message>(ToGrpcStatus(refused));
  }
  return FencedStream<Message>(site, std::move(make));
}

// ReadSlice is registered raw: its reactor writes ByteBuffers whose data is
// its own buffer, sent without a serialization copy (read_slice_reactor.cc).
class TensormorphService final
    : public v1::Tensormorph::WithRawCallbackMethod_ReadSlice<
          v1::Tensormorph::CallbackService> {
 public:
  explicit TensormorphService(std::shared_ptr<ServiceState> state)
      : state_(std::move(state)) {
    SetMessageAllocatorFor_InspectScalars(&inspect_allocator_);
  }

  grpc::ServerUnaryReactor* GetServerInfo(
      grpc::CallbackServerContext* ctx, const v1::GetServerInfoRequest* req,
      v1::GetServerInfoResponse* resp) override;
  grpc::ServerUnaryReactor* GetCheckpoint(
      grpc::CallbackServerContext* ctx, const v1::GetCheckpointRequest* req,
      v1::GetCheckpointResponse* resp) override;
  grpc::ServerUnaryReactor* GetTensor(grpc::CallbackServerContext* ctx,
                                      const v1::GetTensorRequest* req,
                                      v1::GetTensorResponse* resp) override;
  grpc::ServerWriteReactor<v1::TensorInfo>* ListTensors(
      grpc::CallbackServerContext* ctx,
      const v1::ListTensorsRequest* req) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* ReadSlice(
      grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req) override;
  grpc::ServerWriteReactor<v1::QuantDiffEvent>* QuantDiff(
      grpc::CallbackServerContext* ctx,
      const v1::QuantDiffRequest* req) override;
  grpc::ServerUnaryReactor* GetDiffReport(
      grpc::CallbackServerContext* ctx, const v1::GetDiffReportRequest* req,
      v1::GetDiffReportResponse* resp) override;
  grpc::ServerUnaryReactor* ComputeStats(
      grpc::CallbackServerContext* ctx, const v1::ComputeStatsRequest* req,
      v1::ComputeStatsResponse* resp) override;
  grpc::ServerUnaryReactor* GetHeatmap(grpc::CallbackServerContext* ctx,
                                       const v1::GetHeatmapRequest* req,
                                       v1::GetHeatmapResponse* resp) override;
  grpc::ServerUnaryReactor* GetArchitecture(
      grpc::CallbackServerContext* ctx, const v1::GetArchitectureRequest* req,
      v1::GetArchitectureResponse* resp) override;
  grpc::ServerUnaryReactor* InspectScalars(
      grpc::CallbackServerContext* ctx, const v1::InspectScalarsRequest* req,
      v1::InspectScalarsResponse* resp) override;
  grpc::ServerWriteReactor<v1::CheckpointEntry>* ListCheckpoints(
      grpc::CallbackServerContext* ctx,
      const v1::ListCheckpointsRequest* req) override;
  grpc::ServerWriteReactor<v1::CheckEvent>* CheckCheckpoint(
      grpc::CallbackServerContext* ctx,
      const v1::CheckCheckpointRequest* req) override;
  grpc::ServerWriteReactor<v1::TensorSparsity>* ComputeSparsity(
      grpc::CallbackServerContext* ctx,
      const v1::ComputeSparsityRequest* req) override;
  grpc::ServerWriteReactor<v1::CompareEvent>* CompareQuantizations(
      grpc::CallbackServerContext* ctx,
      const v1::CompareQuantizationsRequest* req) override;
  grpc::ServerUnaryReactor* GetImportanceMatrix(
      grpc::CallbackServerContext* ctx,
      const v1::GetImportanceMatrixRequest* req,
      v1::GetImportanceMatrixResponse* resp) override;

  ServiceState& state() { return *state_; }

 private:
  // InspectScalars on an acquired checkpoint; `may_fork` lets a big batch
  // take a second worker (never on a gRPC thread). A request's reference
  // is acquired here (LookUpReference): so never inline on a gRPC thread.
  absl::Status InspectIn(const Checkpoint& ckpt,
                         grpc::CallbackServerContext* ctx,
                         const v1::InspectScalarsRequest* req,
                         v1::InspectScalarsResponse* resp, bool may_fork);

  std::shared_ptr<ServiceState> state_;
  ArenaMessageAllocator<v1::InspectScalarsRequest, v1::InspectScalarsResponse>
      inspect_allocator_;
};

// Defined in quant_diff_reactor.cc.
grpc::ServerWriteReactor<v1::QuantDiffEvent>* NewQuantDiffReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const v1::QuantDiffRequest* req);

// Defined in list_checkpoints_reactor.cc.
grpc::ServerWriteReactor<v1::CheckpointEntry>* NewListCheckpointsReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const v1::ListCheckpointsRequest* req);

// Defined in check_checkpoint_reactor.cc.
grpc::ServerWriteReactor<v1::CheckEvent>* NewCheckCheckpointReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const v1::CheckCheckpointRequest* req);

// Defined in compute_sparsity_reactor.cc.
grpc::ServerWriteReactor<v1::TensorSparsity>* NewComputeSparsityReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const v1::ComputeSparsityRequest* req);

// Defined in compare_quantizations_reactor.cc.
grpc::ServerWriteReactor<v1::CompareEvent>* NewCompareQuantizationsReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const v1::CompareQuantizationsRequest* req);

// Defined in read_slice_reactor.cc.
grpc::ServerWriteReactor<grpc::ByteBuffer>* NewReadSliceReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const grpc::ByteBuffer* req);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_SERVICE_H_
