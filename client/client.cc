#include "client/client.h"

#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/endpoint_set.h"
#include "client/message_prefetcher.h"
#include "client/request_utf8.h"
#include "core/util/error_reason.h"
#include "proto/received_chunk.h"
#include "proto/status_mapping.h"

namespace tensormorph {

// The generated stub would parse replies itself, and report a reply that does
// not parse as the end of a stream (Read() returning false, as at the end) or
// as UNIMPLEMENTED "No message returned" for a unary call. So replies are
// received as grpc::ByteBuffer through the same factories the generated
// code calls, and parsed in ParseReply. The methods are registered on the
// channel once, here.
struct Client::Backend {
  using RpcMethod = grpc::internal::RpcMethod;
  Backend(std::string a, std::shared_ptr<grpc::Channel> c)
      : address(std::move(a)),
        channel(std::move(c)),
        get_server_info("/tensormorph.v1.Tensormorph/GetServerInfo",
                        RpcMethod::NORMAL_RPC, channel),
        get_checkpoint("/tensormorph.v1.Tensormorph/GetCheckpoint",
                       RpcMethod::NORMAL_RPC, channel),
        get_tensor("/tensormorph.v1.Tensormorph/GetTensor",
                   RpcMethod::NORMAL_RPC, channel),
        list_tensors("/tensormorph.v1.Tensormorph/ListTensors",
                     RpcMethod::SERVER_STREAMING, channel),
        read_slice("/tensormorph.v1.Tensormorph/ReadSlice",
                   RpcMethod::SERVER_STREAMING, channel),
        inspect_scalars("/tensormorph.v1.Tensormorph/InspectScalars",
                        RpcMethod::NORMAL_RPC, channel),
        quant_diff("/tensormorph.v1.Tensormorph/QuantDiff",
                   RpcMethod::SERVER_STREAMING, channel),
        compute_stats("/tensormorph.v1.Tensormorph/ComputeStats",
                      RpcMethod::NORMAL_RPC, channel),
        get_heatmap("/tensormorph.v1.Tensormorph/GetHeatmap",
                    RpcMethod::NORMAL_RPC, channel),
        get_architecture("/tensormorph.v1.Tensormorph/GetArchitecture",
                         RpcMethod::NORMAL_RPC, channel),
        list_checkpoints("/tensormorph.v1.Tensormorph/ListCheckpoints",
                         RpcMethod::SERVER_STREAMING, channel),
        check_checkpoint("/tensormorph.v1.Tensormorph/CheckCheckpoint",
                         RpcMethod::SERVER_STREAMING, channel),
        compare_quantizations(
            "/tensormorph.v1.Tensormorph/CompareQuantizations",
            RpcMethod::SERVER_STREAMING, channel),
        get_importance_matrix("/tensormorph.v1.Tensormorph/GetImportanceMatrix",
                              RpcMethod::NORMAL_RPC, channel) {}

