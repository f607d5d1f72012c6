// tensormorph::Client: the public API over gRPC, returning absl::StatusOr.
// Links the generated stubs only: a dashboard that uses it pulls in no
// server and no numerics.
#ifndef TENSORMORPH_CLIENT_CLIENT_H_
#define TENSORMORPH_CLIENT_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "tensormorph/v1/tensormorph.grpc.pb.h"

namespace tensormorph {

// The machine-readable reason of an error a Client call returned: the
// google.rpc.ErrorInfo reason the server sent ("TENSOR_NOT_FOUND",
// "LIMIT_EXCEEDED", ...; docs/errors.md lists every one with its code), or,
// when none came (a refusal before the server's handler ran, a broken
// transport, a client-side error), its code's generic reason
// ("UNAUTHENTICATED", "UNAVAILABLE", "REQUEST_INVALID", ...). "" for OK.
// Branch on this, never on the message.
std::string ErrorReasonOf(const absl::Status& status);
// That ErrorInfo's metadata ("limit" -> "max_slice_bytes", "file" -> ...;
// the keys of each reason in docs/errors.md); empty when none came.
std::map<std::string, std::string> ErrorMetadataOf(const absl::Status& status);

// Unary calls that outlast this fail with DEADLINE_EXCEEDED unless
// ClientOptions::timeout says otherwise: a reply that takes longer is a
// server in trouble, and a script must not wait for it forever.
inline constexpr absl::Duration kDefaultUnaryTimeout = absl::Seconds(60);
// The largest message the client accepts: a tensormorphd's default
// Limits.max_reply_bytes.
inline constexpr int kMaxReplyBytes = 64 << 20;
// The HTTP/2 receive window of each stream (client.cc says why it is
// fixed): what a server may send ahead of the reader, per stream.
inline constexpr int kStreamWindowBytes = 16 << 20;

struct ClientOptions {
  // Deadline of each call. Unset: unary calls get kDefaultUnaryTimeout and
  // streams (ListTensors, ReadSlice, QuantDiff: a diff of 400 GB takes
  // time) none. Set: every call gets it; absl::InfiniteDuration() is none.
  std::optional<absl::Duration> timeout;
  // Sent as "authorization: Bearer <token>" on every call.
  std::string token;
  // TLS: the CA that signed the server's certificate (PEM text); with a
  // client certificate and key for mutual TLS.
  std::string tls_root_ca, tls_client_cert, tls_client_key;
  // Calls wait, until their deadline, for the channel to connect instead of
  // failing at the first refused or failed connect (gRPC's wait_for_ready).
  bool wait_for_ready = false;
};

// A slice assembled into one contiguous buffer.
struct SliceData {
  std::vector<int64_t> shape;
  std::string dtype;  // "F32", or the stored dtype in raw mode
  int64_t num_elements = 0;
  std::string bytes;
  // REQUIRES: dtype == "F32".
  absl::Span<const float> floats() const {
    return {reinterpret_cast<const float*>(bytes.data()), bytes.size() / 4};
  }
};

// Slices read in the caller's own process: EmbeddedClient's service
// hands its chunks straight to the caller (client/embedded/), with no
// serialization and no channel between them. Same header, bytes and errors
// as the ReadSlice RPC of that service.
class LocalSliceReader {
 public:
  virtual ~LocalSliceReader() = default;
  // As Client::ReadSlicePieces; a read past `deadline` ends with
  // DEADLINE_EXCEEDED (absl::InfiniteFuture(): none).
  virtual absl::Status Read(
      const v1::ReadSliceRequest& request, absl::Time deadline,
      const std::function<bool(const v1::SliceHeader&)>& on_header,
      const std::function<bool(absl::Span<const absl::string_view>)>&
          on_pieces) = 0;
};

// Ends a call from another thread: a stream that sends nothing (a peer
// black-holed by the network) never lets its callback return false.
// Thread safety: Cancel may be called from any thread, at any time.
class CallCanceller {
 public:
  // The call given this ends at once with CANCELLED; one not started yet
  // ends so when it starts.
  void Cancel();

 private:
  friend class Client;
  void Attach(grpc::ClientContext* ctx);
  void Detach();

