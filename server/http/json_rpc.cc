#include "server/http/json_rpc.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/request_limits.h"
#include "proto/json_print.h"
#include "proto/status_mapping.h"
#include "server/gateway_metadata.h"

namespace tensormorph {
namespace {

using Stub = v1::Tensormorph::Stub;

// Metadata values travel as HTTP/2 header values: printable ASCII only.
constexpr size_t kMaxAuthorizationBytes = 8 << 10;

template <class Req>
absl::StatusOr<Req> ParseRequest(absl::string_view body,
                                 absl::string_view method) {
  Req req;
  if (absl::StripAsciiWhitespace(body).empty()) return req;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;  // a misspelt field is an error
  const auto s = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(body.data(), body.size()), &req, options);
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the body of ", method, " is not a ", Req::descriptor()->full_name(),
        " in protobuf's JSON mapping: ",
        std::string(s.message().data(), s.message().size())));
  }
  // Said here, rather than by gRPC's "Received message larger than max".
  if (req.ByteSizeLong() > static_cast<size_t>(kMaxRequestBytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the ", method, " request is ", req.ByteSizeLong(),
                     " bytes as protobuf, past the ", kMaxRequestBytes >> 20,
                     " MiB a server takes; split it into several calls"));
  }
  return req;
}

template <class Resp>
class TypedStream : public JsonStream {
 public:
  template <class Req>
  absl::Status Start(Stub& stub,
                     std::unique_ptr<grpc::ClientReader<Resp>> (Stub::*fn)(
                         grpc::ClientContext*, const Req&),
                     const Req& req, const CallOrigin& origin) {
    if (absl::Status s = ApplyOrigin(origin, &context_); !s.ok()) return s;
    reader_ = (stub.*fn)(&context_, req);
    return absl::OkStatus();
  }
  bool Next(std::string* json) override {
    if (!reader_->Read(&message_)) return false;
    *json = MessageToJson(message_);
    return true;
  }
  absl::Status Finish() override {
    // gRPC's Finish waits for the messages still queued to be read.
    while (reader_->Read(&message_)) {
    }
    return FromGrpcStatus(reader_->Finish());
  }

 private:
  std::unique_ptr<grpc::ClientReader<Resp>> reader_;
  Resp message_;
};

// A unary call with its request in JSON: the response as the message.
template <class Req, class Resp>
absl::StatusOr<Resp> CallWithJson(
    Stub& stub, const char* name,
    grpc::Status (Stub::*fn)(grpc::ClientContext*, const Req&, Resp*),
    absl::string_view body, const CallOrigin& origin,
    const std::function<void(const Req&)>& parsed = nullptr) {
  absl::StatusOr<Req> req = ParseRequest<Req>(body, name);
  if (!req.ok()) return req.status();
  if (parsed) parsed(*req);
  grpc::ClientContext context;
  if (absl::Status s = ApplyOrigin(origin, &context); !s.ok()) return s;
  Resp resp;
  const std::shared_ptr<void> watching =
      origin.watch ? origin.watch(&context) : nullptr;
  const grpc::Status s = (stub.*fn)(&context, *req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return resp;
}

template <class Req, class Resp>
auto UnaryCall(const char* name, grpc::Status (Stub::*fn)(grpc::ClientContext*,
                                                          const Req&, Resp*)) {
  return [name, fn](Stub& stub, absl::string_view body,
                    const CallOrigin& origin) -> absl::StatusOr<std::string> {
    absl::StatusOr<Resp> resp =
        CallWithJson<Req, Resp>(stub, name, fn, body, origin);
    if (!resp.ok()) return resp.status();
    return MessageToJson(*resp);
  };
}

template <class Req, class Resp>
auto StreamingCall(const char* name,
                   std::unique_ptr<grpc::ClientReader<Resp>> (Stub::*fn)(
                       grpc::ClientContext*, const Req&)) {
  return
      [name, fn](Stub& stub, absl::string_view body, const CallOrigin& origin)
          -> absl::StatusOr<std::unique_ptr<JsonStream>> {
        absl::StatusOr<Req> req = ParseRequest<Req>(body, name);
        if (!req.ok()) return req.status();
        auto stream = std::make_unique<TypedStream<Resp>>();
        if (absl::Status s = stream->Start(stub, fn, *req, origin); !s.ok()) {
          return s;
        }
        return std::unique_ptr<JsonStream>(std::move(stream));
      };
}

}  // namespace