  // The list entry as written ("127.0.0.1:7431", "dns:///name:7431"); ""
  // for a channel handed to the constructor.
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  RpcMethod get_server_info, get_checkpoint, get_tensor, list_tensors,
      read_slice, inspect_scalars, quant_diff, compute_stats, get_heatmap,
      get_architecture, list_checkpoints, check_checkpoint,
      compare_quantizations, get_importance_matrix;
};

struct Client::Attempt {
  // A reply reached the caller's callback: the call must not be repeated.
  bool delivered = false;
  // The peer gRPC reports for the call ("ipv4:127.0.0.1:7431"), when known.
  std::string peer;
};

namespace {

// "ListTensors" from "/tensormorph.v1.Tensormorph/ListTensors".
absl::string_view CallName(const grpc::internal::RpcMethod& method) {
  absl::string_view path = method.name();
  return path.substr(path.rfind('/') + 1);
}

// `index` counts a stream's replies from 0; -1 for a unary reply.
absl::Status UnparsableReply(const grpc::internal::RpcMethod& method,
                             int64_t index, size_t size,
                             absl::string_view type) {
  return absl::InternalError(absl::StrCat(
      CallName(method), ": reply ",
      index >= 0 ? absl::StrCat("message ", index + 1, " ") : "", "(", size,
      " bytes) does not parse as ", type,
      ", so the call was ended here; a string field that is not valid UTF-8, "
      "or a server of another API version, does this"));
}

template <typename Reply>
absl::Status ParseReply(const grpc::internal::RpcMethod& method,
                        grpc::ByteBuffer* buffer, int64_t index, Reply* reply) {
  const size_t size = buffer->Length();
  if (grpc::SerializationTraits<Reply>::Deserialize(buffer, reply).ok()) {
    return absl::OkStatus();
  }
  return UnparsableReply(method, index, size, Reply::descriptor()->full_name());
}

// The order a slice's chunks come in: the header first and only there,
// each chunk starting where the last ended, all adding up to the header's
// element count. Each refusal is INTERNAL (the stream is wrong, not the
// file).
class ChunkOrder {
 public:
  absl::Status CheckHeader(const v1::SliceChunk& c) {
    if (c.has_header() == (expected_ < 0)) {
      if (c.has_header()) expected_ = c.header().num_elements();
      return absl::OkStatus();
    }
    return absl::InternalError(
        c.has_header() ? "a second slice header mid-stream"
                       : "a slice chunk before the stream's header");
  }
  absl::Status CheckOffset(const v1::SliceChunk& c) {
    if (c.element_offset() != next_) {
      return absl::InternalError(absl::StrCat(
          "chunk at element ", c.element_offset(), " but expected ", next_));
    }
    next_ += c.element_count();
    return absl::OkStatus();
  }
  absl::Status End() const {
    if (expected_ >= 0 && next_ == expected_) return absl::OkStatus();
    return absl::InternalError(
        absl::StrCat("stream ended after ", next_, " of ",
                     std::max<int64_t>(expected_, 0), " elements"));
  }

 private:
  int64_t next_ = 0, expected_ = -1;
};

// A slice longer than this is received on a second thread (a few chunks
// ahead, MessagePrefetcher) while the caller's thread handles the data;
// a shorter one is not worth a thread.
constexpr int64_t kPrefetchAfterBytes = int64_t{4} << 20;
constexpr size_t kPrefetchDepth = 4;

absl::Status CallFailed(const grpc::internal::RpcMethod& method,
                        absl::Duration deadline, const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      deadline != absl::InfiniteDuration()) {
    return absl::DeadlineExceededError(absl::StrCat(
        CallName(method),
        " timed out: no complete reply within its deadline of ",
        absl::FormatDuration(deadline), " (", status.error_message(),
        "; ClientOptions::timeout sets the deadline)"));
  }
  return FromGrpcStatus(status);
}

}  // namespace

std::string ErrorReasonOf(const absl::Status& status) {
  return ReasonNameOf(status);
}

std::map<std::string, std::string> ErrorMetadataOf(const absl::Status& status) {
  const ErrorMetadata metadata = ReasonMetadataOf(status);
  return {metadata.begin(), metadata.end()};
}

namespace {

// The channel arguments of every connected Client.
grpc::ChannelArguments ChannelArgs() {
  grpc::ChannelArguments args;
  // A tensormorphd's replies are at most its Limits.max_reply_bytes, 64 MiB
  // by default; the cap keeps a misbehaving server from exhausting memory.
  args.SetMaxReceiveMessageSize(kMaxReplyBytes);
  // A stream's receive window: fixed at kStreamWindowBytes, without the
  // BDP probe. On loopback the probe's pings kept the window small and
  // halved a 1 GiB ReadSlice (1.9 -> 3.7 GB/s for the bare baseline's
  // stream with this pair, medians of six, tests/bench/NOTES.md); a
  // window this size still fills a 1 Gbit/s link at 100 ms of RTT. It is
  // also what the client may buffer per stream, so memory stays bounded.
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamWindowBytes);
  // A peer that died without closing (a node gone, a network partition) is
  // noticed during a call within about 80 s instead of never: a stream
  // that sends nothing has no deadline. 60 s respects the server's 10 s
  // minimum ping interval; pings only during calls (the server does not
  // permit them on idle connections), however long a call sends no data.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 60'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20'000);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return args;
}