  std::mutex mu_;
  grpc::ClientContext* ctx_ = nullptr;  // the call in flight
  bool cancelled_ = false;
};

// Thread safety: a Client may be used from many threads at once.
// Errors: every method returns the server's status (see tensormorph.proto),
// or UNAVAILABLE when the server cannot be reached, and never hangs past its
// deadline (a call retried on another server, below, gets a deadline of its
// own for the second attempt):
//  - DEADLINE_EXCEEDED naming the call and its deadline;
//  - INTERNAL when a reply cannot be parsed (the call is then cancelled:
//    gRPC would otherwise take the bad reply for the end of a stream, and
//    either drop it silently or wait forever for a status it delivers only
//    after the messages still queued are read), or when ListTensors ends
//    after fewer tensors than it promised.
//
// Several servers: a target may list equivalent servers (each serving every
// checkpoint it is asked for: servers find their own bytes, docs/server.md),
// comma-separated, each "host:port" or "dns:///name:port". The client then
// keeps one gRPC channel per entry (a dns:/// entry's channel spreads its
// calls over every address the name resolves to with gRPC's round_robin,
// and gRPC resolves it again when a connection fails or is closed, as at a
// server's --max-connection-age) and does what a standard gRPC client does,
// nothing more: no placement, no routing by data, no merging of replies.
//  - Spreading: each call goes to the next entry in turn, from a random
//    first one per Client (so that fresh CLI processes spread too).
//  - Failover: a call that fails UNAVAILABLE before any reply reached the
//    caller (a server down, restarting, refusing connections) is tried once
//    more, on the next entry (a lone dns:/// entry: on its channel again,
//    whose round_robin picks an address that is up). Once a reply was
//    handed to a callback the call is never repeated: its failure is
//    returned.
//  - Naming: an UNAVAILABLE or DEADLINE_EXCEEDED of a client of several
//    servers starts "server ADDRESS: " (the address the call went to), and
//    after a failover names the first server's error too; its reason is
//    the server's (or the code's generic one).
class Client {
 public:
  // Connects to a tensormorphd at `target`: "host:port", any other gRPC
  // target ("unix:/path", "ipv4:a:1"), or a list of equivalent servers as
  // above ("a:7431,b:7431", "dns:///tensormorph:7431"). Connections are made
  // lazily; the first call reports UNAVAILABLE if nothing listens (or a
  // dns:/// name does not resolve).
  // Errors: INVALID_ARGUMENT for an empty target or a list entry that is
  // empty or not host:port, naming it (client/endpoint_set.h).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      const std::string& target, const ClientOptions& options = {});

  // `keepalive` is held for the client's lifetime (an embedded server);
  // `local_slices`, when given, serves ReadSliceStreaming and ReadSliceAll
  // in this process instead of the channel (the same service's).
  Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options,
         std::shared_ptr<void> keepalive = nullptr,
         std::shared_ptr<LocalSliceReader> local_slices = nullptr);

  absl::StatusOr<v1::GetServerInfoResponse> GetServerInfo();
  absl::StatusOr<v1::GetCheckpointResponse> GetCheckpoint(
      const std::string& checkpoint);
  // An importance matrix's entries (GetImportanceMatrix): `path` as a
  // checkpoint's. Errors: the call's (DATA_LOSS HEADER_INVALID {file, rule}
  // for a file that breaks a rule of its form).
  absl::StatusOr<v1::GetImportanceMatrixResponse> GetImportanceMatrix(
      const std::string& path);

  // One tensor by exact name: the logical tensor, or else the stored part of
  // that name; with `part`, the stored part only (see PART_NAMES in
  // tensormorph.proto). NOT_FOUND suggests the nearest names.
  absl::StatusOr<v1::TensorInfo> GetTensor(const std::string& checkpoint,
                                           const std::string& tensor,
                                           bool part = false);

  // Calls `on_tensor` for each tensor as it arrives, every page from
  // request.page_token on (one call unless page_size is set; the messages
  // that carry only a token are not passed on); checks that each page
  // brings as many as the server promised (TensorInfo.list_count).
  absl::Status ListTensors(
      const v1::ListTensorsRequest& request,
      const std::function<void(const v1::TensorInfo&)>& on_tensor);
  absl::StatusOr<std::vector<v1::TensorInfo>> ListTensors(
      const std::string& checkpoint, const std::string& filter = "");

  // Calls `on_chunk` for each chunk in order; returning false cancels the
  // stream (the call then returns CANCELLED).
  absl::Status ReadSlice(
      const v1::ReadSliceRequest& request,
      const std::function<bool(const v1::SliceChunk&)>& on_chunk);
  // A slice as it arrives, checked as it comes (chunks in order, adding up
  // to the header's element count): `on_header` once, then `on_pieces`
  // once per chunk with its bytes, as the pieces they were received in
  // (in order, their concatenation the chunk's data: handed on where they
  // arrived, never copied into one string, ready for one writev(2)). Both
  // run on the caller's thread. Memory is a few chunks and a stream's
  // window (kStreamWindowBytes) whatever the slice's size: what a caller
  // writing to a file or a socket wants; a long slice is received on a
  // second thread while the caller's handles the data. Either callback
  // returning false cancels the read (CANCELLED); a stream that breaks the
  // order or ends short is INTERNAL.
  absl::Status ReadSlicePieces(
      const v1::ReadSliceRequest& request,
      const std::function<bool(const v1::SliceHeader&)>& on_header,
      const std::function<bool(absl::Span<const absl::string_view>)>&
          on_pieces);
  // The same, ended from another thread by `cancel` (CANCELLED), even while
  // no chunk arrives: a caller that must stay interruptible (the Python
  // module's Ctrl-C) cannot wait for a callback. A client with
  // `local_slices` ignores `cancel`.
  absl::Status ReadSlicePieces(
      const v1::ReadSliceRequest& request,
      const std::function<bool(const v1::SliceHeader&)>& on_header,
      const std::function<bool(absl::Span<const absl::string_view>)>& on_pieces,
      CallCanceller* cancel);
  // The same with `on_data` called once per piece, in order.
  absl::Status ReadSliceStreaming(
      const v1::ReadSliceRequest& request,
      const std::function<bool(const v1::SliceHeader&)>& on_header,
      const std::function<bool(absl::string_view data)>& on_data);
  // Reads a whole slice into one buffer (ReadSliceStreaming's checks), for a
  // caller that wants the whole array in memory.
  absl::StatusOr<SliceData> ReadSliceAll(const v1::ReadSliceRequest& request);