absl::Status ApplyOrigin(const CallOrigin& origin,
                         grpc::ClientContext* context) {
  if (!origin.authorization.empty()) {
    if (origin.authorization.size() > kMaxAuthorizationBytes) {
      return absl::UnauthenticatedError(absl::StrCat(
          "the Authorization header is ", origin.authorization.size(),
          " bytes, past the ", kMaxAuthorizationBytes, " allowed"));
    }
    for (const char c : origin.authorization) {
      if (c < 0x20 || c > 0x7e) {
        return absl::UnauthenticatedError(
            "the Authorization header holds a byte outside printable ASCII");
      }
    }
    context->AddMetadata("authorization", origin.authorization);
  }
  if (!origin.peer.empty()) context->AddMetadata(kGatewayPeerKey, origin.peer);
  if (!origin.forwarded_for.empty() &&
      origin.forwarded_for.size() <= kMaxAuthorizationBytes &&
      std::all_of(origin.forwarded_for.begin(), origin.forwarded_for.end(),
                  [](char c) { return c >= 0x20 && c <= 0x7e; })) {
    context->AddMetadata(kGatewayForwardedForKey, origin.forwarded_for);
  }
  if (!origin.route.empty() && origin.route.size() <= kMaxAuthorizationBytes &&
      std::all_of(origin.route.begin(), origin.route.end(),
                  [](char c) { return c >= 0x20 && c <= 0x7e; })) {
    context->AddMetadata(kGatewayRouteKey, origin.route);
  }
  if (origin.sent != nullptr) *origin.sent = true;
  return absl::OkStatus();
}

std::string MessageToJson(const google::protobuf::Message& message) {
  // protobuf's own printer with always_print_primitive_fields, some 10x
  // faster; heatmap replies run to tens of MB.
  return PrintMessageJson(message);
}

JsonRpc::JsonRpc(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)),
      stub_(v1::Tensormorph::NewStub(channel_)),
      read_slice_("/tensormorph.v1.Tensormorph/ReadSlice",
                  grpc::internal::RpcMethod::SERVER_STREAMING, channel_) {
  const auto unary = [this](const char* name, auto fn) {
    methods_.push_back({name, Entry{UnaryCall(name, fn), nullptr}});
  };
  const auto streaming = [this](const char* name, auto fn) {
    methods_.push_back({name, Entry{nullptr, StreamingCall(name, fn)}});
  };
  // In the order of tensormorph.proto; json_rpc_test checks that every
  // method of the service is here.
  unary("GetServerInfo", &Stub::GetServerInfo);
  unary("GetCheckpoint", &Stub::GetCheckpoint);
  unary("GetTensor", &Stub::GetTensor);
  streaming("ListTensors", &Stub::ListTensors);
  streaming("ReadSlice", &Stub::ReadSlice);
  unary("InspectScalars", &Stub::InspectScalars);
  streaming("QuantDiff", &Stub::QuantDiff);
  unary("GetDiffReport", &Stub::GetDiffReport);
  unary("ComputeStats", &Stub::ComputeStats);
  unary("GetHeatmap", &Stub::GetHeatmap);
  unary("GetArchitecture", &Stub::GetArchitecture);
  streaming("ListCheckpoints", &Stub::ListCheckpoints);
  streaming("CheckCheckpoint", &Stub::CheckCheckpoint);
  streaming("ComputeSparsity", &Stub::ComputeSparsity);
  streaming("CompareQuantizations", &Stub::CompareQuantizations);
  unary("GetImportanceMatrix", &Stub::GetImportanceMatrix);
}

std::vector<std::string> JsonRpc::MethodNames() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : methods_) names.push_back(name);
  return names;
}

absl::StatusOr<const JsonRpc::Entry*> JsonRpc::Find(
    absl::string_view method) const {
  for (const auto& [name, entry] : methods_) {
    if (name == method) return &entry;
  }
  return absl::NotFoundError(absl::StrCat("no method '", method,
                                          "'; the methods are ",
                                          absl::StrJoin(MethodNames(), ", ")));
}

absl::StatusOr<bool> JsonRpc::IsServerStreaming(
    absl::string_view method) const {
  absl::StatusOr<const Entry*> entry = Find(method);
  if (!entry.ok()) return entry.status();
  return (*entry)->stream != nullptr;
}

absl::StatusOr<std::string> JsonRpc::Unary(absl::string_view method,
                                           absl::string_view body,
                                           const CallOrigin& origin) const {
  absl::StatusOr<const Entry*> entry = Find(method);
  if (!entry.ok()) return entry.status();
  if ((*entry)->unary == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(method, " is a server-streaming method"));
  }
  return (*entry)->unary(*stub_, body, origin);
}

std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> JsonRpc::ReadSliceBytes(
    grpc::ClientContext* context, const v1::ReadSliceRequest& req) const {
  // What the generated Stub::ReadSlice does, with another message type.
  return std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>>(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channel_.get(), read_slice_, context, req));
}

absl::StatusOr<v1::GetHeatmapResponse> JsonRpc::GetHeatmap(
    absl::string_view body, const CallOrigin& origin,
    v1::HeatmapMode* mode) const {
  return CallWithJson<v1::GetHeatmapRequest, v1::GetHeatmapResponse>(
      *stub_, "GetHeatmap", &Stub::GetHeatmap, body, origin,
      [mode](const v1::GetHeatmapRequest& req) { *mode = req.mode(); });
}

absl::StatusOr<std::unique_ptr<JsonStream>> JsonRpc::Stream(
    absl::string_view method, absl::string_view body,
    const CallOrigin& origin) const {
  absl::StatusOr<const Entry*> entry = Find(method);
  if (!entry.ok()) return entry.status();
  if ((*entry)->stream == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(method, " is a unary method"));
  }
  return (*entry)->stream(*stub_, body, origin);
}

}  // namespace tensormorph