std::shared_ptr<grpc::ChannelCredentials> Credentials(
    const ClientOptions& options) {
  if (options.tls_root_ca.empty() && options.tls_client_cert.empty()) {
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = options.tls_root_ca;
  ssl.pem_cert_chain = options.tls_client_cert;
  ssl.pem_private_key = options.tls_client_key;
  return grpc::SslCredentials(ssl);
}

// gRPC's own round_robin over every address a dns:/// name resolves to:
// gRPC re-resolves the name when a connection fails or goes away, so the
// channel follows pods that come and go; pick_first would send every call
// to the first address.
constexpr char kRoundRobinConfig[] =
    R"({"loadBalancingConfig":[{"round_robin":{}}]})";

// `s` with `message`, its payloads (the reason) kept.
absl::Status Renamed(const absl::Status& s, absl::string_view message) {
  absl::Status out(s.code(), message);
  s.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    out.SetPayload(url, payload);
  });
  return out;
}

// Failures that depend on which server a call went to.
bool NamesItsServer(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const std::string& target, const ClientOptions& options) {
  if (absl::Status s = CheckServerList(target); !s.ok()) return s;
  std::vector<std::string> entries = {target};
  if (IsEndpointList(target)) {
    auto listed = ServerListEntries(target);
    if (!listed.ok()) return listed.status();
    entries = *std::move(listed);
  }
  const std::shared_ptr<grpc::ChannelCredentials> creds = Credentials(options);
  std::vector<std::shared_ptr<const Backend>> backends;
  for (const std::string& entry : entries) {
    grpc::ChannelArguments args = ChannelArgs();
    if (HasDnsName(entry)) args.SetServiceConfigJSON(kRoundRobinConfig);
    backends.push_back(std::make_shared<const Backend>(
        entry, grpc::CreateCustomChannel(entry, creds, args)));
  }
  const bool retry_on_same = entries.size() == 1 && HasDnsName(entries[0]);
  return std::unique_ptr<Client>(
      new Client(std::move(backends), retry_on_same, options));
}

Client::Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options,
               std::shared_ptr<void> keepalive,
               std::shared_ptr<LocalSliceReader> local_slices)
    : backends_{std::make_shared<const Backend>("", std::move(channel))},
      options_(options),
      keepalive_(std::move(keepalive)),
      local_slices_(std::move(local_slices)) {}

Client::Client(std::vector<std::shared_ptr<const Backend>> backends,
               bool retry_on_same, ClientOptions options)
    : backends_(std::move(backends)),
      retry_on_same_(retry_on_same),
      // A random first server: each CLI run is a fresh process, and they
      // would all start on the first one.
      next_(std::random_device()()),
      options_(options) {}

absl::Status Client::WithFailover(
    const std::function<absl::Status(const Backend&, Attempt&)>& call) {
  const size_t n = backends_.size();
  if (n == 1 && !retry_on_same_) {
    Attempt attempt;
    return call(*backends_[0], attempt);
  }
  // "127.0.0.1:7432", or the address a dns:/// name led to.
  auto name = [](const Backend& b, const Attempt& a) {
    const absl::string_view peer = absl::StripPrefix(
        absl::StripPrefix(absl::string_view(a.peer), "ipv4:"), "ipv6:");
    if (!absl::StartsWith(b.address, "dns:") || peer.empty() ||
        peer == b.address) {
      return b.address;
    }
    return absl::StrCat(peer, " (", b.address, ")");
  };
  const size_t i = next_.fetch_add(1) % n;
  const Backend& first = *backends_[i];
  Attempt a;
  const absl::Status s = call(first, a);
  if (!NamesItsServer(s)) return s;
  if (s.code() != absl::StatusCode::kUnavailable || a.delivered) {
    return Renamed(s,
                   absl::StrCat("server ", name(first, a), ": ", s.message()));
  }
  const Backend& second = *backends_[(i + 1) % n];
  Attempt b;
  const absl::Status again = call(second, b);
  if (!NamesItsServer(again)) return again;
  return Renamed(again, absl::StrCat("server ", name(second, b), ": ",
                                     again.message(), " (tried after server ",
                                     name(first, a), ": ", s.message(), ")"));
}