  absl::StatusOr<v1::InspectScalarsResponse> InspectScalars(
      const v1::InspectScalarsRequest& request);
  // The same into `response`, which may live on a google::protobuf::Arena:
  // parsing a batch of thousands then allocates nothing per scalar, and
  // dropping it frees nothing per scalar (a third faster at 10,000).
  absl::Status InspectScalars(const v1::InspectScalarsRequest& request,
                              v1::InspectScalarsResponse* response);

  absl::StatusOr<v1::ComputeStatsResponse> ComputeStats(
      const v1::ComputeStatsRequest& request);
  absl::StatusOr<v1::GetHeatmapResponse> GetHeatmap(
      const v1::GetHeatmapRequest& request);
  absl::StatusOr<v1::GetArchitectureResponse> GetArchitecture(
      const std::string& checkpoint);

  // One page of ListCheckpoints: calls `on_entry` for each entry; returning
  // false cancels the stream (the call then returns CANCELLED).
  absl::Status ListCheckpoints(
      const v1::ListCheckpointsRequest& request,
      const std::function<bool(const v1::CheckpointEntry&)>& on_entry);
  // Every page of `request` from its page_token on, each page asked for as
  // the last one's next_page_token says; calls `on_entry` for each
  // checkpoint (entries that only carry a token are not passed on).
  absl::Status ListAllCheckpoints(
      v1::ListCheckpointsRequest request,
      const std::function<void(const v1::CheckpointEntry&)>& on_entry);

  // Calls `on_event` for each progress, tensor and summary event; returning
  // false cancels the diff (the call then returns CANCELLED).
  absl::Status QuantDiff(
      const v1::QuantDiffRequest& request,
      const std::function<bool(const v1::QuantDiffEvent&)>& on_event);
  // The same, ended from another thread by `cancel`.
  absl::Status QuantDiff(
      const v1::QuantDiffRequest& request,
      const std::function<bool(const v1::QuantDiffEvent&)>& on_event,
      CallCanceller* cancel);

  // Calls `on_event` for each progress, finding, hash and summary event of
  // CheckCheckpoint; returning false cancels the check (the call then
  // returns CANCELLED).
  absl::Status CheckCheckpoint(
      const v1::CheckCheckpointRequest& request,
      const std::function<bool(const v1::CheckEvent&)>& on_event);

  // Calls `on_event` for each progress, row and summary event of
  // CompareQuantizations; returning false cancels the comparison (the call
  // then returns CANCELLED).
  absl::Status CompareQuantizations(
      const v1::CompareQuantizationsRequest& request,
      const std::function<bool(const v1::CompareEvent&)>& on_event);

 private:
  // One server of the target (an entry of its list): its address as
  // written and a channel with the service's methods registered on it.
  struct Backend;
  // What one attempt of a call tells the failover (client.cc).
  struct Attempt;

  // Sets the token and the deadline; returns the deadline set (infinite for
  // none), for messages.
  absl::Duration Prepare(grpc::ClientContext* ctx, bool stream) const;
  // The unary and streaming calls over a Backend, defined in client.cc: the
  // call plumbing they use is gRPC's internal API, which this installed
  // header does not show. Replies arrive as bytes and are parsed there, so a
  // reply that does not parse is told apart from the end of a stream (see the
  // class comment).
  struct Calls;

  Client(std::vector<std::shared_ptr<const Backend>> backends,
         bool retry_on_same, ClientOptions options);

  // Runs `call` on a backend, then on another as the class comment's
  // failover says; the status names the server as it says.
  absl::Status WithFailover(
      const std::function<absl::Status(const Backend&, Attempt&)>& call);

  std::vector<std::shared_ptr<const Backend>> backends_;  // never empty
  // A lone dns:/// entry: a failover retries on its channel.
  bool retry_on_same_ = false;
  std::atomic<uint64_t> next_{0};  // the backend of the next call
  ClientOptions options_;
  std::shared_ptr<void> keepalive_;
  std::shared_ptr<LocalSliceReader> local_slices_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLIENT_H_
