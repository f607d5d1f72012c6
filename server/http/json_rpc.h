// Every RPC of tensormorph.v1.Tensormorph, called by name with its request
// in protobuf's JSON mapping, over a channel to the service (the server's
// in-process channel in tensormorphd), so an HTTP request takes the same
// path through auth, limits and logging as a gRPC call.
#ifndef TENSORMORPH_SERVER_HTTP_JSON_RPC_H_
#define TENSORMORPH_SERVER_HTTP_JSON_RPC_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensormorph/v1/tensormorph.grpc.pb.h"

namespace tensormorph {

// Who an HTTP request came from, carried onto its gRPC call.
struct CallOrigin {
  // The request's Authorization header, verbatim ("Bearer <token>"); sent as
  // the call's "authorization" metadata, which the server's auth checks.
  std::string authorization;
  // The HTTP client's socket ("ADDRESS:PORT") and the request's
  // X-Forwarded-For, for the call log (server/gateway_metadata.h: the server
  // believes them only from this process, and the forwarded address only
  // when `peer` is a trusted proxy).
  std::string peer;
  std::string forwarded_for;
  // "POST /v1/GetTensor": the request the call serves.
  std::string route;
  // When set, made true once a call carrying this origin is about to start:
  // an error after it is the service's (which logged it), one before it the
  // gateway's own refusal.
  bool* sent = nullptr;
  // When set, a unary call is watched while it runs: called with its
  // context just before the call, its handle held until the call is over
  // (DisconnectWatch: the call is cancelled when its HTTP client leaves).
  std::function<std::shared_ptr<void>(grpc::ClientContext*)> watch;
};

// Puts `origin` on `context`. Errors: UNAUTHENTICATED when the header holds
// bytes gRPC metadata cannot carry (outside printable ASCII, or past 8 KiB).
// A forwarded_for gRPC metadata cannot carry is left off.
absl::Status ApplyOrigin(const CallOrigin& origin,
                         grpc::ClientContext* context);

// A message as protobuf's JSON mapping prints it, with fields at their
// defaults printed too (a page need not know proto3's defaults).
std::string MessageToJson(const google::protobuf::Message& message);

// One server-streaming call, its messages as JSON.
// Thread safety: Next and Finish from one thread; Cancel from any.
class JsonStream {
 public:
  virtual ~JsonStream() = default;
  // The next message as JSON; false at the end, after which Finish tells
  // how the call ended.
  virtual bool Next(std::string* json) = 0;
  // Call once, after Next returned false (or after Cancel).
  virtual absl::Status Finish() = 0;
  // Ends the call early (its HTTP client went away); Next then returns false.
  void Cancel() { context_.TryCancel(); }

 protected:
  grpc::ClientContext context_;
};

// Thread safety: one JsonRpc may serve many threads at once.
class JsonRpc {
 public:
  explicit JsonRpc(std::shared_ptr<grpc::Channel> channel);

  // The methods' names, in the service's order.
  std::vector<std::string> MethodNames() const;
  // NOT_FOUND naming the methods when there is no such one.
  absl::StatusOr<bool> IsServerStreaming(absl::string_view method) const;

  // A unary call: the response as JSON. Errors: NOT_FOUND (no such method),
  // INVALID_ARGUMENT (FAILED_PRECONDITION for a streaming method) when the
  // body is not the request in JSON (an empty body is the empty request),
  // else the call's own status.
  absl::StatusOr<std::string> Unary(absl::string_view method,
                                    absl::string_view body,
                                    const CallOrigin& origin) const;
  // GetHeatmap as Unary calls it, its response as the message (for the
  // binary form, heatmap_cells.h); `*mode` learns the request's mode, which
  // the response does not hold. Errors as Unary's.
  absl::StatusOr<v1::GetHeatmapResponse> GetHeatmap(
      absl::string_view body, const CallOrigin& origin,
      v1::HeatmapMode* mode) const;
  // A server-streaming call, started; errors as Unary's, except the call's
  // own, which come through the stream.
  absl::StatusOr<std::unique_ptr<JsonStream>> Stream(
      absl::string_view method, absl::string_view body,
      const CallOrigin& origin) const;

  v1::Tensormorph::Stub& stub() const { return *stub_; }

  // ReadSlice with its messages as they arrive, unparsed (ReceivedChunk
  // reads them without copying their data): the generated stub's call, on
  // the same channel, with grpc::ByteBuffer for the message type.
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> ReadSliceBytes(
      grpc::ClientContext* context, const v1::ReadSliceRequest& req) const;

 private:
  using Stub = v1::Tensormorph::Stub;
  struct Entry {
    std::function<absl::StatusOr<std::string>(Stub&, absl::string_view,
                                              const CallOrigin&)>
        unary;
    std::function<absl::StatusOr<std::unique_ptr<JsonStream>>(
        Stub&, absl::string_view, const CallOrigin&)>
        stream;
  };
  absl::StatusOr<const Entry*> Find(absl::string_view method) const;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stub> stub_;
  const grpc::internal::RpcMethod read_slice_;
  std::vector<std::pair<std::string, Entry>> methods_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_JSON_RPC_H_