absl::Duration Client::Prepare(grpc::ClientContext* ctx, bool stream) const {
  if (!options_.token.empty())
    ctx->AddMetadata("authorization", "Bearer " + options_.token);
  ctx->set_wait_for_ready(options_.wait_for_ready);
  const absl::Duration timeout = options_.timeout.value_or(
      stream ? absl::InfiniteDuration() : kDefaultUnaryTimeout);
  if (timeout != absl::InfiniteDuration()) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(timeout));
  }
  return timeout;
}

void CallCanceller::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (ctx_ != nullptr) ctx_->TryCancel();
}

void CallCanceller::Attach(grpc::ClientContext* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  ctx_ = ctx;
  // gRPC cancels a call whose context was cancelled before it started.
  if (cancelled_) ctx_->TryCancel();
}

void CallCanceller::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  ctx_ = nullptr;
}

struct Client::Calls {
  using Method = grpc::internal::RpcMethod Backend::*;
  class RawStream;
  template <typename Request, typename Reply>
  static absl::Status Unary(Client& c, Method method, const Request& request,
                            Reply* reply);
  // The same, the reply returned: what most methods are, in one line.
  template <typename Reply, typename Request>
  static absl::StatusOr<Reply> UnaryReply(Client& c, Method method,
                                          const Request& request);
  // A server stream; `on_reply` returning false cancels it.
  template <typename Request, typename Reply>
  static absl::Status Stream(Client& c, Method method, const Request& request,
                             const std::function<bool(const Reply&)>& on_reply,
                             absl::string_view cancelled,
                             CallCanceller* canceller = nullptr);
  // One attempt of Stream on `b`.
  template <typename Request, typename Reply>
  static absl::Status StreamOn(
      Client& c, const Backend& b, Attempt& attempt, Method method,
      const Request& request, const std::function<bool(const Reply&)>& on_reply,
      absl::string_view cancelled, CallCanceller* canceller);
  // One attempt of ReadSlicePieces on `b`.
  static absl::Status ReadPiecesOn(
      Client& c, const Backend& b, Attempt& attempt,
      const v1::ReadSliceRequest& request,
      const std::function<bool(const v1::SliceHeader&)>& on_header,
      const std::function<bool(absl::Span<const absl::string_view>)>& on_pieces,
      CallCanceller* canceller);
};

