#include "server/service.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/diff/element_verdict.h"
#include "core/diff/row_map.h"
#include "core/error_steps.h"
#include "core/io/fault_guard.h"
#include "core/util/error_reason.h"
#include "core/util/status_macros.h"
#include "core/util/utf8.h"
#include "proto/status_mapping.h"
#include "server/call_log.h"
#include "server/imatrix_lookup.h"
#include "server/list_tensors_reactor.h"
#include "server/proto_convert.h"
#include "server/reference_lookup.h"
#include "server/wire_check.h"

namespace tensormorph {
namespace {

// The project's version, from CMakeLists.txt's project() (the one place it
// is written down).
constexpr char kVersion[] = TENSORMORPH_VERSION;

absl::Status CheckIndex(absl::Span<const int64_t> shape, size_t which,
                        std::vector<int64_t>& coords, int64_t* flat) {
  *flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t c = coords[d];
    if (c < 0) c += shape[d];
    if (c < 0 || c >= shape[d]) {
      return WithReason(
          absl::OutOfRangeError(absl::StrCat(
              "index ", which, ": coordinate ", coords[d],
              " is out of range for dimension ", d, " of size ", shape[d])),
          ErrorReason::kIndexOutOfRange,
          {{"dimension", absl::StrCat(d)}, {"size", absl::StrCat(shape[d])}});
    }
    coords[d] = c;
    *flat = *flat * shape[d] + c;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckLimit(absl::string_view what, int64_t value,
                        absl::string_view limit, int64_t max) {
  if (value >= 0 && value <= max) return absl::OkStatus();
  if (value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be >= 0, got ", value));
  }
  return LimitExceededError(
      absl::StrCat(what, " ", value, " is outside the limit ", limit, " (0 to ",
                   max, ")"),
      limit, max, value);
}

absl::Status CheckReplySize(const google::protobuf::Message& reply,
                            const ServiceLimits& limits) {
  const size_t bytes = reply.ByteSizeLong();
  if (bytes <= static_cast<size_t>(limits.max_reply_bytes)) {
    return absl::OkStatus();
  }
  return LimitExceededError(
      absl::StrCat("the reply would be ", bytes,
                   " bytes, over the limit max_reply_bytes (",
                   limits.max_reply_bytes, "); ask for less per call"),
      "max_reply_bytes", limits.max_reply_bytes, static_cast<int64_t>(bytes));
}

namespace {

// "256 MiB", "1.5 GiB", "1200 bytes": sizes in refusals, as the flags are
// usually given.
std::string ByteCount(int64_t n) {
  if (n < (int64_t{1} << 20)) return absl::StrCat(n, " bytes");
  if (n < (int64_t{1} << 30)) {
    return absl::StrCat(absl::StrFormat("%.4g", n / double{1 << 20}), " MiB");
  }
  return absl::StrCat(absl::StrFormat("%.4g", n / double{1 << 30}), " GiB");
}

}  // namespace

absl::Status ServiceState::StreamLimitReached(PeerLedger::Refusal refusal,
                                              absl::string_view peer) {
  if (refusal == PeerLedger::Refusal::kPeer) {
    refused_streams_per_peer.fetch_add(1);
    return LimitExceededError(
        absl::StrCat("limit max_streams_per_peer (",
                     limits.max_streams_per_peer, ") reached: this client (",
                     EscapeUtf8(peer),
                     ") holds that many streams; end one (read it to the end "
                     "or cancel it) before starting another"),
        "max_streams_per_peer", limits.max_streams_per_peer,
        limits.max_streams_per_peer + 1);
  }
  refused_streams_total.fetch_add(1);
  return LimitExceededError(
      absl::StrCat("limit max_concurrent_streams (",
                   limits.max_concurrent_streams, ") reached; retry later"),
      "max_concurrent_streams", limits.max_concurrent_streams,
      limits.max_concurrent_streams + 1);
}

absl::Status ServiceState::CheckReplyBudget(absl::string_view peer) {
  switch (reply_bytes.Full(peer)) {
    case PeerLedger::Refusal::kNone:
      return absl::OkStatus();
    case PeerLedger::Refusal::kPeer:
      refused_reply_bytes_per_peer.fetch_add(1);
      return LimitExceededError(
          absl::StrCat("limit max_reply_bytes_per_peer (",
                       ByteCount(limits.max_reply_bytes_per_peer),
                       ") reached: ", ByteCount(reply_bytes.held_by(peer)),
                       " of replies to this client (", EscapeUtf8(peer),
                       ") are not yet read; read the replies in flight before "
                       "asking for more"),
          "max_reply_bytes_per_peer", limits.max_reply_bytes_per_peer,
          reply_bytes.held_by(peer));
    case PeerLedger::Refusal::kTotal:
      break;
  }
  refused_reply_bytes_total.fetch_add(1);
  return LimitExceededError(
      absl::StrCat("limit max_reply_bytes_in_flight (",
                   ByteCount(limits.max_reply_bytes_in_flight),
                   ") reached: ", ByteCount(reply_bytes.total()),
                   " of replies to all clients are not yet sent; retry later"),
      "max_reply_bytes_in_flight", limits.max_reply_bytes_in_flight,
      reply_bytes.total());
}

absl::Status ServiceState::HoldReply(absl::string_view peer, int64_t bytes) {
  const PeerLedger::Refusal refusal =
      reply_bytes.TryTake(peer, bytes, /*one_always=*/true);
  if (refusal == PeerLedger::Refusal::kNone) return absl::OkStatus();
  if (refusal == PeerLedger::Refusal::kPeer) {
    refused_reply_bytes_per_peer.fetch_add(1);
    return LimitExceededError(
        absl::StrCat("limit max_reply_bytes_per_peer (",
                     ByteCount(limits.max_reply_bytes_per_peer),
                     "): a reply of ", ByteCount(bytes), " would join ",
                     ByteCount(reply_bytes.held_by(peer)),
                     " of replies to this client (", EscapeUtf8(peer),
                     ") not yet read; read those before asking for more"),
        "max_reply_bytes_per_peer", limits.max_reply_bytes_per_peer,
        reply_bytes.held_by(peer) + bytes);
  }
  refused_reply_bytes_total.fetch_add(1);
  return LimitExceededError(
      absl::StrCat("limit max_reply_bytes_in_flight (",
                   ByteCount(limits.max_reply_bytes_in_flight),
                   "): a reply of ", ByteCount(bytes), " would join ",
                   ByteCount(reply_bytes.total()),
                   " of replies to all clients not yet sent; retry later"),
      "max_reply_bytes_in_flight", limits.max_reply_bytes_in_flight,
      reply_bytes.total() + bytes);
}

absl::Status BudgetedUnaryReactor::Hold(
    const google::protobuf::Message& reply) {
  // The message and its serialization both live until the call is done
  // (gRPC serializes at Finish, and frees the message at OnDone).
  const int64_t bytes = 2 * static_cast<int64_t>(reply.ByteSizeLong());
  TM_RETURN_IF_ERROR(state_.HoldReply(peer_, bytes));
  held_ = bytes;
  return absl::OkStatus();
}

void ServiceState::ReplyDone(absl::string_view peer, int64_t bytes) {
  if (bytes == 0) return;
  reply_bytes.Give(peer, bytes);
  // Big replies leave free heap behind them (the pieces under the mmap
  // threshold, KeepStreamBuffersOnHeap), which glibc keeps: a client that
  // went away with unread replies left 74 MiB resident without this. Small
  // ones leave little, and a trim per small call would cost every call.
  constexpr int64_t kReleaseHeapAfterBytes = int64_t{1} << 20;
  // gRPC frees the reply's slices after OnDone, when it lets go of the
  // call: a trim at once found most of them still held. So it waits a
  // little (on the watchdog's thread), and trims again later, twice, for a
  // call whose connection took longer to go (a loaded box: the full suite
  // beside a build saw 74 MiB kept past the 2 s trim); each trim runs on
  // the pool, and only if no reply came meanwhile.
  if (bytes >= kReleaseHeapAfterBytes && reply_bytes.total() == 0 &&
      !heap_release_pending_.exchange(true)) {
    watchdog.RunAfter(absl::Milliseconds(100), [this] {
      if (reply_bytes.total() == 0) pool.Submit(&ReleaseFreeHeapMemory);
    });
    watchdog.RunAfter(absl::Seconds(2), [this] {
      if (reply_bytes.total() == 0) pool.Submit(&ReleaseFreeHeapMemory);
    });
    watchdog.RunAfter(absl::Seconds(8), [this] {
      heap_release_pending_.store(false);
      if (reply_bytes.total() == 0) pool.Submit(&ReleaseFreeHeapMemory);
    });
  }
}

void BudgetedUnaryReactor::OnDone() {
  state_.ReplyDone(peer_, held_);
  delete this;
}

namespace {

// Levenshtein distance, or more than `bound` (bound + 1) as soon as every
// alignment exceeds it.
size_t EditDistance(absl::string_view a, absl::string_view b, size_t bound) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    size_t best = row[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min(
          {up + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
      best = std::min(best, row[j]);
    }
    if (best > bound) return bound + 1;
  }
  return row[b.size()];
}

// NOT_FOUND TENSOR_NOT_FOUND {checkpoint, tensor} with `message`.
absl::Status TensorNotFound(absl::string_view checkpoint,
                            absl::string_view tensor, std::string message) {
  return WithReason(absl::NotFoundError(message), ErrorReason::kTensorNotFound,
                    {{"checkpoint", std::string(checkpoint)},
                     {"tensor", std::string(tensor)}});
}

// " did you mean 'a', 'b' or 'c'?", or "" with no near name.
std::string DidYouMean(absl::string_view name,
                       const std::vector<absl::string_view>& candidates) {
  const std::vector<std::string> near = NearestNames(name, candidates);
  if (near.empty()) return "";
  std::string out = "; did you mean ";
  for (size_t i = 0; i < near.size(); ++i) {
    if (i > 0) out += i + 1 == near.size() ? " or " : ", ";
    absl::StrAppend(&out, "'", near[i], "'");
  }
  return out + "?";
}

}  // namespace

std::vector<std::string> NearestNames(
    absl::string_view name, const std::vector<absl::string_view>& candidates,
    size_t max) {
  const size_t bound = std::max<size_t>(2, name.size() / 3);
  std::vector<std::pair<size_t, absl::string_view>> scored;
  for (absl::string_view c : candidates) {
    const size_t gap = c.size() > name.size() ? c.size() - name.size()
                                              : name.size() - c.size();
    if (gap > bound || c == name) continue;
    const size_t d = EditDistance(name, c, bound);
    if (d <= bound) scored.emplace_back(d, c);
  }
  std::sort(scored.begin(), scored.end());
  scored.erase(std::unique(scored.begin(), scored.end()), scored.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && out.size() < max; ++i) {
    out.emplace_back(scored[i].second);
  }
  return out;
}

absl::StatusOr<const LogicalTensor*> FindTensorOrError(
    const Checkpoint& ckpt, const std::string& checkpoint_name,
    const std::string& tensor_name, bool part) {
  if (tensor_name.empty()) {
    return absl::InvalidArgumentError("no tensor named in the request");
  }
  const LogicalTensor* t = ckpt.Lookup(tensor_name, part);
  if (t != nullptr) return t;
  // A partial checkpoint: a client talking to this server alone is told
  // where the tensor is, not offered near names.
  if (const Checkpoint::AbsentFile* f = ckpt.AbsentFileFor(tensor_name)) {
    const size_t slash = f->path.find_last_of('/');
    // A logical tensor withheld although its stored tensor of that name is
    // here: its module's other piece (a scale) is in the absent shard.
    const bool half_here = !part && ckpt.FindPart(tensor_name) != nullptr;
    return TensorNotFound(
        checkpoint_name, tensor_name,
        absl::StrCat(
            part ? "stored tensor '" : "tensor '", tensor_name,
            "' of checkpoint '", checkpoint_name,
            half_here
                ? "' is built with stored tensors of its module in shard '"
                : "' is in shard '",
            EscapeUtf8(slash == std::string::npos
                           ? absl::string_view(f->path)
                           : absl::string_view(f->path).substr(slash + 1)),
            "', which this server does not hold (partial checkpoint: it "
            "serves ",
            ckpt.files().size(), " of the index's ",
            ckpt.files().size() + ckpt.absent_files().size(),
            " shard files; give the client every server, --server a,b,c)",
            half_here ? "; its stored part of that name alone is read with "
                        "part=true (--part)"
                      : ""));
  }
  // The names the lookup would have taken: stored parts, and with no
  // `part` the logical tensors too (duplicates collapse in NearestNames).
  std::vector<absl::string_view> names;
  if (!part) {
    for (const LogicalTensor& l : ckpt.tensors()) names.push_back(l.name);
  }
  for (const LogicalTensor* p : ckpt.parts()) names.push_back(p->name);
  if (part) {
    return TensorNotFound(
        checkpoint_name, tensor_name,
        absl::StrCat(
            "stored tensor '", tensor_name, "' not found in checkpoint '",
            checkpoint_name, "' (", ckpt.stored_tensors().size(),
            " stored tensors; `tensormorph ls` lists them under STORED AS)",
            DidYouMean(tensor_name, names)));
  }
  return TensorNotFound(
      checkpoint_name, tensor_name,
      absl::StrCat("tensor '", tensor_name, "' not found in checkpoint '",
                   checkpoint_name, "' (", ckpt.tensors().size(),
                   " tensors; list them with `tensormorph ls`)",
                   DidYouMean(tensor_name, names)));
}

grpc::ServerUnaryReactor* TensormorphService::GetServerInfo(
    grpc::CallbackServerContext* ctx, const v1::GetServerInfoRequest*,
    v1::GetServerInfoResponse* resp) {
  ServiceState& s = *state_;
  s.metrics.calls.fetch_add(1);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const absl::Status status = Fenced({"GetServerInfo"}, [&]() -> absl::Status {
    TM_RETURN_IF_ERROR(CheckNotRefused(s, ctx));
    resp->set_version(kVersion);
    for (const std::string& r : s.registry.sandbox().roots()) {
      resp->add_roots(EscapeUtf8(r));  // a path is bytes; proto3 wants UTF-8
    }
    v1::Limits* l = resp->mutable_limits();
    l->set_max_open_checkpoints(static_cast<int64_t>(s.registry.max_open()));
    l->set_max_scalars_per_call(s.limits.max_scalars_per_call);
    l->set_max_chunk_bytes(s.limits.max_chunk_bytes);
    l->set_workers(s.pool.size());
    l->set_max_reply_bytes(s.limits.max_reply_bytes);
    l->set_max_top_k(s.limits.max_top_k);
    l->set_max_worst_groups(s.limits.max_worst_groups);
    l->set_max_bins(s.limits.max_bins);
    l->set_max_heatmap_side(s.limits.max_heatmap_side);
    l->set_max_heatmap_cells(s.limits.max_heatmap_cells);
    l->set_max_concurrent_streams(s.limits.max_concurrent_streams);
    l->set_max_slice_bytes(s.limits.max_slice_bytes);
    l->set_max_concurrent_diffs(s.limits.max_concurrent_diffs);
    l->set_max_call_seconds(s.limits.max_call_seconds);
    l->set_max_idle_write_seconds(s.limits.max_idle_write_seconds);
    l->set_max_list_depth(s.limits.max_list_depth);
    l->set_max_list_page_size(s.limits.max_list_page_size);
    l->set_max_list_scanned_per_call(s.limits.max_list_scanned_per_call);
    l->set_max_streams_per_peer(s.limits.max_streams_per_peer);
    l->set_max_reply_bytes_in_flight(s.limits.max_reply_bytes_in_flight);
    l->set_max_reply_bytes_per_peer(s.limits.max_reply_bytes_per_peer);
    v1::Counters* c = resp->mutable_counters();
    c->set_calls(s.metrics.calls.load());
    c->set_streams_started(s.metrics.streams_started.load());
    c->set_streams_cancelled(s.metrics.streams_cancelled.load());
    c->set_active_streams(s.metrics.active_streams());
    c->set_chunks_sent(s.metrics.chunks_sent.load());
    c->set_bytes_sent(s.metrics.bytes_sent.load());
    c->set_open_checkpoints(static_cast<int64_t>(s.registry.open_count()));
    c->set_checkpoint_opens(s.registry.opens());
    return absl::OkStatus();
  });
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* TensormorphService::GetCheckpoint(
    grpc::CallbackServerContext* ctx, const v1::GetCheckpointRequest* req,
    v1::GetCheckpointResponse* resp) {
  return RunOnPool(*state_, ctx,
                   CallLog("GetCheckpoint", ctx, req->checkpoint(), ""), resp,
                   [this, req, resp]() -> absl::Status {
                     auto ckpt = state_->registry.Acquire(req->checkpoint());
                     if (!ckpt.ok()) return ckpt.status();
                     resp->set_checkpoint(req->checkpoint());
                     FillCheckpointInfo(**ckpt, resp);
                     return absl::OkStatus();
                   });
}

grpc::ServerUnaryReactor* TensormorphService::GetTensor(
    grpc::CallbackServerContext* ctx, const v1::GetTensorRequest* req,
    v1::GetTensorResponse* resp) {
  return RunOnPool(
      *state_, ctx, CallLog("GetTensor", ctx, req->checkpoint(), req->tensor()),
      resp, [this, req, resp]() -> absl::Status {
        auto ckpt = state_->registry.Acquire(req->checkpoint());
        if (!ckpt.ok()) return ckpt.status();
        auto t = FindTensorOrError(**ckpt, req->checkpoint(), req->tensor(),
                                   req->part());
        if (!t.ok()) return t.status();
        FillTensorInfo(**ckpt, **t, resp->mutable_tensor());
        // A reply the client could not parse would read as a broken
        // server: say which tensor, as ListTensors does.
        if (absl::Status wire = CheckWireSafe(*resp); !wire.ok()) {
          return absl::InternalError(absl::StrCat(
              "GetTensor of '", req->checkpoint(), "': the entry for tensor '",
              EscapeUtf8((*t)->name), "' cannot be sent: ", wire.message()));
        }
        return absl::OkStatus();
      });
}

grpc::ServerWriteReactor<v1::TensorInfo>* TensormorphService::ListTensors(
    grpc::CallbackServerContext* ctx, const v1::ListTensorsRequest* req) {
  return FencedStream<v1::TensorInfo>(
      *state_, ctx, {"ListTensors", req->checkpoint()},
      [&] { return NewListTensorsReactor(state_, ctx, req); });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* TensormorphService::ReadSlice(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req) {
  return FencedStream<grpc::ByteBuffer>(*state_, ctx, {"ReadSlice"}, [&] {
    return NewReadSliceReactor(state_, ctx, req);
  });
}

grpc::ServerWriteReactor<v1::QuantDiffEvent>* TensormorphService::QuantDiff(
    grpc::CallbackServerContext* ctx, const v1::QuantDiffRequest* req) {
  return FencedStream<v1::QuantDiffEvent>(
      *state_, ctx, {"QuantDiff", req->checkpoint()},
      [&] { return NewQuantDiffReactor(state_, ctx, req); });
}

grpc::ServerUnaryReactor* TensormorphService::GetDiffReport(
    grpc::CallbackServerContext* ctx, const v1::GetDiffReportRequest* req,
    v1::GetDiffReportResponse* resp) {
  return RunOnPool(*state_, ctx,
                   CallLog("GetDiffReport", ctx, req->diff().checkpoint(),
                           req->diff().reference()),
                   resp, [this, req, resp]() -> absl::Status {
                     const v1::QuantDiffRequest& diff = req->diff();
                     // Acquired as the diff acquires them: a changed file
                     // reopens its checkpoint, and its new identities no longer
                     // match the report's.
                     auto quant = state_->registry.Acquire(diff.checkpoint());
                     if (!quant.ok()) return quant.status();
                     auto ref = state_->registry.Acquire(diff.reference());
                     if (!ref.ok()) return ref.status();
                     auto kept = state_->diff_reports.Find(
                         DiffReportKey(diff, **quant, **ref),
                         DiffInputsOf(**quant, **ref));
                     if (!kept.ok()) return kept.status();
                     *resp = *std::move(kept);
                     return absl::OkStatus();
                   });
}

grpc::ServerWriteReactor<v1::CheckpointEntry>*
TensormorphService::ListCheckpoints(grpc::CallbackServerContext* ctx,
                                    const v1::ListCheckpointsRequest* req) {
  return FencedStream<v1::CheckpointEntry>(
      *state_, ctx, {"ListCheckpoints", req->directory()},
      [&] { return NewListCheckpointsReactor(state_, ctx, req); });
}

grpc::ServerWriteReactor<v1::CheckEvent>* TensormorphService::CheckCheckpoint(
    grpc::CallbackServerContext* ctx, const v1::CheckCheckpointRequest* req) {
  return FencedStream<v1::CheckEvent>(
      *state_, ctx, {"CheckCheckpoint", req->checkpoint()},
      [&] { return NewCheckCheckpointReactor(state_, ctx, req); });
}

grpc::ServerWriteReactor<v1::TensorSparsity>*
TensormorphService::ComputeSparsity(grpc::CallbackServerContext* ctx,
                                    const v1::ComputeSparsityRequest* req) {
  return FencedStream<v1::TensorSparsity>(
      *state_, ctx, {"ComputeSparsity", req->checkpoint()},
      [&] { return NewComputeSparsityReactor(state_, ctx, req); });
}

grpc::ServerWriteReactor<v1::CompareEvent>*
TensormorphService::CompareQuantizations(
    grpc::CallbackServerContext* ctx,
    const v1::CompareQuantizationsRequest* req) {
  return FencedStream<v1::CompareEvent>(
      *state_, ctx, {"CompareQuantizations", req->source()},
      [&] { return NewCompareQuantizationsReactor(state_, ctx, req); });
}

grpc::ServerUnaryReactor* TensormorphService::GetImportanceMatrix(
    grpc::CallbackServerContext* ctx, const v1::GetImportanceMatrixRequest* req,
    v1::GetImportanceMatrixResponse* resp) {
  return RunOnPool(
      *state_, ctx, CallLog("GetImportanceMatrix", ctx, req->path(), ""), resp,
      [this, req, resp]() -> absl::Status {
        struct stat file = {};
        TM_ASSIGN_OR_RETURN(std::shared_ptr<const ImportanceMatrix> m,
                            OpenImportanceMatrix(state_->registry.sandbox(),
                                                 req->path(), "path", &file));
        FillImportanceMatrix(*m, req->path(), file, resp);
        return absl::OkStatus();
      });
}

namespace {

// Batches this big are inspected by two workers when both are free.
constexpr int64_t kScalarsWorthTwoThreads = 2048;

// Coordinates of row-major `flat` in `shape`, into `coords` (sized rank).
void CoordsOf(const std::vector<int64_t>& shape, int64_t flat,
              std::vector<int64_t>& coords) {
  for (size_t d = shape.size(); d-- > 0;) {
    coords[d] = flat % shape[d];
    flat /= shape[d];
  }
}

// A verdict (core/diff/element_verdict.h) as SourceScalar says it.
void FillVerdict(const ElementVerdict& v, v1::SourceScalar* out) {
  using Kind = ElementVerdict::Kind;
  v1::ElementVerdict verdict = v1::ELEMENT_VERDICT_UNSPECIFIED;
  switch (v.kind) {
    case Kind::kNotANumber:
      break;
    case Kind::kWithin:
      verdict = v1::ELEMENT_VERDICT_WITHIN;
      break;
    case Kind::kNotNearest:
      verdict = v1::ELEMENT_VERDICT_NOT_NEAREST;
      break;
    case Kind::kClipped:
      verdict = v1::ELEMENT_VERDICT_CLIPPED;
      break;
    case Kind::kClippedBeyondBound:
      verdict = v1::ELEMENT_VERDICT_CLIPPED_BEYOND_BOUND;
      break;
    case Kind::kZeroedGroup:
      verdict = v1::ELEMENT_VERDICT_ZEROED_GROUP;
      break;
  }
  out->set_verdict(verdict);
  out->set_bound_steps(v.bound_steps);
  out->set_excess_steps(v.excess_steps);
  out->set_chosen_codes(v.chosen_codes);
}

// Inspects elements flats[begin, end) into resp->scalars(begin, end), and
// with a reference (`ref.tensor` not null) reads each one's source element
// through the row map: all of them under one fault guard (no allocation
// inside it), then the replies.
absl::Status InspectInto(const Encoding& enc, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& flats, int64_t begin,
                         int64_t end, const TensorReference& ref,
                         grpc::CallbackServerContext* ctx,
                         v1::InspectScalarsResponse* resp) {
  std::vector<ScalarInfo> infos(static_cast<size_t>(end - begin));
  const int64_t cols = shape.empty() ? 1 : shape.back();
  std::vector<int64_t> ref_flats;
  std::vector<float> sources;
  std::vector<ElementVerdict> verdicts;
  std::vector<QuantRun> runs;
  runs.reserve(1);  // JudgeElement's, inside the guard
  if (ref.tensor != nullptr) {
    ref_flats.resize(infos.size());
    sources.resize(infos.size());
    verdicts.resize(infos.size());
    for (int64_t i = begin; i < end; ++i) {
      ref_flats[i - begin] = MappedFlatIndex(ref.rows, cols, flats[i]);
    }
  }
  // Random indices miss the cache: ask for the blocks a few indices ahead so
  // the misses overlap (a third of a batch's time otherwise).
  constexpr int64_t kAhead = 8;
  for (int64_t i = begin; i < std::min(end, begin + kAhead); ++i) {
    enc.Prefetch(flats[i]);
  }
  TM_RETURN_IF_ERROR(GuardedRead([&]() -> absl::Status {
    for (int64_t i = begin; i < end; ++i) {
      if (((i - begin) & 1023) == 0 && ctx->IsCancelled()) {
        return absl::CancelledError("client cancelled");
      }
      if (i + kAhead < end) enc.Prefetch(flats[i + kAhead]);
      TM_RETURN_IF_ERROR(enc.Inspect(flats[i], &infos[i - begin]));
      if (ref.tensor != nullptr) {
        TM_RETURN_IF_ERROR(ref.tensor->encoding->Decode(ref_flats[i - begin], 1,
                                                        &sources[i - begin]));
        TM_ASSIGN_OR_RETURN(verdicts[i - begin],
                            JudgeElement(enc, ref.tensor->encoding->info(),
                                         flats[i], sources[i - begin], &runs));
      }
    }
    return absl::OkStatus();
  }));
  std::vector<int64_t> coords(shape.size());
  for (int64_t i = begin; i < end; ++i) {
    const ScalarInfo& info = infos[i - begin];
    v1::ScalarInspection* out = resp->mutable_scalars(static_cast<int>(i));
    CoordsOf(shape, flats[i], coords);
    for (int64_t c : coords) out->add_index(c);
    out->set_flat_index(flats[i]);
    FillScalar(info, out);
    if (ref.tensor == nullptr) continue;
    const float source = sources[i - begin];
    v1::SourceScalar* src = out->mutable_source();
    CoordsOf(shape, ref_flats[i - begin], coords);
    for (int64_t c : coords) src->add_index(c);
    src->set_flat_index(ref_flats[i - begin]);
    src->set_value(source);
    src->set_error(double{info.value} - double{source});
    src->set_error_steps(ElementErrorSteps(source, info.value, info.step_below,
                                           info.step_above));
    FillVerdict(verdicts[i - begin], src);
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// Calls asking for at most this many scalars, on a checkpoint already open,
// run on the gRPC thread that received them (RunInline): their work is a
// few microseconds, a hop to a worker tens, and under a loaded CPU the
// woken worker's wait for a core far more.
constexpr int64_t kScalarsInline = 64;

// The number of scalars `req` asks for: its flat indices, and its
// coordinates counted as whole indices (a count that does not divide by the
// rank is refused later, with the tensor's rank at hand).
int64_t RequestedScalars(const v1::InspectScalarsRequest& req) {
  return int64_t{req.flat_indices_size()} + req.coords_size();
}

}  // namespace

absl::Status TensormorphService::InspectIn(const Checkpoint& ckpt,
                                           grpc::CallbackServerContext* ctx,
                                           const v1::InspectScalarsRequest* req,
                                           v1::InspectScalarsResponse* resp,
                                           bool may_fork) {
  auto t =
      FindTensorOrError(ckpt, req->checkpoint(), req->tensor(), req->part());
  if (!t.ok()) return t.status();
  const std::vector<int64_t>& shape = (*t)->shape;
  const size_t rank = shape.size();
  // The source, paired as the diff pairs it (LookUpReference).
  auto ref = LookUpReference(state_->registry, ckpt, **t, req->reference(),
                             req->reference_tensor());
  if (!ref.ok()) return ref.status();
  // Every index has exactly the tensor's rank. The wire carries the
  // coordinates concatenated, so a count that does not divide is the
  // one mismatch visible here; clients check each index they parse.
  if (rank == 0 && req->coords_size() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", req->tensor(),
        "' has rank 0: its one element takes flat_indices [0], not ",
        req->coords_size(), " coordinates"));
  }
  if (rank > 0 && req->coords_size() % rank != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", req->tensor(), "' has rank ", rank, " (shape [",
        absl::StrJoin(shape, ", "), "]): every index needs exactly ", rank,
        " coordinates, but the ", req->coords_size(),
        " given do not divide into indices of rank ", rank));
  }
  const int64_t n =
      (rank > 0 ? req->coords_size() / static_cast<int64_t>(rank) : 0) +
      req->flat_indices_size();
  if (n > state_->limits.max_scalars_per_call) {
    return LimitExceededError(
        absl::StrCat(
            n, " scalars requested but the limit max_scalars_per_call is ",
            state_->limits.max_scalars_per_call),
        "max_scalars_per_call", state_->limits.max_scalars_per_call, n);
  }
  if ((*t)->num_elements == 0 && n > 0) {
    return absl::OutOfRangeError(absl::StrCat(
        "tensor '", req->tensor(), "' is empty (shape [",
        absl::StrJoin(shape, ", "), "]): it has no elements to inspect"));
  }
  for (int64_t d : shape) resp->add_shape(d);
  FillEncoding((*t)->encoding->info(), resp->mutable_encoding());
  if (ref->tensor != nullptr) {
    resp->set_reference_tensor(ref->tensor->name);
    resp->set_reference_rows_mapped(!ref->rows.empty());
  }
  // Indices are checked first; then every element is inspected under
  // one fault guard (no allocation inside it), then the replies built.
  std::vector<int64_t> flats(static_cast<size_t>(n));
  std::vector<int64_t> coords(rank);
  const int64_t nc =
      rank > 0 ? req->coords_size() / static_cast<int64_t>(rank) : 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i < nc) {
      for (size_t d = 0; d < rank; ++d) coords[d] = req->coords(i * rank + d);
      if (absl::Status s = CheckIndex(shape, i, coords, &flats[i]); !s.ok())
        return s;
    } else {
      flats[i] = req->flat_indices(static_cast<int>(i - nc));
      if (flats[i] < 0 || flats[i] >= (*t)->num_elements) {
        return WithReason(
            absl::OutOfRangeError(absl::StrCat(
                "index ", i, ": flat index ", flats[i], " is out of range for ",
                (*t)->num_elements, " elements")),
            ErrorReason::kIndexOutOfRange,
            {{"dimension", "flat"},
             {"size", absl::StrCat((*t)->num_elements)}});
      }
    }
  }
  // The replies exist before they are filled, so two halves of a big
  // batch can fill theirs at once (the arena allocates thread-safely).
  resp->mutable_scalars()->Reserve(static_cast<int>(n));
  for (int64_t i = 0; i < n; ++i) resp->add_scalars();
  // Before the first read (Acquire found the files unchanged).
  TM_RETURN_IF_ERROR(ckpt.CheckNoWriters(**t));
  if (ref->tensor != nullptr) {
    TM_RETURN_IF_ERROR(ref->ckpt->CheckNoWriters(*ref->tensor));
  }
  const Encoding& enc = *(*t)->encoding;
  auto part = [&](int64_t begin, int64_t end) {
    return InspectInto(enc, shape, flats, begin, end, *ref, ctx, resp);
  };
  if (!may_fork || n < kScalarsWorthTwoThreads || state_->pool.size() < 2) {
    TM_RETURN_IF_ERROR(part(0, n));
  } else {
    absl::Status first, second;
    state_->pool.ForkJoin([&] { first = part(0, n / 2); },
                          [&] { second = part(n / 2, n); });
    TM_RETURN_IF_ERROR(first);
    TM_RETURN_IF_ERROR(second);
  }
  // After the last read: codes and scales read across a rewrite must not
  // pass as one element, nor a source read across one.
  TM_RETURN_IF_ERROR(ckpt.CheckUnchanged(**t));
  return ref->tensor == nullptr ? absl::OkStatus()
                                : ref->ckpt->CheckUnchanged(*ref->tensor);
}

grpc::ServerUnaryReactor* TensormorphService::InspectScalars(
    grpc::CallbackServerContext* ctx, const v1::InspectScalarsRequest* req,
    v1::InspectScalarsResponse* resp) {
  CallLog log("InspectScalars", ctx, req->checkpoint(), req->tensor());
  // With a reference, a second checkpoint may have to be opened: never on
  // a gRPC thread.
  if (RequestedScalars(*req) <= kScalarsInline && req->reference().empty() &&
      CheckNotRefused(*state_, ctx).ok()) {
    if (std::shared_ptr<const Checkpoint> open =
            state_->registry.AcquireIfOpen(req->checkpoint())) {
      return RunInline(*state_, ctx, log, resp,
                       [this, ctx, req, resp, &open]() -> absl::Status {
                         return InspectIn(*open, ctx, req, resp,
                                          /*may_fork=*/false);
                       });
    }
  }
  return RunOnPool(*state_, ctx, std::move(log), resp,
                   [this, ctx, req, resp]() -> absl::Status {
                     auto ckpt = state_->registry.Acquire(req->checkpoint());
                     if (!ckpt.ok()) return ckpt.status();
                     return InspectIn(**ckpt, ctx, req, resp,
                                      /*may_fork=*/true);
                   });
}

}  // namespace tensormorph