// One attempt's server stream, its replies read as raw messages: the context
// the client prepares (metadata, deadline), attached to `canceller` (when
// not null) for the whole call, and its reader. Both streaming calls start
// and end their attempts through it.
class Client::Calls::RawStream {
 public:
  template <typename Request>
  RawStream(const Client& c, const Backend& b,
            const grpc::internal::RpcMethod& rpc, const Request& request,
            CallCanceller* canceller)
      : rpc_(rpc), canceller_(canceller) {
    deadline_ = c.Prepare(&ctx_, /*stream=*/true);
    if (canceller_ != nullptr) canceller_->Attach(&ctx_);
    reader_.reset(grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
        b.channel.get(), rpc, &ctx_, request));
  }
  RawStream(const RawStream&) = delete;
  RawStream& operator=(const RawStream&) = delete;
  // Detached before the context goes, whichever way the call ends.
  ~RawStream() {
    if (canceller_ != nullptr) canceller_->Detach();
  }

  grpc::ClientContext* context() { return &ctx_; }
  grpc::ClientReader<grpc::ByteBuffer>* reader() { return reader_.get(); }

  // Ends the call before the stream ends. Finish() alone would wait for a
  // status gRPC delivers only once every queued message has been read.
  void Abandon() {
    ctx_.TryCancel();
    grpc::ByteBuffer rest;
    while (reader_->Read(&rest)) {
    }
    reader_->Finish();
  }

  // After the last message: the call's status, and its peer into `attempt`.
  absl::Status Finish(Attempt& attempt) {
    const grpc::Status s = reader_->Finish();
    attempt.peer = ctx_.peer();
    if (!s.ok()) return CallFailed(rpc_, deadline_, s);
    return absl::OkStatus();
  }

 private:
  const grpc::internal::RpcMethod& rpc_;
  CallCanceller* const canceller_;
  grpc::ClientContext ctx_;  // before the reader, which ends first
  absl::Duration deadline_;
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader_;
};

template <typename Request, typename Reply>
absl::Status Client::Calls::Unary(Client& c, Method method,
                                  const Request& request, Reply* reply) {
  if (absl::Status s = CheckRequestUtf8(request); !s.ok()) return s;
  return c.WithFailover([&](const Backend& b, Attempt& attempt) {
    grpc::ClientContext ctx;
    const absl::Duration deadline = c.Prepare(&ctx, /*stream=*/false);
    grpc::ByteBuffer buffer;
    grpc::Status s =
        grpc::internal::BlockingUnaryCall<Request, grpc::ByteBuffer>(
            b.channel.get(), b.*method, &ctx, request, &buffer);
    attempt.peer = ctx.peer();
    if (!s.ok()) return CallFailed(b.*method, deadline, s);
    return ParseReply(b.*method, &buffer, -1, reply);
  });
}

template <typename Reply, typename Request>
absl::StatusOr<Reply> Client::Calls::UnaryReply(Client& c, Method method,
                                                const Request& request) {
  Reply reply;
  if (absl::Status s = Unary(c, method, request, &reply); !s.ok()) return s;
  return reply;
}

template <typename Request, typename Reply>
absl::Status Client::Calls::Stream(
    Client& c, Method method, const Request& request,
    const std::function<bool(const Reply&)>& on_reply,
    absl::string_view cancelled, CallCanceller* canceller) {
  if (absl::Status s = CheckRequestUtf8(request); !s.ok()) return s;
  return c.WithFailover([&](const Backend& b, Attempt& attempt) {
    return StreamOn<Request, Reply>(c, b, attempt, method, request, on_reply,
                                    cancelled, canceller);
  });
}

template <typename Request, typename Reply>
absl::Status Client::Calls::StreamOn(
    Client& c, const Backend& b, Attempt& attempt, Method method,
    const Request& request, const std::function<bool(const Reply&)>& on_reply,
    absl::string_view cancelled, CallCanceller* canceller) {
  const grpc::internal::RpcMethod& rpc = b.*method;
  RawStream stream(c, b, rpc, request, canceller);
  grpc::ByteBuffer buffer;
  Reply reply;
  for (int64_t i = 0; stream.reader()->Read(&buffer); ++i) {
    if (absl::Status s = ParseReply(rpc, &buffer, i, &reply); !s.ok()) {
      stream.Abandon();
      return s;
    }
    attempt.delivered = true;
    if (!on_reply(reply)) {
      stream.Abandon();
      return absl::CancelledError(cancelled);
    }
  }
  return stream.Finish(attempt);
}

absl::StatusOr<v1::GetServerInfoResponse> Client::GetServerInfo() {
  return Calls::UnaryReply<v1::GetServerInfoResponse>(
      *this, &Backend::get_server_info, v1::GetServerInfoRequest());
}

absl::StatusOr<v1::GetCheckpointResponse> Client::GetCheckpoint(
    const std::string& checkpoint) {
  v1::GetCheckpointRequest req;
  req.set_checkpoint(checkpoint);
  return Calls::UnaryReply<v1::GetCheckpointResponse>(
      *this, &Backend::get_checkpoint, req);
}

absl::StatusOr<v1::GetImportanceMatrixResponse> Client::GetImportanceMatrix(
    const std::string& path) {
  v1::GetImportanceMatrixRequest req;
  req.set_path(path);
  return Calls::UnaryReply<v1::GetImportanceMatrixResponse>(
      *this, &Backend::get_importance_matrix, req);
}

absl::StatusOr<v1::TensorInfo> Client::GetTensor(const std::string& checkpoint,
                                                 const std::string& tensor,
                                                 bool part) {
  v1::GetTensorRequest req;
  req.set_checkpoint(checkpoint);
  req.set_tensor(tensor);
  req.set_part(part);
  v1::GetTensorResponse resp;
  if (absl::Status s = Calls::Unary(*this, &Backend::get_tensor, req, &resp);
      !s.ok()) {
    return s;
  }
  return std::move(*resp.mutable_tensor());
}

absl::Status Client::ListTensors(
    const v1::ListTensorsRequest& first,
    const std::function<void(const v1::TensorInfo&)>& on_tensor) {
  // Every page from first.page_token on (one, unless page_size is set).
  v1::ListTensorsRequest request = first;
  while (true) {
    int64_t received = 0, promised = 0;
    std::string next;
    absl::Status s = Calls::Stream<v1::ListTensorsRequest, v1::TensorInfo>(
        *this, &Backend::list_tensors, request,
        [&](const v1::TensorInfo& t) {
          if (!t.next_page_token().empty()) {
            next = t.next_page_token();  // the page's last message
            return true;
          }
          ++received;
          promised = std::max(promised, t.list_count());
          on_tensor(t);
          return true;
        },
        "");
    if (!s.ok()) return s;
    // INTERNAL, not DATA_LOSS: the file is fine, the stream is not.
    if (received < promised) {
      return absl::InternalError(
          absl::StrCat("ListTensors of '", request.checkpoint(),
                       "': the stream ended after ", received, " of the ",
                       promised, " tensors the server promised"));
    }
    if (next.empty()) return absl::OkStatus();
    // A server that hands back the token it was given would loop forever.
    if (next == request.page_token()) {
      return absl::InternalError(
          "ListTensors: the server gave back the page_token it was asked "
          "for, so the listing would never end");
    }
    request.set_page_token(next);
  }
}

absl::StatusOr<std::vector<v1::TensorInfo>> Client::ListTensors(
    const std::string& checkpoint, const std::string& filter) {
  v1::ListTensorsRequest req;
  req.set_checkpoint(checkpoint);
  req.set_filter(filter);
  std::vector<v1::TensorInfo> out;
  absl::Status s =
      ListTensors(req, [&](const v1::TensorInfo& t) { out.push_back(t); });
  if (!s.ok()) return s;
  return out;
}

absl::Status Client::ReadSlice(
    const v1::ReadSliceRequest& request,
    const std::function<bool(const v1::SliceChunk&)>& on_chunk) {
  return Calls::Stream<v1::ReadSliceRequest, v1::SliceChunk>(
      *this, &Backend::read_slice, request, on_chunk,
      "slice read cancelled by the caller");
}

absl::Status Client::ReadSliceStreaming(
    const v1::ReadSliceRequest& request,
    const std::function<bool(const v1::SliceHeader&)>& on_header,
    const std::function<bool(absl::string_view data)>& on_data) {
  return ReadSlicePieces(request, on_header,
                         [&](absl::Span<const absl::string_view> pieces) {
                           for (absl::string_view p : pieces) {
                             if (!on_data(p)) return false;
                           }
                           return true;
                         });
}

absl::Status Client::ReadSlicePieces(
    const v1::ReadSliceRequest& request,
    const std::function<bool(const v1::SliceHeader&)>& on_header,
    const std::function<bool(absl::Span<const absl::string_view>)>& on_pieces) {
  return ReadSlicePieces(request, on_header, on_pieces, nullptr);
}

absl::Status Client::ReadSlicePieces(
    const v1::ReadSliceRequest& request,
    const std::function<bool(const v1::SliceHeader&)>& on_header,
    const std::function<bool(absl::Span<const absl::string_view>)>& on_pieces,
    CallCanceller* cancel) {
  if (absl::Status s = CheckRequestUtf8(request); !s.ok()) return s;
  if (local_slices_) {
    const absl::Duration timeout =
        options_.timeout.value_or(absl::InfiniteDuration());
    return local_slices_->Read(request, absl::Now() + timeout, on_header,
                               on_pieces);
  }
  return WithFailover([&](const Backend& b, Attempt& attempt) {
    return Calls::ReadPiecesOn(*this, b, attempt, request, on_header, on_pieces,
                               cancel);
  });
}

absl::Status Client::Calls::ReadPiecesOn(
    Client& c, const Backend& b, Attempt& attempt,
    const v1::ReadSliceRequest& request,
    const std::function<bool(const v1::SliceHeader&)>& on_header,
    const std::function<bool(absl::Span<const absl::string_view>)>& on_pieces,
    CallCanceller* canceller) {
  constexpr absl::string_view kCancelled = "slice read cancelled by the caller";
  const grpc::internal::RpcMethod& method = b.read_slice;
  RawStream stream(c, b, method, request, canceller);
  std::optional<MessagePrefetcher> prefetch;  // for a long slice
  auto next = [&](grpc::ByteBuffer* buffer) {
    return prefetch ? prefetch->Next(buffer) : stream.reader()->Read(buffer);
  };
  auto abandon = [&] {
    if (prefetch) prefetch->Stop();
    stream.Abandon();
  };
  ChunkOrder order;
  grpc::ByteBuffer buffer;
  ReceivedChunk chunk;
  std::vector<absl::string_view> pieces;
  for (int64_t i = 0; next(&buffer); ++i) {
    const size_t size = buffer.Length();
    if (!chunk.Parse(&buffer)) {
      abandon();
      return UnparsableReply(method, i, size,
                             v1::SliceChunk::descriptor()->full_name());
    }
    const v1::SliceChunk& ch = chunk.fields();
    if (absl::Status s = order.CheckHeader(ch); !s.ok()) {
      abandon();
      return s;
    }
    if (ch.has_header()) {
      attempt.delivered = true;
      if (!on_header(ch.header())) {
        abandon();
        return absl::CancelledError(kCancelled);
      }
      if (ch.header().total_bytes() > kPrefetchAfterBytes) {
        prefetch.emplace(stream.reader(), stream.context(), kPrefetchDepth);
      }
    }
    if (absl::Status s = order.CheckOffset(ch); !s.ok()) {
      abandon();
      return s;
    }
    chunk.DataPieces(&pieces);
    if (!pieces.empty() && !on_pieces(pieces)) {
      abandon();
      return absl::CancelledError(kCancelled);
    }
  }
  if (prefetch) prefetch->Stop();  // the stream ended: joins its thread
  if (absl::Status s = stream.Finish(attempt); !s.ok()) return s;
  return order.End();
}

absl::StatusOr<SliceData> Client::ReadSliceAll(
    const v1::ReadSliceRequest& request) {
  SliceData out;
  absl::Status s = ReadSliceStreaming(
      request,
      [&](const v1::SliceHeader& h) {
        out.shape.assign(h.shape().begin(), h.shape().end());
        out.dtype = h.dtype();
        out.num_elements = h.num_elements();
        out.bytes.reserve(static_cast<size_t>(h.total_bytes()));
        return true;
      },
      [&](absl::string_view data) {
        out.bytes.append(data.data(), data.size());
        return true;
      });
  if (!s.ok()) return s;
  return out;
}

absl::Status Client::QuantDiff(
    const v1::QuantDiffRequest& request,
    const std::function<bool(const v1::QuantDiffEvent&)>& on_event) {
  return QuantDiff(request, on_event, nullptr);
}

absl::Status Client::QuantDiff(
    const v1::QuantDiffRequest& request,
    const std::function<bool(const v1::QuantDiffEvent&)>& on_event,
    CallCanceller* cancel) {
  return Calls::Stream<v1::QuantDiffRequest, v1::QuantDiffEvent>(
      *this, &Backend::quant_diff, request, on_event,
      "diff cancelled by the caller", cancel);
}

absl::Status Client::CheckCheckpoint(
    const v1::CheckCheckpointRequest& request,
    const std::function<bool(const v1::CheckEvent&)>& on_event) {
  return Calls::Stream<v1::CheckCheckpointRequest, v1::CheckEvent>(
      *this, &Backend::check_checkpoint, request, on_event,
      "check cancelled by the caller");
}

absl::Status Client::CompareQuantizations(
    const v1::CompareQuantizationsRequest& request,
    const std::function<bool(const v1::CompareEvent&)>& on_event) {
  return Calls::Stream<v1::CompareQuantizationsRequest, v1::CompareEvent>(
      *this, &Backend::compare_quantizations, request, on_event,
      "comparison cancelled by the caller");
}

absl::StatusOr<v1::ComputeStatsResponse> Client::ComputeStats(
    const v1::ComputeStatsRequest& request) {
  return Calls::UnaryReply<v1::ComputeStatsResponse>(
      *this, &Backend::compute_stats, request);
}

absl::StatusOr<v1::GetHeatmapResponse> Client::GetHeatmap(
    const v1::GetHeatmapRequest& request) {
  return Calls::UnaryReply<v1::GetHeatmapResponse>(*this, &Backend::get_heatmap,
                                                   request);
}

absl::StatusOr<v1::GetArchitectureResponse> Client::GetArchitecture(
    const std::string& checkpoint) {
  v1::GetArchitectureRequest req;
  req.set_checkpoint(checkpoint);
  return Calls::UnaryReply<v1::GetArchitectureResponse>(
      *this, &Backend::get_architecture, req);
}

absl::StatusOr<v1::InspectScalarsResponse> Client::InspectScalars(
    const v1::InspectScalarsRequest& request) {
  return Calls::UnaryReply<v1::InspectScalarsResponse>(
      *this, &Backend::inspect_scalars, request);
}

absl::Status Client::InspectScalars(const v1::InspectScalarsRequest& request,
                                    v1::InspectScalarsResponse* response) {
  return Calls::Unary(*this, &Backend::inspect_scalars, request, response);
}

absl::Status Client::ListCheckpoints(
    const v1::ListCheckpointsRequest& request,
    const std::function<bool(const v1::CheckpointEntry&)>& on_entry) {
  return Calls::Stream<v1::ListCheckpointsRequest, v1::CheckpointEntry>(
      *this, &Backend::list_checkpoints, request, on_entry,
      "checkpoint listing cancelled by the caller");
}

absl::Status Client::ListAllCheckpoints(
    v1::ListCheckpointsRequest request,
    const std::function<void(const v1::CheckpointEntry&)>& on_entry) {
  while (true) {
    std::string next;
    absl::Status s =
        ListCheckpoints(request, [&](const v1::CheckpointEntry& e) {
          next = e.next_page_token();
          if (!e.path().empty()) on_entry(e);
          return true;
        });
    if (!s.ok()) return s;
    if (next.empty()) return absl::OkStatus();
    // A server that hands back the token it was given would loop forever.
    if (next == request.page_token()) {
      return absl::InternalError(
          "ListCheckpoints: the server gave back the page_token it was asked "
          "for, so the listing would never end");
    }
    request.set_page_token(next);
  }
}

}  // namespace tensormorph
